"""Command-line pieces shared by ``scripts/train.py`` and ``scripts/play.py``: the task and agent arguments,
and the resolution of the env and agent configs (Hydra overrides and presets, as Isaac Lab does it)."""

from __future__ import annotations

import argparse
import importlib
import os
import re
import sys

import gymnasium as gym
import torch
from isaaclab.app import add_launcher_args
from isaaclab.cli import load_external_tasks
from isaaclab_rl.entrypoints.backends.cli_args_rsl_rl import register_external_tasks
from isaaclab_rl.entrypoints.common import add_common_play_args, add_common_train_args, resolve_seed
from isaaclab_tasks.utils import resolve_task_config, setup_preset_cli

from .agents import AGENT_ALIASES, UnsupportedAgentError, agent_entry_point, register_agents
from .agents.validation import ConfigError, check_device
from .offline_assets import AssetRootError, check_asset_server, use_available_actuators, use_offline_assets
from .runs import LOG_ROOT

PRESET_SELECTORS = ("physics", "renderer", "presets")
DEVICE_FIELDS = {
    "agent.device": "the simulation's device, set by --device; the learner's is --train_device (agent.train_device).",
    "env.sim.device": "the simulation's device is set by --device (the learner's by --train_device).",
}
"""Fields that the command line sets, whatever an override says."""


class UsageError(Exception):
    """Bad command-line input: reported on one line, with exit code 2, before anything is written."""


def add_task_args(parser: argparse.ArgumentParser) -> None:
    """Adds ``--task``, ``--agent``, ``--num_envs``, ``--seed`` and Isaac Lab's launcher args."""
    parser.add_argument("--task", type=str, required=True, help="Gym id of the Isaac Lab task.")
    parser.add_argument(
        "--agent",
        type=str,
        default="torchrl",
        help=f"Agent config: {', '.join(AGENT_ALIASES)}, or a registry entry-point key of the task.",
    )
    parser.add_argument("--num_envs", type=int, default=None, help="Number of environments.")
    parser.add_argument("--seed", type=int, default=None, help="Seed of the policy and the environments.")
    add_launcher_args(parser)
    # no --device: the GPU when there is one, else the CPU (see resolve_task)
    parser.set_defaults(device=None)


AGENT_HELP = f"Agent config: {', '.join(AGENT_ALIASES)}, or a registry entry-point key of the task."


def add_isaaclab_args(parser: argparse.ArgumentParser, train: bool) -> None:
    """Isaac Lab 3.0's unified train or play command line (its own argument definitions, so every argument parses
    as there), the rsl_rl backend's arguments with the same names and meanings, and the launcher's arguments.
    :func:`check_isaaclab_args` rejects, in one line, those that cannot apply here."""
    if train:
        add_common_train_args(parser, agent_default="torchrl", agent_help=AGENT_HELP)
        parser.add_argument(
            "--resume_optimizer_state",
            action=argparse.BooleanOptionalAction,
            default=True,
            help="Restore the optimizer and learning rate on resume; disable to keep a fresh optimizer.",
        )
    else:
        add_common_play_args(parser, agent_default="torchrl", agent_help=AGENT_HELP)
    # rsl_rl's backend arguments (play accepts them too, as Isaac Lab's does)
    parser.add_argument("--experiment_name", type=str, default=None, help="Folder under logs/torchrl.")
    parser.add_argument("--run_name", type=str, default=None, help="Suffix of the run folder (training).")
    parser.add_argument(
        "--logger", type=str, default=None, help="tensorboard (default), wandb, neptune or mlflow (training)."
    )
    parser.add_argument(
        "--log_project_name", type=str, default=None, help="The W&B or Neptune project, the MLflow experiment."
    )
    parser.add_argument(
        "--external_callback", default=None, help="Fully qualified name of a callable run first (registers tasks)."
    )
    add_launcher_args(parser)
    # no --device: the GPU when there is one, else the CPU (see resolve_task)
    parser.set_defaults(device=None)


def make_train_parser() -> argparse.ArgumentParser:
    """``scripts/train.py``'s command line: Isaac Lab's train arguments and this runner's own."""
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
        help="Continue from this checkpoint (file, run folder, latest, best or a file-name regex); implies --resume.",
    )
    parser.add_argument(
        "--print_config", action="store_true", help="Print the resolved agent config as YAML and exit (no training)."
    )
    return parser


