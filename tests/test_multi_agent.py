"""Multi-agent tasks (``DirectMARLEnv``) train as one agent, converted in the worker as Isaac Lab's rsl_rl workflow
converts them: the agents' observations concatenated, their actions split, their rewards summed."""

import argparse
import os

import gymnasium as gym
import pytest
import torch

from helpers import CPU_ARGS, assert_ok, run_dirs, run_script, scalars, tasks_env


def test_a_two_agent_task_trains_as_one_agent_and_plays(workdir):
    args = ["--task", "two_agent_cartpole:Isaac-Cartpole-Two-Agent-Test", "--num_envs", "16", *CPU_ARGS]
    trained = run_script("train.py", [*args, "--max_iterations", "3"], cwd=workdir, extra_env=tasks_env())
    assert_ok(trained)
    # the cart's two observations and the pole's two in one group; one action per agent
    assert "actor observes policy (4), critic policy (4); 2 actions" in trained.stdout
    (run_dir,) = run_dirs(workdir, "two_agent_cartpole")
    assert os.path.exists(os.path.join(run_dir, "model_3.pt"))
    assert [step for step, _ in scalars(run_dir)["Loss/surrogate"]] == [1, 2, 3]
    played = run_script(
        "play.py", [*args, "--checkpoint", run_dir, "--max_steps", "20"], cwd=workdir, extra_env=tasks_env()
    )
    assert_ok(played)
    assert os.path.exists(os.path.join(run_dir, "exported", "policy.onnx"))


@pytest.mark.fast
def test_shadow_handover_resolves_and_its_converted_spaces_build_the_networks():
    from isaaclab.envs import DirectMARLEnvCfg
    from isaaclab.envs.utils.spaces import spec_to_gym_space
    from tensordict import TensorDict

    import isaaclab_torchrl  # noqa: F401  (registers the tasks the agents are ported from)
    from isaaclab_torchrl.agents.validation import validate_agent_cfg
    from isaaclab_torchrl.cli import resolve_task
    from isaaclab_torchrl.envs import resolve_obs_groups
    from isaaclab_torchrl.models import EnvInterface, make_models

    task = "Isaac-Shadow-Handover-Direct"
    args = argparse.Namespace(task=task, agent="torchrl", device="cpu", num_envs=64, seed=None)
    env_cfg, cfg = resolve_task(args, [])
    validate_agent_cfg(cfg, env_cfg.scene.num_envs)
    assert isinstance(env_cfg, DirectMARLEnvCfg)
    # the single-agent space of Isaac Lab's conversion (multi_agent_to_single_agent): one "policy" group
    agents = env_cfg.possible_agents
    flat = {
        kind: gym.spaces.flatten_space(gym.spaces.Tuple([spec_to_gym_space(spaces[agent]) for agent in agents]))
        for kind, spaces in (("obs", env_cfg.observation_spaces), ("action", env_cfg.action_spaces))
    }
    groups = resolve_obs_groups(cfg.obs_groups, gym.spaces.Dict(policy=flat["obs"]))
    assert groups["actor"] == groups["critic"] == ["policy"]
    obs_dim, action_dim = flat["obs"].shape[0], flat["action"].shape[0]
    assert (obs_dim, action_dim) == (2 * 157, 2 * 20)
    actor, critic = make_models(cfg.policy, EnvInterface(("policy",), obs_dim, ("policy",), obs_dim, action_dim), "cpu")
    batch = TensorDict(policy=torch.randn(8, obs_dim), batch_size=[8])
    assert actor(batch.clone())["action"].shape == (8, action_dim)
    assert critic(batch.clone())["state_value"].shape == (8, 1)
