"""Train an Isaac Lab task with TorchRL: recurrent PPO over subprocess collectors.

    python scripts/train.py --task Isaac-Cartpole-Direct --agent torchrl --viz none [--num_envs N]
        [--num_collectors K] [--async] [physics=newton_mjwarp] [agent.algorithm.learning_rate=3e-4 ...]

Isaac Lab runs only inside the collector subprocesses; this process resolves the configs and learns.
"""

from __future__ import annotations

import argparse
import os
import sys
from datetime import datetime

import gymnasium as gym
import torch

import isaaclab_torchrl  # noqa: F401  (registers the torchrl agents on Isaac Lab's tasks)
from isaaclab.app import add_launcher_args
from isaaclab.utils.io import dump_yaml
from isaaclab_tasks.utils import resolve_task_config, setup_preset_cli
from isaaclab_torchrl.agents import AGENT_ALIASES, agent_entry_point
from isaaclab_torchrl.envs import IsaacLabEnvFactory, probe_env_interface
from isaaclab_torchrl.runners import TorchRLRunner


class UsageError(Exception):
    """Bad command-line input: reported on one line, exit code 2, nothing written."""


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(description="Train an Isaac Lab task with TorchRL.")
    parser.add_argument("--task", type=str, required=True, help="Gym id of the Isaac Lab task.")
    parser.add_argument(
        "--agent",
        type=str,
        default="torchrl",
        help=f"Agent config: {', '.join(AGENT_ALIASES)}, or a registry entry-point key of the task.",
    )
    parser.add_argument("--num_envs", type=int, default=None, help="Number of environments, over all collectors.")
    parser.add_argument("--seed", type=int, default=None, help="Seed of the learner and the environments.")
    parser.add_argument("--max_iterations", type=int, default=None, help="Training iterations.")
    parser.add_argument("--num_collectors", type=int, default=None, help="Collector subprocesses.")
    parser.add_argument(
        "--async", dest="async_collection", action="store_true", default=None, help="Collect while learning."
    )
    parser.add_argument("--train_device", type=str, default=None, help="Learner device (default: --device).")
    parser.add_argument("--experiment_name", type=str, default=None, help="Folder under logs/torchrl.")
    parser.add_argument("--run_name", type=str, default=None, help="Suffix of the run folder.")
    parser.add_argument("--headless", action="store_true", default=False, help="Accepted for compatibility.")
    add_launcher_args(parser)
    # no --device: the GPU when there is one, else the CPU (see resolve_configs)
    parser.set_defaults(device=None)
    args, hydra_args = setup_preset_cli(parser, argv)
    return args, hydra_args


def resolve_configs(args: argparse.Namespace, hydra_args: list[str]):
    """Resolves the env and agent configs (Hydra overrides and presets applied) and the CLI overrides."""
    if args.task.split(":")[-1] not in gym.registry:
        raise UsageError(f"Unknown task {args.task!r}. List the tasks with: isaaclab list_envs")
    entry_point = agent_entry_point(args.agent)
    kwargs = gym.registry[args.task.split(":")[-1]].kwargs
    if entry_point not in kwargs:
        known = sorted(alias for alias, key in AGENT_ALIASES.items() if key in kwargs)
        known += sorted(key for key in kwargs if key.startswith("isaaclab_torchrl") and key not in AGENT_ALIASES.values())
        if not known:
            raise UsageError(f"Task {args.task!r} has no torchrl agent config.")
        raise UsageError(f"Task {args.task!r} has no agent {args.agent!r}; available: {', '.join(known)}.")
    try:
        # Isaac Lab adds unknown override keys as new attributes, so the paths are checked on the defaults
        presets = [arg for arg in hydra_args if arg.split("=", 1)[0] in ("physics", "renderer", "presets")]
        default_env_cfg, default_agent_cfg = resolve_task_config(args.task, entry_point, overrides=presets)
        check_override_paths(hydra_args, env=default_env_cfg, agent=default_agent_cfg)
        env_cfg, agent_cfg = resolve_task_config(args.task, entry_point, overrides=hydra_args)
    except UsageError:
        raise
    except Exception as exc:  # Hydra and preset errors: one readable line
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UsageError(f"Invalid configuration override: {message}") from exc

    # the collector subprocesses launch their simulation with args.device
    args.device = device = args.device or ("cuda:0" if torch.cuda.is_available() else "cpu")
    env_cfg.sim.device = device
    agent_cfg.device = device
    if args.train_device is not None:
        agent_cfg.train_device = args.train_device
    if args.num_envs is not None:
        env_cfg.scene.num_envs = args.num_envs
    if args.seed is not None:
        agent_cfg.seed = args.seed
    if args.max_iterations is not None:
        agent_cfg.max_iterations = args.max_iterations
    if args.num_collectors is not None:
        agent_cfg.collector.num_collectors = args.num_collectors
    if args.async_collection is not None:
        agent_cfg.collector.sync = not args.async_collection
    if args.experiment_name is not None:
        agent_cfg.experiment_name = args.experiment_name
    if args.run_name is not None:
        agent_cfg.run_name = args.run_name
    env_cfg.seed = agent_cfg.seed
    validate(env_cfg, agent_cfg)
    return env_cfg, agent_cfg


