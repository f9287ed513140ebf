"""Fixtures of the tests; the helpers they share are in ``helpers.py``."""

from __future__ import annotations

import pytest

from helpers import CPU_ARGS, assert_ok, run_dirs, run_script


@pytest.fixture
def workdir(tmp_path):
    return tmp_path


@pytest.fixture(scope="session")
def short_mlp_run(tmp_path_factory):
    """A 2-iteration Cartpole-Direct MLP run (16 envs) made with the offline switch alone, shared by the tests that
    only need a finished run: ``(workdir, run_dir, process)``."""
    workdir = tmp_path_factory.mktemp("short_mlp_run")
    args = ["--task", "Isaac-Cartpole-Direct", "--num_envs", "16", "--max_iterations", "2", *CPU_ARGS]
    process = run_script("train.py", args, cwd=workdir, offline_switch=True)
    assert_ok(process)
    (run_dir,) = run_dirs(workdir, "cartpole_direct")
    return workdir, run_dir, process
