"""On a GPU: the workers' graphed inference records what the policy acted on. From the collecting policy's weights,
the learner recomputes the log-probabilities and action means of every step of Cartpole's cuda rollouts, the first
rollout's first step (the graph's capture) included."""

import os
import subprocess
import sys

import pytest
import torch

from helpers import REPO, script_env

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")


def test_graphed_cuda_rollouts_hold_what_the_policy_acted_on(tmp_path):
    out = tmp_path / "graphed.pt"
    command = [sys.executable, os.path.join(REPO, "tests", "collect_rollouts.py"), str(out), "--graphed"]
    process = subprocess.run(
        [*command, "--device=cuda:0"], cwd=tmp_path, env=script_env(), capture_output=True, text=True, timeout=600
    )
    assert process.returncode == 0, process.stderr[-6000:]
    rollouts = torch.load(out, weights_only=False)
    for agent, collected in rollouts.items():
        for index, pair in enumerate(collected["relogged"]):
            for key in ("", "_loc"):
                torch.testing.assert_close(
                    pair[f"recomputed{key}"], pair[f"collected{key}"], atol=1e-4, rtol=1e-4, msg=f"{agent} {index}"
                )
        assert collected["runs"] == "CallerSafeCudaGraph", collected["runs"]
