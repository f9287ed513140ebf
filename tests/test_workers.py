"""The process the collector workers are forked from: the training script starts it before it imports the learner,
and a worker forked from it starts with the server's imports done and with no device state."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from helpers import REPO, script_env


def test_the_training_script_imports_no_learner_before_it_starts_the_worker_server():
    # what the script imports at its top, before main() starts the server: the package and its two start helpers
    code = (
        "import runpy, sys; runpy.run_path(sys.argv[1], run_name='imported');"
        "print(sorted(m for m in ('torchrl', 'tensordict', 'isaaclab_torchrl.training') if m in sys.modules))"
    )
    script = os.path.join(REPO, "scripts", "train.py")
    result = subprocess.run(
        [sys.executable, "-c", code, script], env=script_env(), capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().splitlines()[-1] == "[]"


def test_a_worker_starts_with_the_servers_imports_and_without_warp_or_cuda():
    result = subprocess.run(
        [sys.executable, os.path.join(REPO, "tests", "worker_start.py")],
        env=script_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    state = json.loads(result.stdout.strip().splitlines()[-1])
    assert state == {"missing": [], "warp": False, "cuda": False}
