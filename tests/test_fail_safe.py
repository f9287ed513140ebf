"""Training fails safe: a killed or hung worker, SIGINT/SIGTERM, NaN rewards. Real train.py processes, real
collector workers, real signals; afterwards no process of the run may be left and the checkpoints must load."""

from __future__ import annotations

import multiprocessing
import os
import re
import signal
import time

import psutil
import pytest
import torch

from helpers import CPU_ARGS, Training, assert_ok, run_dirs, run_script, scalars, tasks_env, worker_pids
from isaaclab_torchrl.runners.safety import CollectorWatchdog, WorkerFailure

TASK_ARGS = ["--task", "Isaac-Cartpole-Direct", "--num_envs", "16", *CPU_ARGS]


def _latest_checkpoint(workdir) -> tuple[str, int]:
    (run_dir,) = run_dirs(workdir, "cartpole_direct")
    iterations = [int(name[6:-3]) for name in os.listdir(run_dir) if re.fullmatch(r"model_\d+\.pt", name)]
    assert iterations, os.listdir(run_dir)
    return run_dir, max(iterations)


def _assert_checkpoint_plays(workdir, run_dir: str, iteration: int) -> None:
    path = os.path.join(run_dir, f"model_{iteration}.pt")
    state = torch.load(path, weights_only=True)
    assert state["iteration"] == iteration
    assert all(bool(torch.isfinite(value).all()) for value in state["actor"].values() if value.is_floating_point())
    played = run_script("play.py", [*TASK_ARGS, "--checkpoint", path, "--max_steps", "5"], cwd=workdir)
    assert_ok(played)


def test_killed_worker_stops_training_with_intact_checkpoints(workdir):
    training = Training(
        workdir, [*TASK_ARGS, "--num_collectors", "2", "--max_iterations", "1000", "agent.save_interval=1"]
    )
    training.wait_for_iteration(2)
    pids = worker_pids(training.output)
    assert sorted(pids) == [0, 1] and sorted(pids.values()) == sorted(w.pid for w in training.workers())
    victim = psutil.Process(pids[1])  # collector 1, whatever the pids' order
    killed_at = time.monotonic()
    victim.send_signal(signal.SIGKILL)
    returncode, _ = training.wait(timeout=60)
    assert returncode == 1, training.output[-3000:]
    stopped_at = training.time_of("Training stopped")
    assert stopped_at is not None, training.output[-3000:]
    assert f"collector worker 1 (pid {pids[1]}) was killed by SIGKILL" in training.output, training.output[-3000:]
    assert stopped_at - killed_at < 10, f"took {stopped_at - killed_at:.1f} s to notice"
    training.assert_no_process_left()
    run_dir, iteration = _latest_checkpoint(workdir)
    assert iteration >= 2
    _assert_checkpoint_plays(workdir, run_dir, iteration)


def test_killed_training_process_leaves_no_process(workdir):
    """SIGKILL of the training process (out of memory, a cluster scheduler) while its worker, forked by the fork
    server, hangs: the server and the worker end at once all the same."""
    training = Training(workdir, [*TASK_ARGS, "--max_iterations", "1000"])
    training.wait_for_iteration(2)
    (worker,) = training.workers()
    server = psutil.Process(worker.ppid())
    assert server.ppid() == training.process.pid and "forkserver" in " ".join(server.cmdline())
    worker.send_signal(signal.SIGSTOP)  # a worker that can no longer notice anything itself
    training.process.kill()
    training.wait(timeout=30)
    training.assert_no_process_left(grace=3.0)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_signal_stops_after_the_update_and_saves_it(workdir, signum):
    training = Training(workdir, [*TASK_ARGS, "--max_iterations", "1000"])
    training.wait_for_iteration(2)
    training.process.send_signal(signum)
    returncode, seconds = training.wait(timeout=60)
    assert returncode == 128 + signum, training.output[-3000:]
    assert f"{signum.name} received" in training.output
    training.assert_no_process_left()
    last = training.last_iteration()
    run_dir, iteration = _latest_checkpoint(workdir)
    assert iteration == last, "the checkpoint is that of the last finished update"
    assert scalars(run_dir)["Loss/surrogate"][-1][0] == last, "TensorBoard was flushed"
    _assert_checkpoint_plays(workdir, run_dir, iteration)