def make_play_parser() -> argparse.ArgumentParser:
    """``scripts/play.py``'s command line: Isaac Lab's play arguments and this runner's own."""
    parser = argparse.ArgumentParser(description="Play a policy trained with isaaclab_torchrl.")
    parser.add_argument(
        "--checkpoint",
        type=str,
        default="latest",
        help="Checkpoint file, run folder, 'latest', 'best' or a file-name regex.",
    )
    parser.add_argument("--load_run", type=str, default=".*", help="Regex of the run folder (newest match).")
    parser.add_argument("--num_episodes", type=int, default=10, help="Stop after this many finished episodes.")
    parser.add_argument("--max_steps", type=int, default=2000, help="Stop after this many environment steps.")
    add_isaaclab_args(parser, train=False)
    return parser


def apply_train_args(args: argparse.Namespace, agent_cfg) -> None:
    """Writes the training arguments given on the command line into the agent config."""
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


def check_isaaclab_args(args: argparse.Namespace, train: bool) -> None:
    """Rejects the Isaac Lab arguments that cannot apply to this runner, warns about those that do nothing here,
    and resolves ``--seed -1`` (a random seed) as Isaac Lab does.

    Raises:
        UsageError: naming the argument and what to do instead.
    """
    if not args.task:
        raise UsageError("--task is required (list the tasks with: isaaclab list_envs).")
    if args.frontend != "torch":
        raise UsageError(f"--frontend {args.frontend} is not supported by the torchrl runner; use --frontend torch.")
    if getattr(args, "capture_env_sensors", 0) > 0:
        raise UsageError(
            "--capture_env_sensors is not supported: the torchrl runner's simulations run in its collector workers, "
            "which record no sensor data."
        )
    if getattr(args, "export_io_descriptors", False):
        print("[torchrl] warning: --export_io_descriptors is deprecated in Isaac Lab and does nothing here.")
    if getattr(args, "disable_fabric", False):
        print("[torchrl] warning: --disable_fabric does nothing in kitless Isaac Lab (no USD stage to write to).")
    for name in ("run_name", "logger", "log_project_name"):
        if not train and getattr(args, name) is not None:
            print(f"[torchrl] warning: --{name} applies to training; play.py ignores it.")
    args.seed = resolve_seed(args.seed)


