"""LEAPP export of a trained policy (``scripts/export.py``), as ``isaaclab leapp export --rl_library rsl_rl`` writes
it: a real rollout of the task, traced by LEAPP, compiled into one model per stage (the task's observation
processing, the policy, the action processing) and a YAML pipeline with Isaac Lab's connection metadata and the
initial feedback state (the recurrent state included), validated by LEAPP's replay of the recorded steps.

The task and agent are resolved as ``scripts/play.py`` resolves them (:func:`isaaclab_torchrl.cli.resolve_task`);
the environment is patched and traced by Isaac Lab's own export helpers (``prepare_export_env``, ``leapp_capture``),
and the recurrent state is annotated as Isaac Lab's rsl_rl backend annotates it (``actor_state_0``/``actor_state_1``
for an LSTM, ``actor_state`` for a GRU). The policy is the checkpoint's deterministic actor
(:attr:`~isaaclab_torchrl.models.GaussianActor.parts`): normalizer, image encoders, recurrent layer, action
mean.

Isaac Lab's export helpers disable TorchScript when imported (LEAPP traces Python tensor operations): this module
runs in its own process and no other module of this package imports it.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys

import torch
import yaml
from isaaclab_rl.entrypoints.backends.export_common import (
    add_common_export_args,
    finalize_export_args,
    leapp_capture,
    prepare_export_env,
    resolve_export_save_path,
)
from isaaclab_rl.entrypoints.common import resolve_seed

from .cli import AGENT_HELP, UsageError, checkpoint_path, resolve_task
from .models import ActorParts
from .policy import load_policy
from .runs import experiment_root

MISSING_LEAPP = "LEAPP is not installed: pip install -e '.[leapp]' (or pip install leapp==0.7.2)."


def make_parser() -> argparse.ArgumentParser:
    """Isaac Lab's LEAPP export arguments (its own definitions) with the rsl_rl backend's ``--seed`` and
    ``--experiment_name``, and play.py's ``--load_run``."""
    parser = argparse.ArgumentParser(description="Export a policy trained with isaaclab_torchrl with LEAPP.")
    add_common_export_args(parser, agent_default="torchrl")
    parser.set_defaults(device=None)  # the GPU when there is one, else the CPU (see resolve_task)
    for action in parser._actions:
        if action.dest == "agent":
            action.help = AGENT_HELP
        elif action.dest == "checkpoint":
            action.help = "Checkpoint file, run folder, 'latest' or a file-name regex (default: the newest run's last)."
    parser.add_argument("--seed", type=int, default=None, help="Seed used for the environment.")
    parser.add_argument(
        "--experiment_name", type=str, default=None, help="Folder under logs/torchrl whose runs are searched."
    )
    parser.add_argument("--load_run", type=str, default=".*", help="Regex of the run folder (newest match).")
    return parser


def actor_input(parts: ActorParts, interface, obs: dict) -> torch.Tensor:
    """The recurrent layer's (or MLP's) input from the task's observation groups: the normalised flat groups, then
    each image group's features (images as the task gives them)."""
    flat_keys = interface.flat_keys("actor")
    flat = [parts.normalizer(torch.cat([obs[key] for key in flat_keys], dim=-1))] if flat_keys else []
    if parts.images is None:
        return flat[0]
    return parts.images(*flat, *(obs[name] for name, _, _ in interface.image_groups("actor")))


def policy_step(parts: ActorParts, features: torch.Tensor, hidden):
    """One deterministic step of the actor from :func:`actor_input`'s ``features``: the action mean, and the
    recurrent state after the step (``(h, c)`` for an LSTM, ``h`` for a GRU, ``None`` without a recurrent layer; each
    ``[num_layers, envs, hidden]``)."""
    if parts.rnn is not None:
        features, hidden = parts.rnn(features.unsqueeze(1), hidden)
        features = features.squeeze(1)
    return parts.mean(features), hidden


def initial_state(parts: ActorParts, num_envs: int, device):
    """The recurrent state at an episode's start (zeros), shaped as :func:`policy_step` takes it."""
    if parts.rnn is None:
        return None
    zeros = torch.zeros(parts.rnn.num_layers, num_envs, parts.rnn.hidden_size, device=device)
    return (zeros, zeros.clone()) if isinstance(parts.rnn, torch.nn.LSTM) else zeros


