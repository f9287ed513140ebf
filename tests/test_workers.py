"""The process the collector workers are forked from: the training script starts it before it imports the package,
and a worker forked from it starts with the server's imports done, with no device state, and with Isaac Lab's asset
paths built from the offline root when the documented switch asks for it."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from helpers import OFFLINE_ASSET_ROOT, REPO, script_env


def with_training_script(code: str) -> str:
    """The last line ``code`` prints in a fresh interpreter where ``script`` is the training script, run as a module
    (its functions defined, ``main`` not called)."""
    code = "import runpy, sys; script = runpy.run_path(sys.argv[1], run_name='imported');" + code
    result = subprocess.run(
        [sys.executable, "-c", code, os.path.join(REPO, "scripts", "train.py")],
        env=script_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout.strip().splitlines()[-1]


def test_the_training_script_imports_nothing_of_the_package_before_it_starts_the_worker_server():
    # what the script imports at its top, before main() starts the server: the standard library alone, so the server
    # starts at once and imports torch, Isaac Lab and the rest while the script imports them too
    modules = "('torch', 'isaaclab', 'isaaclab_torchrl', 'tensordict')"
    assert with_training_script(f"print(sorted(m for m in {modules} if m in sys.modules))") == "[]"


@pytest.mark.parametrize("offline_switch", [False, True], ids=["asset_root", "offline_switch"])
def test_a_worker_starts_with_the_servers_imports_and_without_warp_or_cuda(offline_switch):
    result = subprocess.run(
        [sys.executable, os.path.join(REPO, "tests", "worker_start.py")],
        env=script_env(offline_switch=offline_switch),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    state = json.loads(result.stdout.strip().splitlines()[-1])
    # the server's preload ran without the garbage collector and froze what it built (the worker's collections skip
    # it: a million objects); the worker collects its own garbage
    assert state.pop("enabled") is True
    assert state.pop("frozen") > 500_000
    # with the switch alone, the server's import of the package set the root before it imported Isaac Lab
    assert state == {"missing": [], "warp": False, "cuda": False, "asset_root": OFFLINE_ASSET_ROOT}


def test_the_training_script_imports_the_learner_with_its_objects_frozen_and_the_collector_on():
    # the package and the learner import without the garbage collector (each full pass traverses every imported
    # module's objects) and are frozen after; the collector runs again for the training
    code = "import gc; name = script['import_training']().__name__; print(name, gc.isenabled(), gc.get_freeze_count())"
    name, enabled, frozen = with_training_script(code).split()
    assert (name, enabled) == ("isaaclab_torchrl.training", "True")
    assert int(frozen) > 500_000
