"""The environment's sizes are read by a probe process once per task config and remembered in the user's cache
folder; a worker whose environment disagrees with the remembered sizes stops the run and removes them, and a resume
whose checkpoint does not fit them makes the probe read them again and replace them."""

import glob
import json
import os

from helpers import CPU_ARGS, assert_ok, run_script, script_env_with_cache_home

ARGS = ["--task", "Isaac-Cartpole-Direct", "--num_envs", "16", "--max_iterations", "1", *CPU_ARGS]


def test_sizes_are_remembered_and_a_stale_entry_is_named_and_replaced_or_removed(workdir):
    cache_home = os.path.join(str(workdir), "cache")
    env = script_env_with_cache_home(cache_home)
    first = run_script("train.py", ARGS, cwd=workdir, env=env)
    assert_ok(first)
    assert "; 1 actions (read by a probe process)" in first.stdout
    (entry,) = glob.glob(os.path.join(cache_home, "isaaclab_torchrl", "env_interfaces", "*.json"))
    with open(entry) as file:
        sizes = json.load(file)
    assert sizes["actor_obs_dim"] == 4 and sizes["action_dim"] == 1, sizes

    # what a task whose code changed an observation's size, and no config, would leave behind
    stale_sizes = {**sizes, "actor_obs_dim": 5, "critic_obs_dim": 5}
    with open(entry, "w") as file:
        json.dump(stale_sizes, file)
    # a resume: the checkpoint (trained on the task's real sizes) does not fit the stale entry
    resumed = run_script("train.py", [*ARGS, "--resume"], cwd=workdir, env=env)
    assert_ok(resumed)
    assert "[torchrl] Stale sizes remembered for this task (actor observes policy (5)" in resumed.stdout
    assert "Resuming from" in resumed.stdout and "it     2/2" in resumed.stdout, resumed.stdout[-3000:]
    with open(entry) as file:
        assert json.load(file) == sizes, "the entry holds the probe's sizes"
    again = run_script("train.py", [*ARGS, "--resume"], cwd=workdir, env=env)
    assert_ok(again)
    assert "(remembered from an earlier run)" in again.stdout and "Stale" not in again.stdout

    # a new run: the worker's check
    with open(entry, "w") as file:
        json.dump(stale_sizes, file)
    stale = run_script("train.py", ARGS, cwd=workdir, env=env, timeout=300)
    assert stale.returncode != 0
    output = stale.stdout + stale.stderr
    assert "(remembered from an earlier run)" in stale.stdout
    assert "differ from the ones remembered for this task from an earlier run" in output, output[-4000:]
    assert not os.path.exists(entry), "the stale entry is removed"
