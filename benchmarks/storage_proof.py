"""Do batches reach the learner as the workers wrote them? Trains with every batch checksummed (a GPU proof run).

    python benchmarks/storage_proof.py --task Isaac-Cartpole-Direct --num_envs 4096 --device cuda:0 \\
        --max_iterations 300 [--async] [agent.collector.storing_device=cuda:0 ...] [--json out.json]

The training is ``scripts/train.py``'s runner with its NaN check, no logs. Each collector worker, once its rollout
is complete (after the runner's own hand-over wait) and before it hands the rollout over, takes a float64 digest
of every environment's rollout (the sum of all floating-point entries over time) and writes it to a file. The
learner takes the same digest of each batch after its copy and looks for the worker's: a batch part that matches
no published rollout is corrupted, one that matches a rollout already consumed is stale. Exit status 1 when any
was found; the counts are printed and, with ``--json``, written.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile

import torch
from tensordict import TensorDictBase

import isaaclab_torchrl  # noqa: F401  (registers the torchrl agents on Isaac Lab's tasks)
from isaaclab_torchrl import training
from isaaclab_torchrl.cli import make_train_parser, parse_args
from isaaclab_torchrl.interfaces import read_env_interface
from isaaclab_torchrl.runners import TorchRLRunner
from isaaclab_torchrl.runners.collection import Collection, PublishRollout

NAN_VALUE = 0.123456789
RELATIVE_TOLERANCE = 1e-9
"""Between a worker's digest and the learner's (the same sums, possibly reduced in another order)."""


def rollout_digest(rollout: TensorDictBase) -> torch.Tensor:
    """One float64 per environment: the sum of every floating-point entry of its rollout (``[envs, time, ...]``)."""
    rows = rollout.shape[0]
    total = torch.zeros(rows, dtype=torch.float64, device=rollout.device)
    for key in sorted(rollout.keys(True, True), key=str):
        value = rollout.get(key)
        if value.is_floating_point() and not (isinstance(key, str) and key.startswith("_")):
            value = value.reshape(rows, -1).double()
            # the episode-log entries are NaN where no episode ended: each NaN counts as a constant
            total += torch.where(value.isnan(), NAN_VALUE, value).sum(-1)
    return total


class PublishDigest(PublishRollout):
    """The runner's hand-over wait, then the rollout's digest written to ``<folder>/<pid>_<n>.pt``."""

    def __init__(self, folder: str):
        self.folder = folder
        self.count = 0

    def __call__(self, rollout: TensorDictBase) -> None:
        super().__call__(rollout)
        path = os.path.join(self.folder, f"{os.getpid()}_{self.count}.pt")
        torch.save(rollout_digest(rollout).cpu(), path + ".tmp")
        os.replace(path + ".tmp", path)  # complete before the learner can look for it
        self.count += 1


class CheckedCollection(Collection):
    """The runner's collection, checking every batch against the digests its workers published."""

    folder: str = ""
    results = {"batches": 0, "parts": 0, "corrupted": 0, "stale": 0, "max_relative_error": 0.0}

    def rollout_hook(self) -> PublishRollout:
        return PublishDigest(self.folder)

    def __iter__(self):
        consumed = []
        rows = self.env_factories[0].num_envs
        for batch in super().__iter__():
            digest = rollout_digest(batch.reshape(-1, batch.shape[-1])).cpu()
            published = {name: torch.load(os.path.join(self.folder, name)) for name in os.listdir(self.folder)}
            published = {name: value for name, value in published.items() if not name.endswith(".tmp")}
            for part in digest.split(rows):
                self.results["parts"] += 1
                match = next((name for name, value in published.items() if _close(value, part)), None)
                if match is not None:
                    os.remove(os.path.join(self.folder, match))
                    consumed.append(published.pop(match))
                elif any(_close(value, part) for value in consumed):
                    self.results["stale"] += 1
                else:
                    self.results["corrupted"] += 1
                    errors = [_relative_error(value, part) for value in published.values()]
                    print(f"[proof] batch {self.results['batches'] + 1}: a part matches no rollout", flush=True)
                    if errors:
                        self.results["max_relative_error"] = max(self.results["max_relative_error"], min(errors))
            self.results["batches"] += 1
            yield batch


def _relative_error(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(((a - b).abs() / (1.0 + a.abs())).max()) if a.shape == b.shape else float("inf")


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and _relative_error(a, b) <= RELATIVE_TOLERANCE


class CheckedRunner(TorchRLRunner):
    collection_class = CheckedCollection


def main(argv: list[str]) -> int:
    parser = make_train_parser()
    parser.add_argument("--json", default=None)
    args, hydra_args = parse_args(parser, [*argv, "agent.check_for_nan=true"])
    if args.max_iterations is None:
        args.max_iterations = 300
    if args.async_collection is None:
        args.async_collection = False
    run = training.TrainingRun(args, *training.resolve_configs(args, hydra_args))
    env_cfg, agent_cfg = run.env_cfg, run.agent_cfg
    factories = training.make_workers(run)
    with tempfile.TemporaryDirectory() as folder:
        CheckedCollection.folder = folder
        runner = CheckedRunner(factories, read_env_interface(factories)[0], agent_cfg, log_dir=None)
        runner.learn()
    results = {
        **CheckedCollection.results,
        "task": args.task,
        "num_envs": env_cfg.scene.num_envs,
        "sync": agent_cfg.collector.sync,
        "storing_device": agent_cfg.collector.storing_device,
        "overrides": hydra_args,
        "iterations": runner.iteration,
    }
    print(f"[proof] {json.dumps(results)}", flush=True)
    if args.json:
        with open(args.json, "w") as file:
            json.dump(results, file, indent=1)
    return 1 if results["corrupted"] or results["stale"] or results["batches"] < args.max_iterations else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
