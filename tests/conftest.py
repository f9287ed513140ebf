"""Helpers for tests that run the real scripts (Isaac Lab kitless on Newton, CPU) in subprocesses."""

from __future__ import annotations

import glob
import os
import re
import subprocess
import sys
import threading
import time

import psutil
import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OFFLINE_ASSET_ROOT = os.path.join(REPO, "source", "isaaclab_torchrl", "offline_assets")
CPU_ARGS = ["--device", "cpu", "--viz", "none", "physics=newton_mjwarp"]
ITERATION = re.compile(r"\[torchrl\] it +(\d+)/")


def script_env(extra_env: dict | None = None) -> dict:
    env = dict(os.environ)
    env.update(extra_env or {})
    env["ISAACSIM_ASSET_ROOT"] = OFFLINE_ASSET_ROOT
    env.pop("ISAACLAB_TORCHRL_OFFLINE_ASSETS", None)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def run_script(
    script: str, args: list[str], cwd, timeout: float = 900, extra_env: dict | None = None
) -> subprocess.CompletedProcess:
    """Runs ``scripts/<script>`` with the test interpreter in ``cwd``; returns the finished process."""
    return subprocess.run(
        [sys.executable, os.path.join(REPO, "scripts", script), *args],
        cwd=cwd,
        env=script_env(extra_env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def run_dirs(cwd, experiment: str) -> list[str]:
    return sorted(glob.glob(os.path.join(str(cwd), "logs", "torchrl", experiment, "*")))


def scalars(run_dir: str) -> dict[str, list[tuple[int, float]]]:
    """TensorBoard scalars of a run folder: tag -> [(step, value), ...]."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(run_dir, size_guidance={"scalars": 0})
    accumulator.Reload()
    return {
        tag: [(event.step, event.value) for event in accumulator.Scalars(tag)] for tag in accumulator.Tags()["scalars"]
    }


def assert_ok(process: subprocess.CompletedProcess) -> None:
    assert process.returncode == 0, (
        f"exit {process.returncode}\nSTDOUT:\n{process.stdout[-4000:]}\nSTDERR:\n{process.stderr[-6000:]}"
    )


@pytest.fixture
def workdir(tmp_path):
    return tmp_path


class Training:
    """A ``scripts/train.py`` process (or ``launcher`` + ``args``) whose output is read as it comes, and whose
    descendants are tracked."""

    def __init__(self, workdir, args: list[str], extra_env: dict | None = None, launcher: list[str] | None = None):
        self.lines: list[str] = []
        command = [*launcher, *args] if launcher else [sys.executable, os.path.join(REPO, "scripts", "train.py"), *args]
        self.process = subprocess.Popen(
            command,
            cwd=workdir,
            env=script_env(extra_env),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.descendants: dict[int, psutil.Process] = {}
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.process.stdout:
            self.lines.append(line)

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def last_iteration(self) -> int:
        found = ITERATION.findall(self.output)
        return int(found[-1]) if found else 0

    def wait_for_iteration(self, iteration: int, timeout: float = 300) -> None:
        deadline = time.monotonic() + timeout
        while self.last_iteration() < iteration:
            assert self.process.poll() is None, f"training ended early:\n{self.output[-4000:]}"
            assert time.monotonic() < deadline, f"no iteration {iteration} within {timeout} s:\n{self.output[-4000:]}"
            self.track_descendants()
            time.sleep(0.2)
        self.track_descendants()

    def track_descendants(self) -> None:
        for child in psutil.Process(self.process.pid).children(recursive=True):
            self.descendants.setdefault(child.pid, child)

    def workers(self) -> list[psutil.Process]:
        """The collector worker processes (spawned Python processes other than multiprocessing's helpers)."""
        workers = []
        for child in psutil.Process(self.process.pid).children(recursive=True):
            cmdline = " ".join(child.cmdline())
            if "spawn_main" in cmdline and "resource_tracker" not in cmdline:
                workers.append(child)
        return workers

    def wait(self, timeout: float) -> tuple[int, float]:
        start = time.monotonic()
        try:
            returncode = self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            pytest.fail(f"training did not stop within {timeout} s:\n{self.output[-4000:]}")
        self._reader.join(timeout=10)
        return returncode, time.monotonic() - start

    def assert_no_process_left(self, grace: float = 10.0) -> None:
        deadline = time.monotonic() + grace
        alive = []
        while time.monotonic() < deadline:
            alive = [p for p in self.descendants.values() if _alive(p)]
            if not alive:
                return
            time.sleep(0.2)
        for process in alive:
            process.kill()
        pytest.fail(f"processes left behind: {[(p.pid, p.cmdline()) for p in alive if _alive(p)]}")


def _alive(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
