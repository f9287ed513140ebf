"""Data-parallel training over torch.distributed: ``torchrun --standalone --nproc_per_node 2`` with gloo on
loopback, kitless Cartpole on the CPU, real collector workers per rank."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys

import psutil

from helpers import CPU_ARGS, REPO, Training, assert_ok, run_dirs, run_script, script_env

TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
TRAIN = [os.path.join(REPO, "scripts", "train.py"), "--distributed", "--task", "Isaac-Cartpole-Direct"]
TRAIN += ["--num_envs", "8", *CPU_ARGS]
CHECKSUM = re.compile(r"\[torchrl\] rank (\d) of 2: parameter checksum ([-+.0-9e]+)")
FIRST_BATCH = re.compile(r"\[torchrl\] rank (\d) of 2: first batch reward sum (\S+)")


def test_two_ranks_keep_identical_parameters_and_only_rank_0_writes(workdir):
    process = subprocess.run(
        [*TORCHRUN, *TRAIN, "--max_iterations", "3"],
        cwd=workdir,
        env=script_env(),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert_ok(process)
    checksums = dict(CHECKSUM.findall(process.stdout))
    assert sorted(checksums) == ["0", "1"], process.stdout[-3000:]
    # the ranks learned from different data (their own simulations and seeds), so equal parameters prove averaging
    reward_sums = dict(FIRST_BATCH.findall(process.stdout))
    assert sorted(reward_sums) == ["0", "1"] and reward_sums["0"] != reward_sums["1"], reward_sums
    assert checksums["0"] == checksums["1"], checksums
    (run_dir,) = run_dirs(workdir, "cartpole_direct")  # one run folder: rank 0's
    assert os.path.isfile(os.path.join(run_dir, "model_3.pt"))
    events = [name for name in os.listdir(run_dir) if name.startswith("events.out.tfevents")]
    assert len(events) == 1, events
    played = run_script("play.py", ["--task", "Isaac-Cartpole-Direct", *CPU_ARGS, "--max_steps", "5"], cwd=workdir)
    assert_ok(played)


def test_a_killed_rank_stops_the_other_without_orphans(workdir):
    training = Training(workdir, [*TRAIN, "--max_iterations", "1000"], launcher=TORCHRUN)
    training.wait_for_iteration(2)
    ranks = {
        int(child.environ()["RANK"]): child
        for child in psutil.Process(training.process.pid).children()
        if "train.py" in " ".join(child.cmdline())
    }
    assert sorted(ranks) == [0, 1], ranks
    ranks[1].send_signal(signal.SIGKILL)
    returncode, _ = training.wait(timeout=180)
    assert returncode != 0, training.output[-3000:]
    # the surviving rank's own message (torchrun's ChildFailedError alone would not show that it stopped cleanly)
    assert "[torchrl] error: rank 0 stopped" in training.output, training.output[-3000:]
    training.assert_no_process_left(grace=30)
