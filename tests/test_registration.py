"""Importing isaaclab_torchrl registers its agents beside, never instead of, the existing entry points."""

import os
import subprocess
import sys

import gymnasium as gym
from isaaclab_tasks.utils.parse_cfg import load_cfg_from_registry

import isaaclab_torchrl  # noqa: F401
from conftest import REPO, script_env
from isaaclab_torchrl.agents import ENTRY_POINT, LSTM_ENTRY_POINT, TorchRLRunnerCfg, agent_entry_point, register_agents


def test_cartpole_tasks_have_mlp_and_lstm_agents():
    for task in ("Isaac-Cartpole-Direct", "Isaac-Cartpole"):
        mlp = load_cfg_from_registry(task, agent_entry_point("torchrl"))
        lstm = load_cfg_from_registry(task, agent_entry_point("torchrl_lstm"))
        assert isinstance(mlp, TorchRLRunnerCfg) and mlp.policy.rnn_type is None
        assert isinstance(lstm, TorchRLRunnerCfg) and lstm.policy.rnn_type == "lstm"
        # hyperparameters ported from the task's rsl_rl config
        rsl = load_cfg_from_registry(task, "rsl_rl_cfg_entry_point")
        assert mlp.num_steps_per_env == rsl.num_steps_per_env
        assert mlp.algorithm.learning_rate == rsl.algorithm.learning_rate
        assert mlp.policy.actor_hidden_dims == rsl.actor.hidden_dims


def test_isaaclab_builtin_torchrl_entry_point_is_untouched():
    from isaaclab_rl.torchrl import TorchRlPpoCfg

    for task in ("Isaac-Cartpole-Direct", "Isaac-Cartpole"):
        assert isinstance(load_cfg_from_registry(task, "torchrl_cfg_entry_point"), TorchRlPpoCfg)


def test_explicit_entry_point_and_third_party_task_are_honoured():
    assert agent_entry_point(LSTM_ENTRY_POINT) == LSTM_ENTRY_POINT
    gym.register(
        id="ThirdParty-Cartpole-v0",
        entry_point="isaaclab_tasks.core.cartpole.cartpole_direct_env:CartpoleEnv",
        kwargs={ENTRY_POINT: "my_package.agents:MyCfg"},
    )
    register_agents()
    assert gym.registry["ThirdParty-Cartpole-v0"].kwargs[ENTRY_POINT] == "my_package.agents:MyCfg"


def test_isaaclab_builtin_torchrl_backend_still_trains(tmp_path):
    """Isaac Lab's own `isaaclab train --rl_library torchrl`, in a process that imported our extension."""
    code = (
        "import sys, isaaclab_torchrl\n"
        "from isaaclab_rl.entrypoints.dispatch import run_train_cli\n"
        "sys.exit(run_train_cli(sys.argv[1:]))\n"
    )
    process = subprocess.run(
        [
            sys.executable,
            "-c",
            code,
            "--rl_library",
            "torchrl",
            "--task",
            "Isaac-Cartpole-Direct",
            "--num_envs",
            "16",
            "--device",
            "cpu",
            "--viz",
            "none",
            "--max_iterations",
            "1",
            "physics=newton_mjwarp",
        ],
        cwd=tmp_path,
        env=script_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert process.returncode == 0, process.stderr[-4000:]
    assert os.path.isdir(os.path.join(tmp_path, "logs", "torchrl", "cartpole_direct")), process.stdout[-2000:]
    assert REPO
