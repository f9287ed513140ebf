"""Time of rsl_rl's ``PPO.update`` alone, the reference of ``benchmarks/learner.py`` (a benchmark, not a test).

    python benchmarks/rsl_rl_learner.py --task Isaac-Cartpole-Direct --num_envs 64 --device cpu [--agent KEY]

rsl_rl's algorithm and models, built as its ``OnPolicyRunner`` builds them from the task's rsl_rl agent config
(``rsl_rl_cfg_entry_point``, or ``--agent``), fill their rollout storage by acting on random observations for
``num_steps_per_env`` steps (episode ends at random, ``--done_prob``), compute the returns and update. The update is
timed, and the returns' computation with it (GAE, which ``learner.py``'s update of ours includes; rsl_rl's critic
values come from its acting, which is not timed). Same sizes as ours: the task's observation and action sizes of
``learner.py``, the agent's steps, epochs and minibatches.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from learner import TASK_SIZES
from tensordict import TensorDict


def make_algorithm(task: str, agent: str, num_envs: int, device: str):
    """rsl_rl's PPO for the task's rsl_rl agent config, with its storage, for ``num_envs`` environments."""
    import isaaclab_tasks  # noqa: F401  (registers the tasks)
    from isaaclab_rl.rsl_rl.utils import handle_deprecated_rsl_rl_cfg
    from isaaclab_tasks.utils.parse_cfg import load_cfg_from_registry
    from rsl_rl.algorithms import PPO

    cfg = load_cfg_from_registry(task, agent)
    handle_deprecated_rsl_rl_cfg(cfg, "5.0.0")
    cfg.device = device
    obs_dim, action_dim = TASK_SIZES[task]
    obs = TensorDict({"policy": torch.zeros(num_envs, obs_dim, device=device)}, batch_size=[num_envs])
    env = argparse.Namespace(num_envs=num_envs, num_actions=action_dim)
    runner_cfg = {**cfg.to_dict(), "multi_gpu": None}  # one process (OnPolicyRunner's value without torchrun)
    algorithm = PPO.construct_algorithm(obs, env, runner_cfg, device)
    return algorithm, cfg.num_steps_per_env, obs_dim


def rollout(algorithm, steps: int, num_envs: int, obs_dim: int, done_prob: float, device: str) -> TensorDict:
    """Fills the algorithm's storage as its runner does, from random observations, rewards and episode ends; returns
    the last observations."""
    with torch.inference_mode():
        for _ in range(steps):
            obs = TensorDict({"policy": torch.randn(num_envs, obs_dim, device=device)}, batch_size=[num_envs])
            algorithm.act(obs)
            dones = (torch.rand(num_envs, device=device) < done_prob).float()
            time_outs = dones * (torch.rand(num_envs, device=device) < 0.25)
            rewards = torch.randn(num_envs, device=device)
            algorithm.process_env_step(obs, rewards, dones, {"time_outs": time_outs})
    return obs


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", choices=sorted(TASK_SIZES), default="Isaac-Cartpole-Direct")
    parser.add_argument("--agent", default="rsl_rl_cfg_entry_point")
    parser.add_argument("--num_envs", type=int, default=64)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--done_prob", type=float, default=0.02)
    args = parser.parse_args()
    torch.manual_seed(0)
    algorithm, steps, obs_dim = make_algorithm(args.task, args.agent, args.num_envs, args.device)
    times, with_returns = [], []
    for _ in range(args.iterations):
        last_obs = rollout(algorithm, steps, args.num_envs, obs_dim, args.done_prob, args.device)
        start = time.perf_counter()
        with torch.inference_mode():
            algorithm.compute_returns(last_obs)
        if args.device.startswith("cuda"):
            torch.cuda.synchronize(args.device)
        returns_done = time.perf_counter()
        algorithm.update()  # returns floats: the device has finished
        times.append(time.perf_counter() - returns_done)
        with_returns.append(time.perf_counter() - start)
    median = statistics.median(times[args.warmup :])
    median_with_returns = statistics.median(with_returns[args.warmup :])
    print(
        f"rsl_rl {args.task} {args.agent}: update {median * 1000:.1f} ms (first {times[0] * 1000:.1f} ms), "
        f"returns + update {median_with_returns * 1000:.1f} ms"
    )


if __name__ == "__main__":
    main()
