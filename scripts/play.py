"""Play a trained torchrl policy: deterministic actions, recurrent state carried across steps and reset on done.

    python scripts/play.py --task Isaac-Cartpole-Direct --agent torchrl --viz none [--checkpoint PATH|latest]
        [--load_run REGEX] [--num_envs N] [--num_episodes K] [--max_steps S]

The checkpoint defaults to the last one of the newest run under logs/torchrl/<experiment>/.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time

import torch
import yaml
from isaaclab_rl.entrypoints.common import apply_video_recording, pre_launch_video_config
from torchrl.envs import InitTracker
from torchrl.envs.utils import ExplorationType, set_exploration_type
from torchrl.modules.utils import get_primers_from_module

import isaaclab_torchrl  # noqa: F401  (registers the torchrl agents on Isaac Lab's tasks)
from isaaclab_torchrl.agents import TorchRLPolicyCfg
from isaaclab_torchrl.cli import (
    UsageError,
    add_isaaclab_args,
    check_isaaclab_args,
    checkpoint_path,
    launcher_args,
    parse_args,
    resolve_task,
)
from isaaclab_torchrl.envs import IsaacLabEnvFactory, env_interface
from isaaclab_torchrl.export import export_policy
from isaaclab_torchrl.models import make_models
from isaaclab_torchrl.runners import load_checkpoint
from isaaclab_torchrl.runners.logger import finished_episodes


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description="Play a policy trained with isaaclab_torchrl.")
    parser.add_argument(
        "--checkpoint", type=str, default="latest", help="Checkpoint file, run folder, 'latest' or a file-name regex."
    )
    parser.add_argument("--load_run", type=str, default=".*", help="Regex of the run folder (newest match).")
    parser.add_argument("--num_episodes", type=int, default=10, help="Stop after this many finished episodes.")
    parser.add_argument("--max_steps", type=int, default=2000, help="Stop after this many environment steps.")
    add_isaaclab_args(parser, train=False)
    return parser


def main(argv: list[str]) -> int:
    args, hydra_args = parse_args(make_parser(), argv)
    try:
        check_isaaclab_args(args, train=False)
        # --train_env_cfg: the training env config as it is, without the task's play-mode changes
        env_cfg, agent_cfg = resolve_task(args, hydra_args, play_mode=not args.train_env_cfg)
        experiment = args.experiment_name or agent_cfg.experiment_name
        log_root = os.path.abspath(os.path.join("logs", "torchrl", experiment))
        path = checkpoint_path(log_root, args.checkpoint, args.load_run)
        checkpoint = load_checkpoint(path, map_location=args.device)
        # Isaac Lab records videos from a visualizer, configured on the env config before the launch
        pre_launch_video_config(env_cfg, args)
        try:
            apply_video_recording(
                env_cfg, os.path.dirname(os.path.abspath(path)), args, subdir="play", checkpoint_path=path
            )
        except ValueError as exc:
            raise UsageError(
                f"--video needs a renderer or visualizer to record from, and none is available: {exc}"
            ) from exc
    except (UsageError, FileNotFoundError, ValueError) as exc:
        print(f"[torchrl] error: {exc}", file=sys.stderr)
        return 2
    print(f"[torchrl] Playing checkpoint: {path}")

    # the network and observation groups the checkpoint was trained with, not the registry's current default
    trained_cfg = yaml.safe_load(checkpoint["config"])
    # fields that later versions dropped are left out (checkpoints of earlier versions keep playing)
    fields = {field.name for field in dataclasses.fields(TorchRLPolicyCfg)}
    policy_cfg = TorchRLPolicyCfg(**{key: value for key, value in trained_cfg["policy"].items() if key in fields})
    env = IsaacLabEnvFactory(
        args.task,
        env_cfg,
        launcher_args(args),
        env_cfg.scene.num_envs,
        agent_cfg.seed,
        agent_cfg.clip_actions,
        obs_groups=trained_cfg.get("obs_groups"),
    )()
    interface = env_interface(env)
    actor, _ = make_models(policy_cfg, interface, args.device)
    try:
        actor.load_state_dict(checkpoint["actor"])
    except RuntimeError as exc:
        env.close()
        print(
            f"[torchrl] error: checkpoint {path} does not fit task {args.task!r}: {str(exc).splitlines()[0]}",
            file=sys.stderr,
        )
        return 2
    export_dir = os.path.join(os.path.dirname(os.path.abspath(path)), "exported")
    for exported in export_policy(actor, interface.actor_obs_dim, export_dir):
        print(f"[torchrl] Exported policy: {exported}")
    env.append_transform(InitTracker())
    if policy_cfg.rnn_type is not None:
        env.append_transform(get_primers_from_module(actor))

    returns, lengths = [], []
    with torch.no_grad(), set_exploration_type(ExplorationType.DETERMINISTIC):
        step_dt = env.base_env.unwrapped.step_dt
        td = env.reset()
        for _ in range(args.max_steps):
            step_start = time.perf_counter()
            td, next_td = env.step_and_maybe_reset(actor(td))
            for episode_return, length in zip(*finished_episodes(td), strict=True):
                returns.append(episode_return)
                lengths.append(length)
                print(f"[torchrl] episode {len(returns):4d}: return {episode_return:9.3f}, length {length}")
            td = next_td
            if len(returns) >= args.num_episodes:
                break
            if args.real_time:
                time.sleep(max(0.0, step_dt - (time.perf_counter() - step_start)))
    env.close()
    if returns:
        print(
            f"[torchrl] mean return {sum(returns) / len(returns):.3f}, mean length "
            f"{sum(lengths) / len(lengths):.1f} over {len(returns)} episodes"
        )
    else:
        print("[torchrl] no episode finished within --max_steps")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
