"""Command-line pieces shared by ``scripts/train.py`` and ``scripts/play.py``: the task and agent arguments,
and the resolution of the env and agent configs (Hydra overrides and presets, as Isaac Lab does it)."""

from __future__ import annotations

import argparse
import importlib

import gymnasium as gym
import torch
from isaaclab.app import add_launcher_args
from isaaclab_tasks.utils import resolve_task_config, setup_preset_cli

from .agents import AGENT_ALIASES, UnsupportedAgentError, agent_entry_point, register_agents
from .envs import use_available_actuators
from .models import RECURRENT_BACKENDS

PRESET_SELECTORS = ("physics", "renderer", "presets")


class UsageError(Exception):
    """Bad command-line input: reported on one line, with exit code 2, before anything is written."""


def add_task_args(parser: argparse.ArgumentParser) -> None:
    """Adds ``--task``, ``--agent``, ``--num_envs``, ``--seed``, ``--headless`` and Isaac Lab's launcher args."""
    parser.add_argument("--task", type=str, required=True, help="Gym id of the Isaac Lab task.")
    parser.add_argument(
        "--agent",
        type=str,
        default="torchrl",
        help=f"Agent config: {', '.join(AGENT_ALIASES)}, or a registry entry-point key of the task.",
    )
    parser.add_argument("--num_envs", type=int, default=None, help="Number of environments.")
    parser.add_argument("--seed", type=int, default=None, help="Seed of the policy and the environments.")
    parser.add_argument("--headless", action="store_true", default=False, help="Accepted for compatibility.")
    add_launcher_args(parser)
    # no --device: the GPU when there is one, else the CPU (see resolve_task)
    parser.set_defaults(device=None)