def checkpoint_path(log_root: str, checkpoint: str | None, load_run: str) -> str:
    """The checkpoint file that ``--checkpoint`` names: a file, a run folder, ``latest``, ``best`` (the run's
    ``model_best.pt``, else its last checkpoint, as Isaac Lab's selector) or a file-name regex under ``log_root``
    (the newest run matching ``load_run``), or a W&B run (``wandb:<entity>/<project>/<run_id>`` or its
    URL, ``?checkpoint=<iteration>``), whose ``model_<N>.pt`` is downloaded under ``logs/torchrl/wandb_checkpoints``
    through Isaac Lab's W&B helper.

    Raises:
        UsageError: ``pretrained`` (Isaac Lab's published checkpoints are rsl_rl's), a W&B run that cannot be
            fetched, or no such checkpoint.
    """
    from isaaclab_rl.utils.wandb import is_wandb_checkpoint, resolve_wandb_checkpoint

    from .runners import resolve_checkpoint

    if checkpoint == "pretrained":
        raise UsageError(
            "--checkpoint pretrained is not supported; give a file, a run folder, latest, best or a W&B run."
        )
    if is_wandb_checkpoint(checkpoint):
        try:
            return resolve_wandb_checkpoint(checkpoint, download_dir=os.path.join(LOG_ROOT, "wandb_checkpoints"))
        except Exception as exc:  # no client, no login, no network, no such run: one line
            message = " ".join(str(exc).split())
            raise UsageError(
                f"Cannot fetch the W&B checkpoint {checkpoint!r}: {type(exc).__name__}: {message}"
            ) from None
    try:
        re.compile(load_run)  # before looking for runs: a bad pattern is bad input wherever the logs are
        return resolve_checkpoint(log_root, checkpoint or "latest", load_run)
    except (FileNotFoundError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    except re.error as exc:
        raise UsageError(f"{exc.pattern!r} (--load_run or --checkpoint) is not a regular expression: {exc}.") from None


def parse_args(parser: argparse.ArgumentParser, argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """Parses ``argv``; returns the namespace and the Hydra overrides / preset selectors left over.

    ``--external_callback`` runs first, before the task registry is read (Isaac Lab's order); the overrides it
    consumed are not passed on.
    """
    try:
        left_by_callback = register_external_tasks(argv)
    except Exception as exc:  # an import or the callback failed: one line, as for any bad input
        message = " ".join(line.strip() for line in str(exc).splitlines() if line.strip())
        print(f"[torchrl] error: --external_callback failed: {type(exc).__name__}: {message}", file=sys.stderr)
        raise SystemExit(2) from None
    args, hydra_args = setup_preset_cli(parser, argv)
    if left_by_callback is not None:
        hydra_args = [arg for arg in hydra_args if arg in left_by_callback]
    return args, hydra_args


def resolve_task(args: argparse.Namespace, hydra_args: list[str], play_mode: bool = False):
    """Resolves the env and agent configs of ``args.task`` / ``args.agent`` and applies the common CLI args.

    Tasks are looked up as ``isaaclab train`` does (Isaac Lab's and installed packages' ``isaaclab.tasks`` entry
    points), and as ``module:Task``. With ``play_mode``, the task's play-mode overrides apply (fewer environments,
    no randomisation, ...). The env config's assets are pointed at the offline root when asked for, and the asset
    server is asked once whether it answers.

    Raises:
        UsageError: unknown task or agent, an invalid override or device, or assets that cannot be had.
    """
    load_external_tasks()
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
    try:
        check_device(args.device, "--device")
        use_offline_assets(env_cfg)
        check_asset_server(env_cfg)
    except (ConfigError, AssetRootError) as exc:
        raise UsageError(str(exc)) from None
    env_cfg.sim.device = args.device
    agent_cfg.device = args.device
    physics = getattr(env_cfg.sim, "physics", None)
    if getattr(args, "deterministic", False) and physics is not None:
        # Isaac Lab's request (its trainers' apply_env_overrides); each worker asks Warp for it before its env
        physics.deterministic = True
    if args.num_envs is not None:
        env_cfg.scene.num_envs = args.num_envs
    if args.seed is not None:
        agent_cfg.seed = args.seed
    env_cfg.seed = agent_cfg.seed
    use_available_actuators(env_cfg)
    return env_cfg, agent_cfg


def check_override_paths(hydra_args: list[str], **roots) -> None:
    """Rejects an override that is not ``key=value``, names no ``env.*`` / ``agent.*`` field of the given configs
    (or a preset selector), in one line where Hydra would print its own error and exit."""
    for override in hydra_args:
        path = override.split("=", 1)[0].lstrip("+~")
        root_name, _, field_path = path.partition(".")
        if "=" not in override and not override.startswith("~"):
            raise UsageError(f"Invalid configuration override {override!r}: write it as {override}=<value>.")
        if root_name in PRESET_SELECTORS:
            continue
        if path in DEVICE_FIELDS:
            raise UsageError(f"Invalid configuration override {override!r}: {DEVICE_FIELDS[path]}")
        if root_name not in roots:
            known = [name for name, cfg in roots.items() if _has_path(cfg, path.split("."))]
            hint = f" (did you mean {known[0]}.{path}?)" if known else ""
            raise UsageError(
                f"Invalid configuration override {override!r}: an override sets a field under "
                f"{' or '.join(f'{name}.' for name in roots)}, or selects {', '.join(PRESET_SELECTORS)}{hint}."
            )
        if not _has_path(roots[root_name], field_path.split(".")):
            raise UsageError(f"Invalid configuration override {override!r}: {path} is not a field of the config.")


def _has_path(node, names: list[str]) -> bool:
    for name in names:
        if isinstance(node, dict) and name in node:
            node = node[name]
        elif not isinstance(node, dict) and hasattr(node, name):
            node = getattr(node, name)
        else:
            return False
    return True


def launcher_args(args: argparse.Namespace) -> dict:
    """Isaac Lab's launcher arguments (``--viz``, ``--device``, ...) for starting a simulation elsewhere."""
    launcher = argparse.ArgumentParser(add_help=False)
    add_launcher_args(launcher)
    names = {action.dest for action in launcher._actions}
    return {key: value for key, value in vars(args).items() if key in names}
