"""Bad command-line input: a clear one-line error, a non-zero exit, and nothing written."""

import os

import pytest

from conftest import CPU_ARGS, run_script

CASES = {
    "unknown task": (["--task", "Isaac-Does-Not-Exist"], "Unknown task 'Isaac-Does-Not-Exist'"),
    "task without a torchrl config": (["--task", "Isaac-Pendulum-MARL-Direct"], "has no torchrl agent config"),
    "image task": (["--task", "Isaac-Cartpole-Camera-Direct"], "image observations are not supported yet"),
    "multi-agent task": (["--task", "Isaac-Shadow-Handover-Direct"], "is a multi-agent task"),
    "unknown recurrent backend": (
        ["--task", "Isaac-Cartpole-Direct", "agent.collector.recurrent_backend=cudnn"],
        "agent.collector.recurrent_backend must be one of",
    ),
    "unknown agent": (
        ["--task", "Isaac-Cartpole-Direct", "--agent", "torchrl_transformer"],
        "has no agent 'torchrl_transformer'",
    ),
    "num_envs not divisible": (
        ["--task", "Isaac-Cartpole-Direct", "--num_envs", "10", "--num_collectors", "3"],
        "num_envs (10) must be a positive multiple of num_collectors (3)",
    ),
    "invalid hydra override": (
        ["--task", "Isaac-Cartpole-Direct", "agent.algorithm.no_such_field=1"],
        "Invalid configuration override",
    ),
    "non-positive learning rate": (
        ["--task", "Isaac-Cartpole-Direct", "agent.algorithm.learning_rate=0"],
        "learning_rate must be > 0",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_is_rejected_cleanly(workdir, case):
    args, message = CASES[case]
    process = run_script("train.py", [*args, "--max_iterations", "1", *CPU_ARGS], cwd=workdir, timeout=300)
    assert process.returncode == 2, process.stderr[-3000:]
    errors = [line for line in process.stderr.splitlines() if line.startswith("[torchrl] error:")]
    assert len(errors) == 1 and message in errors[0], process.stderr[-3000:]
    assert "Traceback" not in process.stderr
    assert not os.path.exists(os.path.join(workdir, "logs")), "nothing may be written"
