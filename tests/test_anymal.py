"""Offline ANYmal: Isaac-Velocity-Flat-AnymalD trains kitless on the CPU with the vendored asset root (ANYmal C
as the ANYmal-D file, the DC-motor actuator model instead of the missing actuator network), and plays."""

import os

import pytest

from helpers import CPU_ARGS, assert_ok, run_dirs, run_script, scalars


@pytest.mark.parametrize("agent, experiment", [("torchrl", "anymal_d_flat"), ("torchrl_lstm", "anymal_d_flat_lstm")])
def test_anymal_flat_smoke_train_and_play(workdir, agent, experiment):
    task = ["--task", "Isaac-Velocity-Flat-AnymalD", "--agent", agent, *CPU_ARGS]
    # the documented offline switch alone: the workers' Isaac Lab must build the terrain's ground plane offline too
    args = [*task, "--num_envs", "16", "--max_iterations", "2"]
    process = run_script("train.py", args, cwd=workdir, offline_switch=True)
    assert_ok(process)
    assert "uses the DC-motor model ANYDRIVE_3_SIMPLE_ACTUATOR_CFG" in process.stdout + process.stderr
    (run_dir,) = run_dirs(workdir, experiment)
    assert os.path.isfile(os.path.join(run_dir, "model_2.pt"))
    # random initial episode lengths end some episodes within the first 48 steps
    episode_terms = [tag for tag in scalars(run_dir) if tag.startswith("Episode_Reward/")]
    assert "Episode_Reward/track_lin_vel_xy_exp" in episode_terms, episode_terms
    played = run_script("play.py", [*task, "--num_envs", "2", "--max_steps", "20"], cwd=workdir)
    assert_ok(played)
    assert os.path.isfile(os.path.join(run_dir, "exported", "policy.onnx"))