def test_second_sigint_aborts_at_once(workdir):
    # a long update (200 epochs, ~1 s on two cores): the first SIGINT's clean stop cannot end before the second
    # SIGINT, which is sent once the first was handled (two signals before the handler runs would count as one)
    args = [*TASK_ARGS, "--max_iterations", "1000", "agent.algorithm.num_learning_epochs=200"]
    training = Training(workdir, args)
    training.wait_for_iteration(2)
    training.process.send_signal(signal.SIGINT)
    training.wait_for_line("SIGINT received", timeout=30)
    training.process.send_signal(signal.SIGINT)
    returncode, seconds = training.wait(timeout=60)
    assert returncode == 130, training.output[-3000:]
    assert "Training aborted" in training.output, training.output[-3000:]
    assert "Stopped by SIGINT" not in training.output, "the second SIGINT must abort, not stop cleanly"
    assert seconds < 30, f"took {seconds:.1f} s to abort"
    training.assert_no_process_left()


@pytest.mark.parametrize(
    "stopped_during, overrides, message",
    [
        # the signal may also meet the weight sync after a short update: either wait must end in the timeout error
        ("the collection", [], r"delivered no (batch|acknowledgement of the new weights) within 5 s"),
        # a long update (1000 epochs, ~5 s on two cores; 200 took 0.95 s): the worker is stopped while the learner
        # trains, and the weight sync that follows waits for its acknowledgement (torchrl's wait has no timeout)
        ("the update", ["agent.algorithm.num_learning_epochs=1000"], "delivered no acknowledgement of the new weights"),
    ],
)
def test_hung_worker_is_a_timeout_error(workdir, stopped_during, overrides, message):
    args = [*TASK_ARGS, "--max_iterations", "1000", "agent.collector.batch_timeout_s=5", *overrides]
    training = Training(workdir, args)
    training.wait_for_iteration(2)
    if stopped_during == "the update":
        time.sleep(1.0)  # past the next batch's collection (~0.2 s), well inside the update (~5 s)
    (worker,) = training.workers()
    worker.send_signal(signal.SIGSTOP)  # alive but silent
    returncode, seconds = training.wait(timeout=90)
    assert returncode == 1, training.output[-3000:]
    assert re.search(message, training.output), training.output[-3000:]
    training.assert_no_process_left()


@pytest.mark.parametrize("then", ["returns", "waits again"])
def test_watchdog_ends_a_wait_that_catches_its_signal(then):
    """torchrl's wait for the workers' weight acknowledgements logs any exception and goes on: the watchdog must
    still end it (it signals again) and the failure must still reach the caller (even when the wait returns)."""
    worker = multiprocessing.get_context("spawn").Process(target=time.sleep, args=(60,))  # a hung worker
    worker.start()
    watchdog = CollectorWatchdog([worker], first_batch_timeout=1.0, batch_timeout=1.0)
    caught = []

    def wait_catching_everything():
        for _ in range(2):
            try:
                time.sleep(30)
            except Exception as exc:
                caught.append(exc)
        if then == "waits again":
            time.sleep(30)
        return "answered"

    start = time.monotonic()
    try:
        with pytest.raises(WorkerFailure, match="delivered no acknowledgement of the new weights within 1 s"):
            watchdog.wait_for("acknowledgement of the new weights", wait_catching_everything)
        assert time.monotonic() - start < 15
        assert len(caught) == 2 and all(isinstance(exc, WorkerFailure) for exc in caught), caught
        worker.join(timeout=10)
        assert worker.exitcode == -signal.SIGKILL, "the hung worker is killed"
    finally:
        watchdog.stop()
        worker.kill()


def test_nan_rewards_stop_training_and_keep_the_parameters_from_before(workdir):
    env = tasks_env()
    args = ["--task", "nan_cartpole:Isaac-Cartpole-NaN-Test", "--num_envs", "16", *CPU_ARGS]
    process = run_script(
        "train.py", [*args, "--max_iterations", "10", "agent.save_interval=100"], workdir, extra_env=env
    )
    assert process.returncode == 1, process.stdout[-2000:] + process.stderr[-3000:]
    # the third rollout (env steps 33-48) holds the first NaN reward
    assert "('next', 'reward')" in process.stderr and "iteration 3" in process.stderr, process.stderr[-3000:]
    (run_dir,) = run_dirs(workdir, "cartpole_direct")
    assert sorted(name for name in os.listdir(run_dir) if name.endswith(".pt")) == ["model_2.pt"]
    state = torch.load(os.path.join(run_dir, "model_2.pt"), weights_only=True)
    assert state["iteration"] == 2
    assert all(bool(torch.isfinite(value).all()) for value in state["actor"].values() if value.is_floating_point())


def test_a_task_that_drops_isaac_labs_final_observations_stops_training(workdir):
    args = ["--task", "extras_cartpole:Isaac-Cartpole-Extras-Test", "--num_envs", "16", *CPU_ARGS]
    process = run_script("train.py", [*args, "--max_iterations", "5"], workdir, extra_env=tasks_env())
    assert process.returncode == 1, process.stdout[-2000:] + process.stderr[-3000:]
    assert "Episodes ended without Isaac Lab's extras['final_obs']" in process.stderr, process.stderr[-3000:]
