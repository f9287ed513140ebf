"""Play a trained torchrl policy: deterministic actions, recurrent state carried across steps and reset on done.

    python scripts/play.py --task Isaac-Cartpole-Direct --agent torchrl --viz none [--checkpoint PATH|latest]
        [--load_run REGEX] [--num_envs N] [--num_episodes K] [--max_steps S]

The checkpoint defaults to the last one of the newest run under logs/torchrl/<experiment>/.
"""

from __future__ import annotations

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
from isaaclab_torchrl.cli import (
    UsageError,
    check_isaaclab_args,
    checkpoint_path,
    launcher_args,
    make_play_parser,
    parse_args,
    resolve_task,
)
from isaaclab_torchrl.envs import IsaacLabEnvFactory, env_interface, env_obs_groups
from isaaclab_torchrl.export import export_policy
from isaaclab_torchrl.policy import load_policy
from isaaclab_torchrl.runners import load_checkpoint
from isaaclab_torchrl.runners.logger import finished_episodes
from isaaclab_torchrl.runs import experiment_root


def main(argv: list[str]) -> int:
    args, hydra_args = parse_args(make_play_parser(), argv)
    try:
        check_isaaclab_args(args, train=False)
        # --train_env_cfg: the training env config as it is, without the task's play-mode changes
        env_cfg, agent_cfg = resolve_task(args, hydra_args, play_mode=not args.train_env_cfg)
        experiment_dir = experiment_root(args.experiment_name or agent_cfg.experiment_name)
        path = checkpoint_path(experiment_dir, args.checkpoint, args.load_run)
        # the observation groups the checkpoint was trained with, not the registry's current default
        obs_groups = env_obs_groups(yaml.safe_load(load_checkpoint(path)["config"]))
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

    env = IsaacLabEnvFactory(
        args.task,
        env_cfg,
        launcher_args(args),
        env_cfg.scene.num_envs,
        agent_cfg.seed,
        agent_cfg.clip_actions,
        obs_groups=obs_groups,
    )()
    interface = env_interface(env)
    try:
        policy = load_policy(path, args.device, interface)
    except ValueError as exc:
        env.close()
        print(f"[torchrl] error: task {args.task!r}: {exc}", file=sys.stderr)
        return 2
    actor = policy.actor
    export_dir = os.path.join(os.path.dirname(os.path.abspath(path)), "exported")
    for exported in export_policy(actor, interface.actor_obs_dim, export_dir, images=interface.image_groups("actor")):
        print(f"[torchrl] Exported policy: {exported}")
    env.append_transform(InitTracker())
    if policy.cfg.rnn_type is not None:
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
