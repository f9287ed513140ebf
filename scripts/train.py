"""Train an Isaac Lab task with TorchRL: (recurrent) PPO over subprocess collectors.

    python scripts/train.py --task Isaac-Cartpole-Direct --agent torchrl --viz none [--num_envs N]
        [--num_collectors K] [--async] [physics=newton_mjwarp] [agent.algorithm.learning_rate=3e-4 ...]

Isaac Lab runs only inside the collector subprocesses; this process resolves the configs and learns.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import inspect
import logging
import os
import sys
import tempfile
from datetime import datetime

import torch
import yaml
from isaaclab.utils.io import dump_yaml
from isaaclab_rl.entrypoints.common import apply_video_recording, pre_launch_video_config

import isaaclab_torchrl  # registers the torchrl agents on Isaac Lab's tasks
from isaaclab_torchrl.agents.validation import ConfigError, speed_summary, validate_agent_cfg
from isaaclab_torchrl.cli import (
    UsageError,
    add_isaaclab_args,
    check_isaaclab_args,
    checkpoint_path,
    launcher_args,
    parse_args,
    resolve_task,
)
from isaaclab_torchrl.envs import make_env_factories
from isaaclab_torchrl.interfaces import read_env_interface
from isaaclab_torchrl.runners import TorchRLRunner, load_checkpoint
from isaaclab_torchrl.runners.code_state import store_code_state
from isaaclab_torchrl.runners.distributed import init_distributed, parameter_checksum
from isaaclab_torchrl.runners.on_policy_runner import TrackerStartError
from isaaclab_torchrl.runners.ppo import compile_cache_dir
from isaaclab_torchrl.runners.safety import NonFiniteError, WorkerFailure


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description="Train an Isaac Lab task with TorchRL.")
    add_isaaclab_args(parser, train=True)
    parser.add_argument("--num_collectors", type=int, default=None, help="Collector subprocesses.")
    parser.add_argument(
        "--async", dest="async_collection", action="store_true", default=None, help="Collect while learning."
    )
    parser.add_argument("--train_device", type=str, default=None, help="Learner device (default: --device).")
    parser.add_argument(
        "--resume", action="store_true", default=False, help="Continue the newest run's last checkpoint."
    )
    parser.add_argument("--load_run", type=str, default=".*", help="With --resume: regex of the run folder (newest).")
    parser.add_argument(
        "--checkpoint",
        type=str,
        default=None,
        help="Continue from this checkpoint (file, run folder, 'latest' or a file-name regex); implies --resume.",
    )
    parser.add_argument(
        "--print_config", action="store_true", help="Print the resolved agent config as YAML and exit (no training)."
    )
    return parser


def apply_train_args(args: argparse.Namespace, agent_cfg) -> None:
    if args.max_iterations is not None:
        agent_cfg.max_iterations = args.max_iterations
    if args.num_collectors is not None:
        agent_cfg.collector.num_collectors = args.num_collectors
    if args.async_collection is not None:
        agent_cfg.collector.sync = not args.async_collection
    if args.train_device is not None:
        agent_cfg.train_device = args.train_device
    if args.experiment_name is not None:
        agent_cfg.experiment_name = args.experiment_name
    if args.run_name is not None:
        agent_cfg.run_name = args.run_name
    if args.logger is not None:
        agent_cfg.logger = args.logger
    if args.log_project_name is not None:
        agent_cfg.wandb_project = agent_cfg.neptune_project = agent_cfg.mlflow_experiment = args.log_project_name


def experiment_root(agent_cfg) -> str:
    """``logs/torchrl/<experiment>``: where the experiment's run folders are."""
    return os.path.abspath(os.path.join("logs", "torchrl", agent_cfg.experiment_name))


def resume_checkpoint(args: argparse.Namespace, agent_cfg) -> str:
    """The checkpoint ``--resume`` / ``--checkpoint`` continues from, checked to be readable."""
    path = checkpoint_path(experiment_root(agent_cfg), args.checkpoint, args.load_run)
    try:
        load_checkpoint(path)
    except (FileNotFoundError, ValueError) as exc:
        raise UsageError(str(exc)) from exc
    return path


def resumed_log_dir(checkpoint: str, agent_cfg) -> str | None:
    """The run folder a resumed run goes on in: the checkpoint's own, when it is a run folder of this experiment;
    ``None`` (a new run folder) for a checkpoint from elsewhere (another experiment, a download)."""
    run_dir = os.path.dirname(os.path.abspath(checkpoint))
    return run_dir if os.path.dirname(run_dir) == experiment_root(agent_cfg) else None


def new_log_dir(agent_cfg, timestamp: str | None) -> str:
    """The path of a new run folder ``logs/torchrl/<experiment>/<time>[_<run name>]`` (not created yet)."""
    run_name = timestamp or datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
    if agent_cfg.run_name:
        run_name += f"_{agent_cfg.run_name}"
    return os.path.join(experiment_root(agent_cfg), run_name)


def create_log_dir(log_dir: str) -> None:
    """Creates the run folder and checks that it is writable, before any simulator starts."""
    try:
        os.makedirs(log_dir, exist_ok=True)
        with tempfile.TemporaryFile(dir=log_dir):
            pass
    except OSError as exc:
        raise UsageError(f"Cannot write the log directory {log_dir}: {exc}") from exc


def record_training_video(env_cfg, log_dir: str, args: argparse.Namespace) -> None:
    """``--video``: Isaac Lab's recorder on the env config (``<run>/videos/train``); it records inside the first
    collector worker's ``env.step()``, from the visualizer named with ``--viz``."""
    pre_launch_video_config(env_cfg, args)
    try:
        apply_video_recording(env_cfg, log_dir, args, subdir="train")
    except ValueError as exc:
        raise UsageError(
            f"--video needs a renderer or visualizer to record from, and none is available: {exc}"
        ) from exc