def main(argv: list[str]) -> int:
    args, hydra_args = finalize_export_args(make_parser(), argv)
    try:
        if not args.task:
            raise UsageError("--task is required (list the tasks with: isaaclab list_envs).")
        if importlib.util.find_spec("leapp") is None:
            raise UsageError(MISSING_LEAPP)
        args.num_envs = 1  # as Isaac Lab's export: one environment is traced
        args.seed = resolve_seed(args.seed)
        env_cfg, agent_cfg = resolve_task(args, hydra_args, play_mode=True)
        experiment_dir = experiment_root(args.experiment_name or agent_cfg.experiment_name)
        path = checkpoint_path(experiment_dir, args.checkpoint, args.load_run)
        policy = load_policy(path, args.device)
    except (UsageError, ValueError) as exc:
        print(f"[torchrl] error: {exc}", file=sys.stderr)
        return 2
    print(f"[torchrl] Exporting checkpoint: {path}")
    save_path = resolve_export_save_path(args, "torchrl", os.path.dirname(os.path.abspath(path)))
    env_cfg.log_dir = os.path.dirname(os.path.abspath(path))
    try:
        export(args, env_cfg, policy, agent_cfg.clip_actions, save_path)
    except UsageError as exc:
        print(f"[torchrl] error: {exc}", file=sys.stderr)
        return 2
    graph_name = args.export_task_name or args.task.split(":")[-1]
    folder = os.path.join(save_path, graph_name)
    pipeline = os.path.join(folder, graph_name + ".yaml")
    with open(pipeline) as file:
        if not yaml.safe_load(file).get("models"):
            print(
                f"[torchrl] error: LEAPP traced no model: task {args.task!r} annotates none of its tensors for LEAPP "
                "(Isaac Lab annotates manager-based tasks; a Direct task annotates its own).",
                file=sys.stderr,
            )
            return 2
    print(f"[torchrl] Exported LEAPP pipeline: {pipeline}")
    if args.validation_steps > 0:
        # LEAPP raises when a replayed output differs; its report is in its log
        print(f"[torchrl] LEAPP's replay of the recorded steps validated it ({os.path.join(folder, 'log.txt')})")
    return 0


def export(args: argparse.Namespace, env_cfg, policy, clip_actions: float | None, save_path: str) -> None:
    """Runs the task with the policy for ``args.validation_steps`` steps (at least two) under LEAPP's tracing, and
    compiles, writes and validates the pipeline.

    Raises:
        UsageError: the task's observations or actions do not fit the checkpoint's actor, or ``--export_method``
            for a Direct task.
    """
    import gymnasium as gym
    from isaaclab.app import launch_simulation

    parts, interface = policy.actor.parts, policy.interface
    with launch_simulation(env_cfg, args):
        # LEAPP loads simulation modules: imported once the simulation runtime is up, as Isaac Lab's backends do
        from isaaclab_rl.entrypoints.backends.export_rsl_rl import (
            actor_hidden_from_registered,
            state_dict_from_actor_hidden,
        )
        from leapp import annotate

        env = gym.make(args.task.split(":")[-1], cfg=env_cfg, render_mode=None)
        try:
            check_sizes(env, interface)
            try:
                node = prepare_export_env(env, args, required_obs_groups=set(interface.actor_obs_keys))
            except ValueError as exc:
                raise UsageError(str(exc)) from None
            device = env.unwrapped.device
            with leapp_capture(args, save_path=save_path, env_cfg=env_cfg) as num_steps:
                obs, _ = env.reset()
                hidden = initial_state(parts, env.unwrapped.num_envs, device)
                for _ in range(num_steps):
                    with torch.inference_mode():
                        if hidden is not None:
                            registered = annotate.state_tensors(node, state_dict_from_actor_hidden(hidden))
                            hidden = actor_hidden_from_registered(registered, hidden)
                        actions, hidden = policy_step(parts, actor_input(parts, interface, obs), hidden)
                        if hidden is not None:
                            annotate.update_state(node, state_dict_from_actor_hidden(hidden))
                        if clip_actions is not None:
                            actions = torch.clamp(actions, -clip_actions, clip_actions)
                        obs, _, _, _, _ = env.step(actions)
        finally:
            env.close()


def check_sizes(env, interface) -> None:
    """Raises :class:`UsageError` when the task's actor observation groups or action size differ from the
    checkpoint's."""
    spaces = env.unwrapped.single_observation_space.spaces
    missing = [key for key in interface.actor_obs_keys if key not in spaces]
    if missing:
        raise UsageError(f"The checkpoint's actor reads observation groups {missing}, which the task does not have.")
    obs_dim = sum(int(spaces[key].shape[-1]) for key in interface.flat_keys("actor"))
    action_dim = int(env.unwrapped.single_action_space.shape[-1])
    if (obs_dim, action_dim) != (interface.actor_obs_dim, interface.action_dim):
        raise UsageError(
            f"The checkpoint's actor takes {interface.actor_obs_dim} observations and gives {interface.action_dim} "
            f"actions; the task has {obs_dim} and {action_dim}."
        )