def parse_args(parser: argparse.ArgumentParser, argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """Parses ``argv``; returns the namespace and the Hydra overrides / preset selectors left over."""
    return setup_preset_cli(parser, argv)


def resolve_task(args: argparse.Namespace, hydra_args: list[str], play_mode: bool = False):
    """Resolves the env and agent configs of ``args.task`` / ``args.agent`` and applies the common CLI args.

    With ``play_mode``, the task's play-mode overrides apply (fewer environments, no randomisation, ...).

    Raises:
        UsageError: unknown task or agent, or an invalid override.
    """
    module, _, task = args.task.rpartition(":")
    if module:
        # "my_package:My-Task" imports my_package first, which registers the task (gymnasium's convention)
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise UsageError(f"Cannot import {module!r}, the module of task {args.task!r}: {exc}") from None
    if task not in gym.registry:
        raise UsageError(f"Unknown task {args.task!r}. List the tasks with: isaaclab list_envs")
    register_agents()  # a task registered by that import gets its ported agent too
    entry_point = agent_entry_point(args.agent)
    kwargs = gym.registry[task].kwargs
    if entry_point not in kwargs:
        known = [alias for alias, key in AGENT_ALIASES.items() if key in kwargs]
        known += [key for key in kwargs if key.startswith("isaaclab_torchrl") and key not in AGENT_ALIASES.values()]
        if not known:
            raise UsageError(f"Task {args.task!r} has no torchrl agent config.")
        raise UsageError(f"Task {args.task!r} has no agent {args.agent!r}; available: {', '.join(known)}.")
    try:
        # Isaac Lab adds unknown override keys as new attributes, so the paths are checked on the defaults
        presets = [arg for arg in hydra_args if arg.split("=", 1)[0] in PRESET_SELECTORS]
        default_env_cfg, default_agent_cfg = resolve_task_config(task, entry_point, play_mode, overrides=presets)
        check_override_paths(hydra_args, env=default_env_cfg, agent=default_agent_cfg)
        env_cfg, agent_cfg = resolve_task_config(task, entry_point, play_mode, overrides=hydra_args)
    except UsageError:
        raise
    except UnsupportedAgentError as exc:
        raise UsageError(str(exc)) from None
    except Exception as exc:  # Hydra and preset errors: one readable line
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UsageError(f"Invalid configuration override: {message}") from exc

    # the simulation is launched with args.device, in the collector subprocesses too
    args.device = args.device or ("cuda:0" if torch.cuda.is_available() else "cpu")
    check_device(args.device, "--device")
    env_cfg.sim.device = args.device
    agent_cfg.device = args.device
    if args.num_envs is not None:
        env_cfg.scene.num_envs = args.num_envs
    if args.seed is not None:
        agent_cfg.seed = args.seed
    env_cfg.seed = agent_cfg.seed
    from isaaclab.envs import DirectMARLEnvCfg

    if isinstance(env_cfg, DirectMARLEnvCfg):
        raise UsageError(f"Task {args.task!r} is a multi-agent task; the torchrl runner trains single-agent tasks.")
    use_available_actuators(env_cfg)
    return env_cfg, agent_cfg


def check_device(name: str, option: str) -> None:
    """Rejects a device that is not ``cpu`` or an existing ``cuda[:index]``."""
    try:
        device = torch.device(name)
    except RuntimeError:
        raise UsageError(f"{option} {name!r} is not a device; use cpu or cuda:<index>.") from None
    if device.type == "cuda":
        count = torch.cuda.device_count()
        if (device.index or 0) >= count:
            raise UsageError(f"{option} {name!r} does not exist: this machine has {count} CUDA device(s).")
    elif device.type != "cpu":
        raise UsageError(f"{option} {name!r} is not supported; use cpu or cuda:<index>.")


def validate_train_cfg(env_cfg, agent_cfg) -> None:
    """Rejects training configurations that cannot train, before any simulator starts.

    Raises:
        UsageError: naming the field and its allowed range.
    """
    num_envs = env_cfg.scene.num_envs
    collector = agent_cfg.collector
    algo = agent_cfg.algorithm
    if collector.num_collectors < 1:
        raise UsageError(f"num_collectors must be >= 1, got {collector.num_collectors}.")
    if num_envs < 1 or num_envs % collector.num_collectors:
        raise UsageError(
            f"num_envs ({num_envs}) must be a positive multiple of num_collectors ({collector.num_collectors})."
        )
    if agent_cfg.train_device is not None:
        check_device(agent_cfg.train_device, "--train_device")
    for name in ("first_batch_timeout_s", "batch_timeout_s", "shutdown_timeout_s"):
        if getattr(collector, name) <= 0:
            raise UsageError(f"agent.collector.{name} must be > 0, got {getattr(collector, name)}.")
    if agent_cfg.num_steps_per_env < 1:
        raise UsageError(f"agent.num_steps_per_env must be >= 1, got {agent_cfg.num_steps_per_env}.")
    if agent_cfg.max_iterations < 1:
        raise UsageError(f"max_iterations must be >= 1, got {agent_cfg.max_iterations}.")
    if algo.learning_rate <= 0:
        raise UsageError(f"agent.algorithm.learning_rate must be > 0, got {algo.learning_rate}.")
    if algo.schedule not in ("adaptive", "fixed"):
        raise UsageError(f"agent.algorithm.schedule must be 'adaptive' or 'fixed', got {algo.schedule!r}.")
    if collector.recurrent_backend not in RECURRENT_BACKENDS:
        raise UsageError(
            f"agent.collector.recurrent_backend must be one of {RECURRENT_BACKENDS}, "
            f"got {collector.recurrent_backend!r}."
        )
    if agent_cfg.cudagraphs:
        if not agent_cfg.compile:
            raise UsageError(
                "agent.cudagraphs=true needs agent.compile=true: outside torch.compile, torchrl's PPO loss checks "
                "its entropy on the host, which a CUDA graph cannot capture."
            )
        if agent_cfg.policy.rnn_type is not None and collector.recurrent_backend == "pad":
            raise UsageError(
                "agent.cudagraphs=true cannot replay the 'pad' recurrent backend (it splits trajectories into "
                "data-dependent shapes); set agent.collector.recurrent_backend=triton (or scan) or "
                "agent.cudagraphs=false."
            )
        train_device = agent_cfg.train_device or agent_cfg.device
        if not str(train_device).startswith("cuda"):
            raise UsageError(f"agent.cudagraphs=true needs a CUDA learner, got the device {train_device!r}.")
    if collector.cudagraph_policy and not str(agent_cfg.device).startswith("cuda"):
        raise UsageError(
            f"agent.collector.cudagraph_policy=true needs a CUDA simulation device, got {agent_cfg.device!r}."
        )
    slices = num_envs if collector.sync else num_envs // collector.num_collectors
    if not 1 <= algo.num_mini_batches <= slices:
        raise UsageError(
            f"agent.algorithm.num_mini_batches ({algo.num_mini_batches}) must be between 1 and the "
            f"{slices} trajectory slices (environments) of a batch."
        )


def check_override_paths(hydra_args: list[str], **roots) -> None:
    """Rejects ``env.*`` / ``agent.*`` overrides that name no existing field of the given configs."""
    for override in hydra_args:
        path = override.split("=", 1)[0]
        root_name, _, field_path = path.partition(".")
        if "=" not in override or root_name not in roots:
            continue
        node = roots[root_name]
        for name in field_path.split("."):
            if isinstance(node, dict) and name in node:
                node = node[name]
            elif not isinstance(node, dict) and hasattr(node, name):
                node = getattr(node, name)
            else:
                raise UsageError(f"Invalid configuration override {override!r}: {path} is not a field of the config.")


def launcher_args(args: argparse.Namespace) -> dict:
    """Isaac Lab's launcher arguments (``--viz``, ``--device``, ...) for starting a simulation elsewhere."""
    launcher = argparse.ArgumentParser(add_help=False)
    add_launcher_args(launcher)
    names = {action.dest for action in launcher._actions}
    return {key: value for key, value in vars(args).items() if key in names}
