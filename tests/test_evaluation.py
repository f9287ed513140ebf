"""Evaluation during training (agent.eval_interval): real train.py runs on Cartpole with an evaluation worker, the
TensorBoard events they write, the best checkpoint, a resume, a killed evaluation worker, and play.py on the best."""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal

import psutil
import pytest
import torch

from helpers import CPU_ARGS, Training, assert_ok, run_dirs, run_script, scalars, set_fields
from isaaclab_torchrl.agents import ported_agent
from isaaclab_torchrl.agents.validation import ConfigError, validate_agent_cfg
from isaaclab_torchrl.runners.checkpoint import BEST_CHECKPOINT, EVALUATION_KEY
from isaaclab_torchrl.runners.distributed import DistributedContext
from isaaclab_torchrl.training import TrainingRun, make_eval_worker

TASK_ARGS = ["--task", "Isaac-Cartpole-Direct", "--num_envs", "16", *CPU_ARGS]
EVAL_ARGS = ["agent.eval_interval=2", "agent.eval_episodes=8", "agent.save_interval=2"]
ITERATIONS = 8
SKIPPED = re.compile(r"\[torchrl\] evaluation of iteration (\d+) skipped")
EVAL_WORKER = re.compile(r"\[torchrl\] evaluation worker: pid (\d+)")


@pytest.fixture(scope="module")
def evaluated_run(tmp_path_factory):
    """An 8-iteration run evaluated every 2 iterations: ``(workdir, run_dir, output)``."""
    workdir = tmp_path_factory.mktemp("evaluated_run")
    args = [*TASK_ARGS, "--max_iterations", str(ITERATIONS), *EVAL_ARGS]
    process = run_script("train.py", args, cwd=workdir)
    assert_ok(process)
    (run_dir,) = run_dirs(workdir, "cartpole_direct")
    return workdir, run_dir, process.stdout


def _actor(path: str) -> dict[str, torch.Tensor]:
    return torch.load(path, weights_only=True)["actor"]


def test_evaluations_are_logged_at_the_iterations_evaluated(evaluated_run):
    """Every due iteration is evaluated or said to be skipped (one still running); the last one always is."""
    _, run_dir, output = evaluated_run
    events = scalars(run_dir)
    rewards, lengths = events["Eval/mean_reward"], events["Eval/mean_episode_length"]
    evaluated = [step for step, _ in rewards]
    assert evaluated == [step for step, _ in lengths] == sorted(set(evaluated)), evaluated
    skipped = [int(iteration) for iteration in SKIPPED.findall(output)]
    assert sorted(evaluated + skipped) == list(range(2, ITERATIONS + 1, 2)), (evaluated, skipped)
    assert ITERATIONS in evaluated and 2 in evaluated, evaluated
    # each environment's whole first episode: Cartpole's episodes last 1 to 300 steps
    assert all(1 <= length <= 300 for _, length in lengths), lengths
    assert len(EVAL_WORKER.findall(output)) == 1


def test_the_best_checkpoint_holds_the_best_evaluated_iteration(evaluated_run):
    _, run_dir, _ = evaluated_run
    rewards = scalars(run_dir)["Eval/mean_reward"]
    best_step, best_reward = max(rewards, key=lambda item: item[1])  # the first of equal ones: only better replaces
    best = torch.load(os.path.join(run_dir, BEST_CHECKPOINT), weights_only=True)
    assert best[EVALUATION_KEY]["iteration"] == best["iteration"] == best_step, (best[EVALUATION_KEY], rewards)
    assert best[EVALUATION_KEY]["mean_reward"] == pytest.approx(best_reward, rel=1e-6)
    assert best[EVALUATION_KEY]["episodes"] == 8
    saved = _actor(os.path.join(run_dir, f"model_{best_step}.pt"))  # the same iteration's regular checkpoint
    assert saved.keys() == best["actor"].keys()
    assert all(torch.equal(saved[name], best["actor"][name]) for name in saved)
    assert {"critic", "optimizer", "config", "interface"} <= set(best), "a full checkpoint: it can be resumed"


def test_checkpoint_best_plays_the_best(evaluated_run):
    workdir, run_dir, _ = evaluated_run
    played = run_script("play.py", [*TASK_ARGS, "--checkpoint", "best", "--max_steps", "5"], cwd=workdir)
    assert_ok(played)
    assert f"Playing checkpoint: {os.path.join(run_dir, BEST_CHECKPOINT)}" in played.stdout


