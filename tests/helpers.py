"""Helpers for tests that run the real scripts (Isaac Lab kitless on Newton, CPU) in subprocesses."""

from __future__ import annotations

import atexit
import functools
import glob
import hashlib
import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time

import psutil
import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OFFLINE_ASSET_ROOT = os.path.join(REPO, "source", "isaaclab_torchrl", "offline_assets")
SIMULATION_CPU_ARGS = ["--device", "cpu", "--viz", "none", "physics=newton_mjwarp"]
"""A kitless simulation on the CPU, for any of Isaac Lab's trainers."""
# and for this runner synchronous collection: a fixed seed repeats a run exactly (the default, asynchronous,
# depends on timing); a test of asynchronous training says so
CPU_ARGS = [*SIMULATION_CPU_ARGS, "agent.collector.sync=true"]
ITERATION = re.compile(r"\[torchrl\] it +(\d+)/")
WORKERS = re.compile(r"\[torchrl\] collector workers: (.*)")


def set_fields(cfg, values: dict) -> None:
    """Sets config fields by dotted path (``{"collector.sync": True}``), as Hydra overrides name them."""
    for path, value in values.items():
        *parents, name = path.split(".")
        target = cfg
        for parent in parents:
            target = getattr(target, parent)
        setattr(target, name, value)


def tasks_env() -> dict:
    """``PYTHONPATH`` for a script that loads the task modules made for the tests (``tests/tasks``), the caller's
    own ``PYTHONPATH`` after them."""
    paths = [os.path.join(REPO, "tests", "tasks"), os.environ.get("PYTHONPATH")]
    return {"PYTHONPATH": os.pathsep.join(path for path in paths if path)}


def worker_pids(output: str) -> dict[int, int]:
    """Collector index -> pid, from the line the runner prints when its workers start."""
    (line,) = WORKERS.findall(output)
    return {int(index): int(pid) for index, pid in re.findall(r"(\d+) \(pid (\d+)\)", line)}


def script_env(extra_env: dict | None = None, offline_switch: bool = False) -> dict:
    """The environment of a script: the vendored assets as ``ISAACSIM_ASSET_ROOT``, or with ``offline_switch`` through
    ``ISAACLAB_TORCHRL_OFFLINE_ASSETS=1`` alone (the documented switch); this project's caches in the test run's own
    cache folder (:func:`shared_cache_home`), never the user's."""
    env = dict(os.environ)
    env.update(cache_home_env(shared_cache_home()))
    env.update(extra_env or {})
    env.pop("ISAACLAB_TORCHRL_OFFLINE_ASSETS", None)
    env.pop("ISAACSIM_ASSET_ROOT", None)
    if offline_switch:
        env["ISAACLAB_TORCHRL_OFFLINE_ASSETS"] = "1"
    else:
        env["ISAACSIM_ASSET_ROOT"] = OFFLINE_ASSET_ROOT
    env["PYTHONUNBUFFERED"] = "1"
    return env


@functools.cache
def shared_cache_home() -> str:
    """A user cache folder (``XDG_CACHE_HOME``) shared by the tests of one run and removed at its end."""
    folder = tempfile.mkdtemp(prefix="isaaclab_torchrl_tests_cache_")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


def cache_home_env(cache_home: str) -> dict:
    """``XDG_CACHE_HOME`` for this project's caches, and Warp's kernels where they are without it, so that a test
    does not recompile them."""
    usual = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    warp_cache = os.path.join(usual, "warp", importlib.metadata.version("warp-lang"))
    return {"XDG_CACHE_HOME": cache_home, "WARP_CACHE_PATH": os.environ.get("WARP_CACHE_PATH", warp_cache)}


def script_env_with_cache_home(cache_home: str) -> dict:
    """:func:`script_env` with a user cache folder of its own."""
    return script_env(cache_home_env(cache_home))


def run_script(
    script: str,
    args: list[str],
    cwd,
    timeout: float = 900,
    extra_env: dict | None = None,
    offline_switch: bool = False,
    env: dict | None = None,
) -> subprocess.CompletedProcess:
    """Runs ``scripts/<script>`` with the test interpreter in ``cwd``; returns the finished process."""
    return subprocess.run(
        [sys.executable, os.path.join(REPO, "scripts", script), *args],
        cwd=cwd,
        env=env or script_env(extra_env, offline_switch),
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


def tree_digest(folder: str) -> dict[str, str]:
    """Relative path -> SHA-256 of every file below ``folder``."""
    digests = {}
    for root, _, files in os.walk(folder):
        for name in files:
            path = os.path.join(root, name)
            with open(path, "rb") as file:
                digests[os.path.relpath(path, folder)] = hashlib.sha256(file.read()).hexdigest()
    return digests


class Training:
    """A ``scripts/train.py`` process (or ``launcher`` + ``args``) whose output is read as it comes, and whose
    descendants are tracked."""

    def __init__(self, workdir, args: list[str], extra_env: dict | None = None, launcher: list[str] | None = None):
        self.lines: list[str] = []
        self.line_times: list[float] = []
        """``time.monotonic()`` at which each line was read."""
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
            self.line_times.append(time.monotonic())
            self.lines.append(line)

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def time_of(self, text: str) -> float | None:
        """When the first line containing ``text`` was read (``time.monotonic()``), or ``None``."""
        for line, when in zip(list(self.lines), list(self.line_times), strict=False):
            if text in line:
                return when
        return None

    def wait_for_line(self, text: str, timeout: float = 300) -> None:
        deadline = time.monotonic() + timeout
        while self.time_of(text) is None:
            assert self.process.poll() is None, f"training ended early:\n{self.output[-4000:]}"
            assert time.monotonic() < deadline, f"no {text!r} within {timeout} s:\n{self.output[-4000:]}"
            time.sleep(0.1)

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
        """The collector worker processes: spawned Python processes other than multiprocessing's helpers, or
        forked by the fork server (whose own process is the training process's child)."""
        workers = []
        for child in psutil.Process(self.process.pid).children(recursive=True):
            cmdline = " ".join(child.cmdline())
            spawned = "spawn_main" in cmdline and "resource_tracker" not in cmdline
            if spawned or ("multiprocessing.forkserver" in cmdline and child.ppid() != self.process.pid):
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
