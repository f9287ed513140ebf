"""Bad command-line input: a clear one-line error, a non-zero exit, and nothing written."""

import os
import re

import pytest

import isaaclab_torchrl  # noqa: F401  (registers the tasks the agents are ported from)
from helpers import CPU_ARGS, REPO, run_script, script_env, set_fields, tasks_env
from isaaclab_torchrl.agents import ported_agent
from isaaclab_torchrl.agents.validation import ConfigError, validate_agent_cfg

DISTILLATION = ["--task", "distillation_agent:Isaac-Cartpole-Distillation-Test", "--agent", "torchrl_distillation"]
TEACHER = os.path.join(REPO, "tests", "data", "cartpole_teacher", "model_100.pt")
CASES = {
    "unknown task": (["--task", "Isaac-Does-Not-Exist"], "Unknown task 'Isaac-Does-Not-Exist'"),
    "task without a torchrl config": (["--task", "Isaac-Pendulum-MARL-Direct"], "has no torchrl agent config"),
    "unsupported task": (
        ["--task", "IsaacContrib-UR10-Particle-Push"],
        "its rsl_rl actor uses the action distribution",
    ),
    "unknown recurrent backend": (
        ["--task", "Isaac-Cartpole-Direct", "agent.policy.recurrent_backend=cudnn"],
        "agent.policy.recurrent_backend must be one of",
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
    "symmetry with a recurrent policy": (
        ["--task", "Isaac-Cartpole", "--agent", "torchrl_symmetry", "agent.policy.rnn_type=lstm"],
        "symmetry augmentation needs an MLP policy",
    ),
    "symmetry function that does not import": (
        [
            "--task",
            "Isaac-Cartpole",
            "--agent",
            "torchrl_symmetry",
            "agent.algorithm.symmetry_cfg.data_augmentation_func=nowhere:nothing",
        ],
        "data_augmentation_func 'nowhere:nothing' is not an importable",
    ),
    "own network class that does not import": (
        ["--task", "Isaac-Cartpole-Direct", "agent.policy.critic_class_name=nowhere:Nothing"],
        "agent.policy.critic_class_name 'nowhere:Nothing' is not an importable 'module:Class'",
    ),
    "more minibatches than trajectory slices": (
        [
            "--task",
            "Isaac-Cartpole-Direct",
            "--agent",
            "torchrl_lstm",
            "--num_envs",
            "8",
            "agent.algorithm.num_mini_batches=16",
        ],
        "agent.algorithm.num_mini_batches (16) must be between 1 and the 8 trajectory slices",
    ),
    "more minibatches than steps": (
        ["--task", "Isaac-Cartpole-Direct", "--num_envs", "2", "agent.algorithm.num_mini_batches=64"],
        "agent.algorithm.num_mini_batches (64) must be between 1 and the 32 steps of a batch",
    ),
    "a count that is not a whole number": (
        ["--task", "Isaac-Cartpole-Direct", "agent.save_interval=2.5"],
        "Values of the wrong type: agent.save_interval=2.5 (expected int)",
    ),
    "a word for a number": (
        ["--task", "Isaac-Cartpole-Direct", "agent.algorithm.learning_rate=abc"],
        "Values of the wrong type: agent.algorithm.learning_rate='abc' (expected float)",
    ),
    "an override outside env and agent": (
        ["--task", "Isaac-Cartpole-Direct", "algorithm.learning_rate=3e-4"],
        "(did you mean agent.algorithm.learning_rate?)",
    ),
    "an override without a value": (
        ["--task", "Isaac-Cartpole-Direct", "agent.seed"],
        "write it as agent.seed=<value>",
    ),
    "a storing device that is not a device": (
        ["--task", "Isaac-Cartpole-Direct", "agent.collector.storing_device=gpu0"],
        "agent.collector.storing_device 'gpu0' is not a device",
    ),
    "the device as an override": (
        ["--task", "Isaac-Cartpole-Direct", "agent.device=cuda:1"],
        "the simulation's device, set by --device",
    ),
    "a run pattern that is not a regular expression": (
        ["--task", "Isaac-Cartpole-Direct", "--resume", "--load_run", "["],
        "'[' (--load_run or --checkpoint) is not a regular expression",
    ),
    "device that does not exist": (
        ["--task", "Isaac-Cartpole-Direct", "--train_device", "cuda:3"],
        "--train_device 'cuda:3' does not exist",
    ),
    "CUDA graphs on a CPU learner": (
        ["--task", "Isaac-Cartpole-Direct", "agent.compile=true", "agent.cudagraphs=true"],
        "agent.cudagraphs=true needs a CUDA learner, got the device 'cpu'",
    ),
    "unknown activation": (
        ["--task", "Isaac-Cartpole-Direct", "agent.policy.activation=swish"],
        "agent.policy.activation must be one of",
    ),
    "removed option": (
        ["--task", "Isaac-Cartpole-Direct", "agent.collector.compact_obs=false"],
        "Invalid configuration override",
    ),
    "unknown observation-group set": (
        ["--task", "Isaac-Cartpole-Direct", 'agent.obs_groups={"student":["policy"]}'],
        "agent.obs_groups has entries ['student']",
    ),
    "observation groups not as a mapping": (
        ["--task", "Isaac-Cartpole-Direct", "agent.obs_groups={actor:[policy]}"],
        "agent.obs_groups must map 'actor' and 'critic' to lists of observation groups",
    ),
    "agent config that leaves required fields unset": (
        ["--task", "bare_agent:Isaac-Cartpole-Bare-Agent-Test"],
        "The agent config BareAgentCfg leaves required fields unset: agent.policy, agent.algorithm;",
    ),
    "unknown tracker": (
        ["--task", "Isaac-Cartpole-Direct", "--logger", "comet"],
        "agent.logger (--logger) 'comet' is not one of tensorboard, wandb, neptune, mlflow",
    ),
    "tracker without credentials": (
        ["--task", "Isaac-Cartpole-Direct", "--logger", "neptune"],
        "--logger neptune: set NEPTUNE_API_TOKEN (or NEPTUNE_MODE=offline)",
    ),
    "non-positive learning rate": (
        ["--task", "Isaac-Cartpole-Direct", "agent.algorithm.learning_rate=0"],
        "learning_rate must be > 0",
    ),
    "distillation without a teacher": (
        [*DISTILLATION],
        "A distillation run learns from a teacher: name its checkpoint with --checkpoint",
    ),
    "teacher of other networks than agent.teacher": (
        [*DISTILLATION, "--checkpoint", TEACHER, "agent.teacher.actor_hidden_dims=[64,64]"],
        f"The teacher of checkpoint {TEACHER} has actor_hidden_dims=[32, 32], which agent.teacher does not",
    ),
    "unknown distillation loss": (
        [*DISTILLATION, "--checkpoint", TEACHER, "agent.algorithm.loss_type=l1"],
        "agent.algorithm.loss_type must be one of ('mse', 'huber'), got 'l1'",
    ),
}


# speed options that cannot work together, checked on the configs (no process): (recurrent, overrides, message)
SPEED_OPTION_CASES = {
    "CUDA graphs without compile": (
        False,
        {"device": "cuda:0", "compile": False, "cudagraphs": True},
        "agent.cudagraphs=true needs agent.compile=true",
    ),
    "CUDA graphs with the pad recurrent backend": (
        True,
        {"device": "cuda:0", "compile": True, "cudagraphs": True, "policy.recurrent_backend": "pad"},
        "cannot replay the 'pad' recurrent backend",
    ),
    "a recurrent backend that is not offered": (
        True,
        {"device": "cpu", "policy.recurrent_backend": "scan"},
        "agent.policy.recurrent_backend must be one of ('auto', 'pad', 'fused')",
    ),
    "CUDA graphs on a CPU learner": (
        False,
        {"device": "cuda:0", "train_device": "cpu", "compile": True, "cudagraphs": True},
        "needs a CUDA learner, got the device 'cpu'",
    ),
    "unknown speed": (
        False,
        {"speed": "fast"},
        "agent.speed must be one of ('auto', 'off')",
    ),
    "CUDA-graph policy on a CPU simulation": (
        False,
        {"device": "cpu", "collector.cudagraph_policy": True},
        "agent.collector.cudagraph_policy=true needs a CUDA simulation device",
    ),
}


@pytest.mark.fast
@pytest.mark.parametrize("case", sorted(SPEED_OPTION_CASES))
def test_incompatible_speed_options_are_rejected(case):
    recurrent, overrides, message = SPEED_OPTION_CASES[case]
    agent_cfg = ported_agent("Isaac-Cartpole-Direct", recurrent)
    set_fields(agent_cfg, overrides)
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        validate_agent_cfg(agent_cfg, num_envs=64)
    # the same options in the combination that works pass the check
    agent_cfg.compile = agent_cfg.cudagraphs = False
    agent_cfg.collector.cudagraph_policy = False
    agent_cfg.policy.recurrent_backend = "auto"
    agent_cfg.speed = "auto"
    validate_agent_cfg(agent_cfg, num_envs=64)


@pytest.mark.fast
@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("algorithm.gamma", 1.5, "agent.algorithm.gamma must be between 0 and 1, got 1.5"),
        ("algorithm.lam", -0.1, "agent.algorithm.lam must be between 0 and 1, got -0.1"),
        ("algorithm.max_grad_norm", -1.0, "agent.algorithm.max_grad_norm must be > 0, got -1.0"),
        ("clip_actions", 0.0, "agent.clip_actions must be > 0 or null, got 0.0"),
    ],
)
def test_values_out_of_their_range_are_rejected(field, value, message):
    agent_cfg = ported_agent("Isaac-Cartpole-Direct", False)
    validate_agent_cfg(agent_cfg, num_envs=64)
    set_fields(agent_cfg, {field: value})
    with pytest.raises(ConfigError, match=re.escape(message)):
        validate_agent_cfg(agent_cfg, num_envs=64)


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_is_rejected_cleanly(workdir, case):
    args, message = CASES[case]
    process = run_script(
        "train.py", [*args, "--max_iterations", "1", *CPU_ARGS], cwd=workdir, timeout=300, extra_env=tasks_env()
    )
    assert process.returncode == 2, process.stderr[-3000:]
    errors = [line for line in process.stderr.splitlines() if line.startswith("[torchrl] error:")]
    assert len(errors) == 1 and message in errors[0], process.stderr[-3000:]
    assert "Traceback" not in process.stderr
    assert not os.path.exists(os.path.join(workdir, "logs")), "nothing may be written"