@pytest.mark.parametrize("stored", [1e9, -1e9])
def test_a_resume_replaces_the_best_only_with_a_better_one(evaluated_run, tmp_path, stored):
    """The score stored in model_best.pt is set above (below) anything Cartpole can return: the resumed run's
    evaluations must leave it (must replace it)."""
    workdir = tmp_path / "resumed"
    shutil.copytree(evaluated_run[0], workdir)
    (run_dir,) = run_dirs(workdir, "cartpole_direct")
    path = os.path.join(run_dir, BEST_CHECKPOINT)
    best = torch.load(path, weights_only=True)
    best[EVALUATION_KEY]["mean_reward"] = stored
    torch.save(best, path)
    before = os.path.getmtime(path), best[EVALUATION_KEY]
    process = run_script("train.py", [*TASK_ARGS, "--resume", "--max_iterations", "2", *EVAL_ARGS], cwd=workdir)
    assert_ok(process)
    after = torch.load(path, weights_only=True)
    if stored > 0:
        assert (os.path.getmtime(path), after[EVALUATION_KEY]) == before
    else:
        assert after[EVALUATION_KEY]["iteration"] == after["iteration"] > ITERATIONS, after[EVALUATION_KEY]
        assert after[EVALUATION_KEY]["mean_reward"] > stored


def test_a_killed_evaluation_worker_is_one_line_and_training_goes_on(workdir):
    training = Training(workdir, [*TASK_ARGS, "--max_iterations", "1000", "agent.eval_interval=1"])
    training.wait_for_line("evaluation worker: pid")
    (pid,) = map(int, EVAL_WORKER.findall(training.output))
    training.wait_for_iteration(2)
    psutil.Process(pid).send_signal(signal.SIGKILL)
    training.wait_for_line("training goes on without evaluation", timeout=60)
    killed_at = training.last_iteration()
    training.wait_for_iteration(killed_at + 3)
    training.process.send_signal(signal.SIGINT)
    returncode, _ = training.wait(timeout=120)
    assert returncode == 128 + signal.SIGINT, training.output[-3000:]
    warnings = [line for line in training.output.splitlines() if "evaluation worker" in line and "warning" in line]
    assert warnings == [
        f"[torchrl] warning: the evaluation worker (pid {pid}) was killed by SIGKILL: training goes on without "
        "evaluation."
    ], warnings
    assert "Traceback" not in training.output
    (run_dir,) = run_dirs(workdir, "cartpole_direct")
    stopped_at = training.last_iteration()
    assert torch.load(os.path.join(run_dir, f"model_{stopped_at}.pt"), weights_only=True)["iteration"] == stopped_at
    assert max(step for step, _ in scalars(run_dir)["Loss/value"]) == stopped_at
    training.assert_no_process_left()


def test_the_evaluation_worker_dies_with_the_training_process(workdir):
    training = Training(workdir, [*TASK_ARGS, "--max_iterations", "1000", "agent.eval_interval=1"])
    training.wait_for_line("evaluation worker: pid")
    training.wait_for_iteration(1)
    (pid,) = map(int, EVAL_WORKER.findall(training.output))
    assert pid in training.descendants
    training.process.kill()
    training.wait(timeout=30)
    training.assert_no_process_left(grace=3.0)


@pytest.mark.fast
def test_evaluation_settings_are_checked():
    agent_cfg = ported_agent("Isaac-Cartpole-Direct", False)
    assert agent_cfg.eval_interval is None, "off by default"
    for fields, message in (
        ({"eval_interval": -1}, "agent.eval_interval must be >= 0"),
        ({"eval_episodes": 0}, "agent.eval_episodes must be >= 1"),
    ):
        agent_cfg = ported_agent("Isaac-Cartpole-Direct", False)
        set_fields(agent_cfg, fields)
        with pytest.raises(ConfigError, match=message):
            validate_agent_cfg(agent_cfg, num_envs=16)
    set_fields(agent_cfg, {"eval_interval": 0, "eval_episodes": 1})
    validate_agent_cfg(agent_cfg, num_envs=16)
    assert agent_cfg.eval_interval is None


@pytest.mark.fast
def test_only_rank_0_evaluates():
    agent_cfg = ported_agent("Isaac-Cartpole-Direct", False)
    args = argparse.Namespace(task="Isaac-Cartpole-Direct", external_callback=None)
    agent_cfg.eval_episodes = 12
    play_cfg = object()
    run = TrainingRun(args, env_cfg=None, agent_cfg=agent_cfg, eval_env_cfg=play_cfg)
    for rank in (0, 1):
        run.distributed = DistributedContext(rank=rank, world_size=2, local_rank=rank)
        factory = make_eval_worker(run)
        if rank:
            assert factory is None
        else:  # the play config, one environment per episode, every episode from its start
            assert factory.env_cfg is play_cfg and factory.num_envs == 12 and not factory.random_episode_start
