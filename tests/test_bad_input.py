"""Bad command-line input: a clear one-line error, a non-zero exit, and nothing written."""

import os
from types import SimpleNamespace

import pytest

from conftest import CPU_ARGS, run_script
from isaaclab_torchrl.agents.cartpole import CartpoleDirectLstmPPORunnerCfg, CartpoleDirectPPORunnerCfg
from isaaclab_torchrl.cli import UsageError, validate_train_cfg

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
    "non-positive steps per env": (
        ["--task", "Isaac-Cartpole-Direct", "agent.num_steps_per_env=0"],
        "agent.num_steps_per_env must be >= 1",
    ),
    "more minibatches than trajectory slices": (
        ["--task", "Isaac-Cartpole-Direct", "--num_envs", "8", "agent.algorithm.num_mini_batches=16"],
        "agent.algorithm.num_mini_batches (16) must be between 1 and the 8 trajectory slices",
    ),
    "device that does not exist": (
        ["--task", "Isaac-Cartpole-Direct", "--train_device", "cuda:3"],
        "--train_device 'cuda:3' does not exist",
    ),
    "CUDA graphs on a CPU learner": (
        ["--task", "Isaac-Cartpole-Direct", "agent.compile=true", "agent.cudagraphs=true"],
        "agent.cudagraphs=true needs a CUDA learner, got the device 'cpu'",
    ),
    "non-positive learning rate": (
        ["--task", "Isaac-Cartpole-Direct", "agent.algorithm.learning_rate=0"],
        "learning_rate must be > 0",
    ),
}


# speed options that cannot work together, checked on the configs (no process): (agent, overrides, message)
SPEED_OPTION_CASES = {
    "CUDA graphs without compile": (
        CartpoleDirectPPORunnerCfg,
        {"device": "cuda:0", "cudagraphs": True},
        "agent.cudagraphs=true needs agent.compile=true",
    ),
    "CUDA graphs with the pad recurrent backend": (
        CartpoleDirectLstmPPORunnerCfg,
        {"device": "cuda:0", "compile": True, "cudagraphs": True},
        "cannot replay the 'pad' recurrent backend",
    ),
    "CUDA graphs on a CPU learner": (
        CartpoleDirectPPORunnerCfg,
        {"device": "cuda:0", "train_device": "cpu", "compile": True, "cudagraphs": True},
        "needs a CUDA learner, got the device 'cpu'",
    ),
    "CUDA-graph policy on a CPU simulation": (
        CartpoleDirectPPORunnerCfg,
        {"device": "cpu", "collector.cudagraph_policy": True},
        "agent.collector.cudagraph_policy=true needs a CUDA simulation device",
    ),
}


@pytest.mark.parametrize("case", sorted(SPEED_OPTION_CASES))
def test_incompatible_speed_options_are_rejected(case):
    agent_class, overrides, message = SPEED_OPTION_CASES[case]
    agent_cfg = agent_class()
    for path, value in overrides.items():
        *parents, name = path.split(".")
        target = agent_cfg
        for parent in parents:
            target = getattr(target, parent)
        setattr(target, name, value)
    env_cfg = SimpleNamespace(scene=SimpleNamespace(num_envs=64))
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
        validate_train_cfg(env_cfg, agent_cfg)
    # the same options in the combination that works pass the check
    agent_cfg.compile = agent_cfg.cudagraphs = False
    agent_cfg.collector.cudagraph_policy = False
    validate_train_cfg(env_cfg, agent_cfg)


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_is_rejected_cleanly(workdir, case):
    args, message = CASES[case]
    process = run_script("train.py", [*args, "--max_iterations", "1", *CPU_ARGS], cwd=workdir, timeout=300)
    assert process.returncode == 2, process.stderr[-3000:]
    errors = [line for line in process.stderr.splitlines() if line.startswith("[torchrl] error:")]
    assert len(errors) == 1 and message in errors[0], process.stderr[-3000:]
    assert "Traceback" not in process.stderr
    assert not os.path.exists(os.path.join(workdir, "logs")), "nothing may be written"


def test_unwritable_log_directory_is_rejected_before_the_simulation(workdir):
    with open(os.path.join(workdir, "logs"), "w") as file:  # a file where the log folder must go
        file.write("not a folder")
    process = run_script("train.py", ["--task", "Isaac-Cartpole-Direct", *CPU_ARGS], cwd=workdir, timeout=300)
    assert process.returncode == 2, process.stderr[-3000:]
    assert "[torchrl] error: Cannot write the log directory" in process.stderr, process.stderr[-3000:]
    assert "Starting the simulation" not in process.stdout + process.stderr