def test_a_new_run_is_refused_a_folder_that_holds_another_runs_checkpoints(workdir):
    """Two runs of the same timestamp and name (``--run_timestamp``): the second would overwrite the first's."""
    folder = os.path.join(workdir, "logs", "torchrl", "cartpole_direct", "2026-01-01_00-00-00")
    os.makedirs(folder)
    with open(os.path.join(folder, "model_1.pt"), "wb") as file:
        file.write(b"the first run's")
    args = ["--task", "Isaac-Cartpole-Direct", "--run_timestamp", "2026-01-01_00-00-00", "--max_iterations", "1"]
    process = run_script("train.py", [*args, *CPU_ARGS], cwd=workdir, timeout=300)
    assert process.returncode == 2, process.stderr[-3000:]
    assert f"[torchrl] error: The run folder {folder} holds another run's checkpoints" in process.stderr
    assert os.listdir(folder) == ["model_1.pt"]


def test_unwritable_log_directory_is_rejected_before_the_simulation(workdir):
    with open(os.path.join(workdir, "logs"), "w") as file:  # a file where the log folder must go
        file.write("not a folder")
    process = run_script("train.py", ["--task", "Isaac-Cartpole-Direct", *CPU_ARGS], cwd=workdir, timeout=300)
    assert process.returncode == 2, process.stderr[-3000:]
    assert "[torchrl] error: Cannot write the log directory" in process.stderr, process.stderr[-3000:]
    assert "Starting the simulation" not in process.stdout + process.stderr


def test_unreachable_asset_server_without_a_local_root_is_one_line(workdir):
    """No ISAACSIM_ASSET_ROOT, no offline switch, and Isaac Lab's asset server out of reach (the test machines have
    no network; an unroutable proxy makes sure of it elsewhere): one line naming both ways out, nothing written."""
    env = script_env({"HTTPS_PROXY": "http://127.0.0.1:9", "https_proxy": "http://127.0.0.1:9"})
    env.pop("ISAACSIM_ASSET_ROOT")
    process = run_script("train.py", ["--task", "Isaac-Cartpole-Direct", *CPU_ARGS], cwd=workdir, env=env, timeout=300)
    assert process.returncode == 2, process.stderr[-3000:]
    errors = [line for line in process.stderr.splitlines() if line.startswith("[torchrl] error:")]
    assert len(errors) == 1 and "cannot be reached" in errors[0], process.stderr[-3000:]
    assert "ISAACSIM_ASSET_ROOT" in errors[0] and "ISAACLAB_TORCHRL_OFFLINE_ASSETS=1" in errors[0], errors
    assert "Traceback" not in process.stderr
    assert not os.path.exists(os.path.join(workdir, "logs")), "nothing may be written"
