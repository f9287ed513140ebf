"""scripts/train.py end to end: LSTM agent, two collector subprocesses, real Isaac Lab (kitless Newton, CPU)."""

import os

import torch
import yaml

from helpers import (
    CPU_ARGS,
    Training,
    assert_ok,
    run_dirs,
    run_script,
    scalars,
    script_env_with_cache_home,
    worker_pids,
)


def test_lstm_two_collectors_writes_logs_params_and_checkpoints(workdir):
    training = Training(
        workdir,
        [
            "--task",
            "Isaac-Cartpole-Direct",
            "--agent",
            "torchrl_lstm",
            "--num_envs",
            "32",
            "--num_collectors",
            "2",
            "--max_iterations",
            "5",
            "--run_name",
            "e2e",
            *CPU_ARGS,
            "agent.algorithm.learning_rate=3e-4",
            "agent.save_interval=2",
        ],
    )
    # two live worker processes, the ones the runner names (they live until training ends)
    training.wait_for_line("[torchrl] collector workers:")
    assert sorted(worker_pids(training.output).values()) == sorted(w.pid for w in training.workers())
    assert len(training.workers()) == 2
    returncode, _ = training.wait(timeout=900)
    assert returncode == 0, training.output[-4000:]
    (run_dir,) = run_dirs(workdir, "cartpole_direct_lstm")
    assert run_dir.endswith("_e2e")
    assert run_dir in training.output, "the script says where logs and checkpoints went"
    assert "[torchrl] environment: actor observes policy (4), critic policy (4); 1 actions" in training.output
    # the batch holds the recurrent states the rollouts started from, folded across their 16 steps (2 values of the
    # 32 per step): neither every step's state (the update reads a slice's first), nor the networks' intermediates
    # (the update recomputes them), nor the next states (the next step's root states; the buffer kept them as zeros)
    (stored,) = [line for line in training.output.splitlines() if "batch bytes per env step:" in line]
    entries = {entry.split()[0]: entry for entry in stored.split(": ", 1)[1].split("; ")[0].split(", ")}
    states = [f"rollout_start/{role}_rnn_{state}" for role in ("actor", "critic") for state in "hc"]
    assert {*states, "policy", "next/final_obs/policy"} <= entries.keys(), stored
    assert all(entries[key] == f"{key} 8 (float32 2)" for key in states), stored
    assert not {key for key in entries if key.endswith(("_rnn_h", "_rnn_c")) and "/" not in key}, stored
    assert not {key for key in entries if key.endswith(("_rnn_features", "_obs_normalized"))}, stored
    assert not {key for key in entries if key.startswith("next/") and "_rnn_" in key}, stored

    with open(os.path.join(run_dir, "params", "agent.yaml")) as file:
        agent = yaml.safe_load(file)
    assert agent["algorithm"]["learning_rate"] == 3e-4, "Hydra overrides reach the agent config"
    assert agent["policy"]["rnn_type"] == "lstm"
    with open(os.path.join(run_dir, "params", "env.yaml")) as file:
        env = yaml.load(file, Loader=yaml.FullLoader)  # Isaac Lab writes tuples with python tags
    assert env["scene"]["num_envs"] == 32

    assert sorted(f for f in os.listdir(run_dir) if f.endswith(".pt")) == ["model_2.pt", "model_4.pt", "model_5.pt"]
    checkpoint = torch.load(os.path.join(run_dir, "model_5.pt"), weights_only=True)
    assert checkpoint["iteration"] == 5
    assert {"actor", "critic", "optimizer", "config"} <= set(checkpoint)

    tags = scalars(run_dir)
    for tag in (
        "Loss/surrogate",
        "Loss/value",
        "Loss/entropy",
        "Loss/kl",
        "Loss/learning_rate",
        "Loss/grad_norm",
        "Perf/total_fps",
        "Perf/collection_time",
        "Perf/learning_time",
        "Perf/policy_lag",
        "Train/mean_reward",
        "Train/mean_episode_length",
        "Metrics/success_rate",  # Isaac Lab's extras["log"] term of Cartpole-Direct, carried from the workers
    ):
        assert tag in tags, f"{tag} missing from TensorBoard (have {sorted(tags)})"
    assert [step for step, _ in tags["Loss/surrogate"]] == [1, 2, 3, 4, 5]
    assert all(value == 0.0 for _, value in tags["Perf/policy_lag"]), "synchronous collection is on-policy"


def test_async_with_two_workers_updates_on_every_environment_with_lag_correction(workdir):
    """Each update learns from num_envs x num_steps_per_env steps (both workers' rollouts), which the observation
    normaliser counts; the lag-corrected update logs its importance weights. The update is compiled (what a GPU
    runs by default, here on the CPU), with inductor's cache in the user's cache folder."""
    args = ["--task", "Isaac-Cartpole-Direct", "--num_envs", "16", "--num_collectors", "2", "--async"]
    args += ["--max_iterations", "3", *CPU_ARGS, "agent.policy.actor_obs_normalization=true", "agent.compile=true"]
    cache_home = os.path.join(str(workdir), "cache")
    env = script_env_with_cache_home(cache_home)
    env.pop("TORCHINDUCTOR_CACHE_DIR", None)
    process = run_script("train.py", args, cwd=workdir, env=env)
    assert_ok(process)
    assert "update: compiled; inference: eager; collection: async, 2 workers" in process.stdout
    assert os.listdir(os.path.join(cache_home, "isaaclab_torchrl", "torchinductor")), "inductor's cache is empty"
    (run_dir,) = run_dirs(workdir, "cartpole_direct")
    state = torch.load(os.path.join(run_dir, "model_3.pt"), weights_only=True)
    counts = [int(value) for key, value in state["actor"].items() if key.endswith("count")]
    assert counts == [3 * 16 * 16], counts
    tags = scalars(run_dir)
    weights = [value for _, value in tags["Policy/importance_weight"]]
    assert len(weights) == 3 and all(0.0 < weight <= 1.0 for weight in weights), weights
    assert "Policy/truncated_fraction" in tags