def check_override_paths(hydra_args: list[str], **roots) -> None:
    """Rejects ``env.*`` / ``agent.*`` overrides that name no existing field (Isaac Lab would ignore them)."""
    for override in hydra_args:
        path = override.split("=", 1)[0]
        root_name, _, field_path = path.partition(".")
        if "=" not in override or root_name not in roots or path.startswith(("+", "~")):
            continue
        node = roots[root_name]
        for name in field_path.split("."):
            if isinstance(node, dict) and name in node:
                node = node[name]
            elif not isinstance(node, dict) and hasattr(node, name):
                node = getattr(node, name)
            else:
                raise UsageError(f"Invalid configuration override {override!r}: {path} is not a field of the config.")


def validate(env_cfg, agent_cfg) -> None:
    """Rejects configurations that cannot train, before any simulator starts."""
    num_envs = env_cfg.scene.num_envs
    num_collectors = agent_cfg.collector.num_collectors
    if num_collectors < 1:
        raise UsageError(f"num_collectors must be >= 1, got {num_collectors}.")
    if num_envs < 1 or num_envs % num_collectors:
        raise UsageError(f"num_envs ({num_envs}) must be a positive multiple of num_collectors ({num_collectors}).")
    if agent_cfg.num_steps_per_env < 1:
        raise UsageError(f"agent.num_steps_per_env must be >= 1, got {agent_cfg.num_steps_per_env}.")
    if agent_cfg.max_iterations < 1:
        raise UsageError(f"max_iterations must be >= 1, got {agent_cfg.max_iterations}.")
    if agent_cfg.algorithm.learning_rate <= 0:
        raise UsageError(f"agent.algorithm.learning_rate must be > 0, got {agent_cfg.algorithm.learning_rate}.")
    envs_per_collector = num_envs // num_collectors
    if agent_cfg.algorithm.num_mini_batches > envs_per_collector * (num_collectors if agent_cfg.collector.sync else 1):
        raise UsageError(
            f"agent.algorithm.num_mini_batches ({agent_cfg.algorithm.num_mini_batches}) exceeds the number of "
            "trajectory slices (environments) in a batch."
        )


def make_log_dir(agent_cfg) -> str:
    run_name = datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
    if agent_cfg.run_name:
        run_name += f"_{agent_cfg.run_name}"
    return os.path.abspath(os.path.join("logs", "torchrl", agent_cfg.experiment_name, run_name))


def launcher_args(args: argparse.Namespace) -> dict:
    """The Isaac Lab launcher arguments that the collector subprocesses need to start their simulation."""
    ours = {"task", "agent", "num_envs", "seed", "max_iterations", "num_collectors", "async_collection",
            "train_device", "experiment_name", "run_name", "headless"}
    return {key: value for key, value in vars(args).items() if key not in ours}


def main(argv: list[str] | None = None) -> int:
    args, hydra_args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        env_cfg, agent_cfg = resolve_configs(args, hydra_args)
    except UsageError as exc:
        print(f"[torchrl] error: {exc}", file=sys.stderr)
        return 2

    num_collectors = agent_cfg.collector.num_collectors
    envs_per_collector = env_cfg.scene.num_envs // num_collectors
    factories = [
        IsaacLabEnvFactory(
            args.task,
            env_cfg,
            launcher_args(args),
            num_envs=envs_per_collector,
            seed=agent_cfg.seed + index,
            clip_actions=agent_cfg.clip_actions,
        )
        for index in range(num_collectors)
    ]
    interface = probe_env_interface(factories[0])

    log_dir = make_log_dir(agent_cfg)
    print(f"[torchrl] Logging experiment in directory: {log_dir}")
    dump_yaml(os.path.join(log_dir, "params", "env.yaml"), env_cfg)
    dump_yaml(os.path.join(log_dir, "params", "agent.yaml"), agent_cfg)

    runner = TorchRLRunner(factories, interface, agent_cfg, log_dir)
    try:
        runner.learn()
    except KeyboardInterrupt:
        print("[torchrl] Training interrupted.", file=sys.stderr)
        return 130
    print(f"[torchrl] Logs and checkpoints: {log_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
