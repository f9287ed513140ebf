"""Helpers for tests that run the real scripts (Isaac Lab kitless on Newton, CPU) in subprocesses."""

from __future__ import annotations

import glob
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OFFLINE_ASSET_ROOT = os.path.join(REPO, "source", "isaaclab_torchrl", "offline_assets")
CPU_ARGS = ["--device", "cpu", "--viz", "none", "physics=newton_mjwarp"]


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
