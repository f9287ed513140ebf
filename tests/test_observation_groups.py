"""Observation groups end to end: a user's task (imported with ``--task module:Task``) with a ``critic`` group
trains an asymmetric actor-critic with normalised inputs; the checkpoint holds the statistics; it plays."""

import os

import torch

from helpers import CPU_ARGS, assert_ok, run_dirs, run_script, tasks_env

TASK = "asymmetric_cartpole:Isaac-Cartpole-Asymmetric-Test"
NORMALIZE = ["agent.policy.actor_obs_normalization=true", "agent.policy.critic_obs_normalization=true"]


def test_asymmetric_critic_with_normalisation_trains_and_plays(workdir):
    env = tasks_env()
    task = ["--task", TASK, *CPU_ARGS]
    process = run_script(
        "train.py", [*task, "--num_envs", "16", "--max_iterations", "2", *NORMALIZE], cwd=workdir, extra_env=env
    )
    assert_ok(process)
    (run_dir,) = run_dirs(workdir, "cartpole")
    state = torch.load(os.path.join(run_dir, "model_2.pt"), weights_only=True)

    # the critic reads the 8-dim critic group, the actor the 4-dim policy group
    critic_inputs = {k: v.shape for k, v in state["critic"].items() if k.endswith("0.weight") and v.dim() == 2}
    actor_inputs = {k: v.shape for k, v in state["actor"].items() if k.endswith("0.weight") and v.dim() == 2}
    assert [shape[1] for shape in critic_inputs.values()] == [8], critic_inputs
    assert [shape[1] for shape in actor_inputs.values()] == [4], actor_inputs

    # normalisers: learned statistics of the right size, two batches of 16 envs x 16 steps merged
    critic_stats = {k: v for k, v in state["critic"].items() if k.endswith(("mean", "var", "count"))}
    actor_stats = {k: v for k, v in state["actor"].items() if k.endswith(("mean", "var", "count"))}
    assert sorted(v.numel() for v in critic_stats.values()) == [1, 8, 8], critic_stats.keys()
    assert sorted(v.numel() for v in actor_stats.values()) == [1, 4, 4], actor_stats.keys()
    assert [int(v) for k, v in actor_stats.items() if k.endswith("count")] == [2 * 16 * 16]
    assert [int(v) for k, v in critic_stats.items() if k.endswith("count")] == [2 * 16 * 16]
    assert all(bool((v != 0).any()) for k, v in actor_stats.items() if k.endswith("mean"))
    # the critic group starts with the policy group's terms (relative joint positions and velocities), seen in the
    # same samples: its first four statistics are the actor's
    (actor_mean,) = [v for k, v in actor_stats.items() if k.endswith("mean")]
    (actor_var,) = [v for k, v in actor_stats.items() if k.endswith("var")]
    (critic_mean,) = [v for k, v in critic_stats.items() if k.endswith("mean")]
    (critic_var,) = [v for k, v in critic_stats.items() if k.endswith("var")]
    torch.testing.assert_close(critic_mean[:4], actor_mean)
    torch.testing.assert_close(critic_var[:4], actor_var)

    played = run_script("play.py", [*task, "--num_envs", "2", "--max_steps", "20"], cwd=workdir, extra_env=env)
    assert_ok(played)
    assert os.path.isfile(os.path.join(run_dir, "exported", "policy.onnx"))