def main(argv: list[str]) -> int:
    # torch 2.11's scan partitioner sets its own logger to DEBUG: ~100 lines of graphs when the scan backend is built
    logging.getLogger("torch._higher_order_ops.partitioner").setLevel(logging.WARNING)
    # the compiled update's graphs and kernels persist in the user's cache folder: a second run compiles faster
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = compile_cache_dir()
    args, hydra_args = parse_args(make_parser(), argv)
    context = None
    try:
        check_isaaclab_args(args, train=True)
        if args.distributed:
            if "LOCAL_RANK" not in os.environ:
                raise UsageError("--distributed runs under torchrun: torchrun --nproc_per_node G scripts/train.py ...")
            if (args.device is None or args.device.startswith("cuda")) and torch.cuda.is_available():
                args.device = f"cuda:{os.environ['LOCAL_RANK']}"  # each rank simulates and learns on its own GPU
        env_cfg, agent_cfg = resolve_task(args, hydra_args)
        apply_train_args(args, agent_cfg)
        validate_agent_cfg(agent_cfg, env_cfg.scene.num_envs)
        if args.print_config:
            print(yaml.safe_dump(agent_cfg.to_dict(), sort_keys=False), end="")
            return 0
        checkpoint = resume_checkpoint(args, agent_cfg) if args.resume or args.checkpoint else None
        if args.distributed:
            # the group waits as long as the slowest rank's first batch may take
            timeout = agent_cfg.collector.first_batch_timeout_s + 60.0
            context = init_distributed(use_cuda=args.device.startswith("cuda"), timeout_s=timeout)
            # each rank's environments and exploration differ: distinct seeds per rank and collector
            agent_cfg.seed += context.rank * agent_cfg.collector.num_collectors
        new_folder = False
        # a resumed run goes on in its own folder, with its TensorBoard step axis; only rank 0 writes
        if context is not None and not context.is_main:
            log_dir = None
        else:
            log_dir = (checkpoint and resumed_log_dir(checkpoint, agent_cfg)) or new_log_dir(
                agent_cfg, args.run_timestamp
            )
            if args.video:
                record_training_video(env_cfg, log_dir, args)
            new_folder = not os.path.exists(log_dir)
            create_log_dir(log_dir)
    except (UsageError, ConfigError) as exc:
        print(f"[torchrl] error: {exc}", file=sys.stderr)
        return 2

    print(f"[torchrl] {speed_summary(agent_cfg)}", flush=True)
    num_collectors = agent_cfg.collector.num_collectors
    # the first worker records the video (with --video); the others step the same config without a recorder
    silent_env_cfg = copy.deepcopy(env_cfg)
    silent_env_cfg.video_recorders = []
    env_cfgs = [env_cfg] + [silent_env_cfg] * (num_collectors - 1)
    factories = make_env_factories(args.task, env_cfgs, agent_cfg, launcher_args(args), args.external_callback)
    interface, cached = read_env_interface(factories)
    print(
        f"[torchrl] environment: actor observes {', '.join(interface.actor_obs_keys)} ({interface.actor_obs_dim}), "
        f"critic {', '.join(interface.critic_obs_keys)} ({interface.critic_obs_dim}); {interface.action_dim} actions "
        f"({'remembered from an earlier run' if cached else 'read by a probe process'})",
        flush=True,
    )

    runner = TorchRLRunner(factories, interface, agent_cfg, log_dir, distributed=context)
    if checkpoint:
        try:
            runner.load(checkpoint, optimizer=args.resume_optimizer_state)
        except ValueError as exc:
            print(f"[torchrl] error: {exc}", file=sys.stderr)
            if new_folder:  # the (still empty) run folder made for a checkpoint from elsewhere, and its parents
                with contextlib.suppress(OSError):
                    os.removedirs(log_dir)
            return 2
        print(
            f"[torchrl] Resuming from {checkpoint} (iteration {runner.iteration}, "
            f"learning rate {float(runner.learner.optimizer.param_groups[0]['lr']):.6g})"
        )
    if log_dir is not None and not os.path.exists(os.path.join(log_dir, "params", "agent.yaml")):  # a new run folder
        dump_yaml(os.path.join(log_dir, "params", "env.yaml"), env_cfg)
        dump_yaml(os.path.join(log_dir, "params", "agent.yaml"), agent_cfg)
        store_code_state(log_dir, [isaaclab_torchrl.__file__, inspect.getfile(type(env_cfg))])
    if log_dir is not None:
        # Isaac Lab's two lines (its Ray tuner reads them to find the run folder and its TensorBoard events)
        print(f"[INFO] Logging experiment in directory: {os.path.dirname(log_dir)}")
        print(f"Exact experiment name requested from command line: {os.path.basename(log_dir)}", flush=True)
    try:
        stopped_by = runner.learn()
    except KeyboardInterrupt:
        print(f"[torchrl] Training aborted. Logs and checkpoints so far: {log_dir}", file=sys.stderr)
        return 130
    except TrackerStartError as exc:
        print(f"[torchrl] error: {exc}", file=sys.stderr)
        return 2
    except (WorkerFailure, NonFiniteError) as exc:
        rank = "" if context is None else f"rank {context.rank} stopped: "  # which rank says it, under torchrun
        print(f"[torchrl] error: {rank}{exc}\n[torchrl] Logs and checkpoints: {log_dir}", file=sys.stderr)
        return 1
    except Exception as exc:
        if context is None:
            raise
        # another rank failed: its collective operations end with an error here
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        print(f"[torchrl] error: rank {context.rank} stopped: {type(exc).__name__}: {message}", file=sys.stderr)
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


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
