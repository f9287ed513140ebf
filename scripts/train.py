"""Train an Isaac Lab task with TorchRL: (recurrent) PPO over subprocess collectors.

    python scripts/train.py --task Isaac-Cartpole-Direct --agent torchrl --viz none [--num_envs N]
        [--num_collectors K] [--async] [physics=newton_mjwarp] [agent.algorithm.learning_rate=3e-4 ...]

Isaac Lab runs only inside the collector subprocesses; this process resolves the configs and learns.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import os
import sys

import torch
import yaml

import isaaclab_torchrl  # noqa: F401  (registers the torchrl agents on Isaac Lab's tasks)
from isaaclab_torchrl import training
from isaaclab_torchrl.agents.validation import ConfigError
from isaaclab_torchrl.cli import UsageError, make_train_parser, parse_args
from isaaclab_torchrl.offline_assets import export_offline_root
from isaaclab_torchrl.runners.compilation import compile_cache_dir
from isaaclab_torchrl.runners.distributed import parameter_checksum
from isaaclab_torchrl.runners.on_policy_runner import TrackerStartError
from isaaclab_torchrl.runners.safety import NonFiniteError, WorkerFailure
from isaaclab_torchrl.workers import start_worker_server


def error(message: str) -> None:
    print(f"[torchrl] error: {message}", file=sys.stderr)


def train(run: training.TrainingRun) -> int:
    """Starts the runner, trains, and reports how training ended as the exit code."""
    print(f"[torchrl] {training.speed_summary(run.agent_cfg)}", flush=True)
    try:
        runner = training.start(run)
    except UsageError as exc:  # the checkpoint does not fit this task and agent
        error(str(exc))
        if run.new_folder:  # the (still empty) run folder made for a checkpoint from elsewhere, and its parents
            with contextlib.suppress(OSError):
                os.removedirs(run.log_dir)
        return 2
    context, log_dir = run.distributed, run.log_dir
    try:
        stopped_by = runner.learn()
    except KeyboardInterrupt:
        print(f"[torchrl] Training aborted. Logs and checkpoints so far: {log_dir}", file=sys.stderr)
        return 130
    except TrackerStartError as exc:
        error(str(exc))
        return 2
    except (WorkerFailure, NonFiniteError) as exc:
        rank = "" if context is None else f"rank {context.rank} stopped: "  # which rank says it, under torchrun
        error(f"{rank}{exc}\n[torchrl] Logs and checkpoints: {log_dir}")
        return 1
    except Exception as exc:
        if context is None:
            raise
        # another rank failed: its collective operations end with an error here
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        error(f"rank {context.rank} stopped: {type(exc).__name__}: {message}")
        return 1
    if context is not None:
        checksum = parameter_checksum(runner.learner.actor) + parameter_checksum(runner.learner.critic)
        print(f"[torchrl] rank {context.rank} of {context.world_size}: parameter checksum {checksum:.12e}", flush=True)
        torch.distributed.destroy_process_group()
    if stopped_by is not None:
        print(
            f"[torchrl] Stopped by {stopped_by.name} at iteration {runner.iteration}. Logs and checkpoints: {log_dir}"
        )
        return 128 + stopped_by.value
    if log_dir is not None:
        print(f"[torchrl] Logs and checkpoints: {log_dir}")
    return 0


def main(argv: list[str]) -> int:
    # the interpreter's exit then skips collecting what dies with it (2 s after a short CPU run; the run's files are
    # closed before that)
    atexit.register(gc.freeze)
    # the compiled update's graphs and kernels persist in the user's cache folder: a second run compiles faster
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = compile_cache_dir()
    args, hydra_args = parse_args(make_train_parser(), argv)
    if not args.print_config:
        # the workers' imports, done by the process they are forked from while this one resolves the configs (it
        # starts with this process's environment as it is now, the offline asset root included)
        export_offline_root()
        start_worker_server()
    try:
        run = training.prepare(args, hydra_args)
    except (UsageError, ConfigError) as exc:
        error(str(exc))
        return 2
    if args.print_config:
        print(yaml.safe_dump(run.agent_cfg.to_dict(), sort_keys=False), end="")
        return 0
    return train(run)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
