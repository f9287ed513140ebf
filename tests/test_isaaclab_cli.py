"""Isaac Lab 3.0's unified train/play command line, compared by behaviour with Isaac Lab's own rsl_rl parsers
(``train_rsl_rl._parse_args``, ``play_rsl_rl._parse_args``): every argument they have, set to a value other than its
default, parses here to the same value and changes nothing else; the defaults are Isaac Lab's and the values the
same, but where listed with the reason. ``--external_callback`` registers a task that then trains (a real run); what
cannot apply is one line and exit 2."""

import contextlib
import io
import os
import re
import shutil
import sys

import pytest
from isaaclab_rl.entrypoints.backends import play_rsl_rl, train_rsl_rl

from helpers import CPU_ARGS, assert_ok, run_dirs, run_script, tasks_env
from isaaclab_torchrl.cli import make_play_parser, make_train_parser, parse_args

TASKS = tasks_env()
PARSERS = {"train": (train_rsl_rl._parse_args, make_train_parser), "play": (play_rsl_rl._parse_args, make_play_parser)}
HYDRA = ["physics=newton_mjwarp", "agent.seed=3"]  # left for Hydra, by both
HELP = ("-h", "--help")
# every option string of Isaac Lab's rsl_rl train and play command lines (in both, then in one only), with the
# tokens after it that give it a value other than its default
COMMON = {
    "--video": [],
    "--video_length": ["20"],
    "--video_interval": ["100"],
    "--num_envs": ["8"],
    "--task": ["Isaac-Cartpole-Direct"],
    "--frontend": ["warp"],
    "--agent": ["x"],
    "--seed": ["7"],
    "--external_callback": ["gc.enable"],  # a harmless callable; it returns None: no argument consumed
    "--experiment_name": ["e"],
    "--run_name": ["r"],
    "--checkpoint": ["model_3.pt"],
    "--logger": ["wandb"],
    "--log_project_name": ["p"],
    "--livestream": ["1"],
    "--xr": [],
    "--device": ["cpu"],
    "--visualizer": ["newton"],
    "--viz": ["kit,rerun"],
    "--verbose": [],
    "--info": [],
    "--experience": ["my.kit"],
    "--deterministic": [],
    "--kit_args=--ext-folder=/tmp/ext": [],  # a value that starts with a dash: only the "=" form reaches the option
    "--anim_recording_enabled": [],
    "--anim_recording_start_time": ["1.5"],
    "--anim_recording_stop_time": ["20"],
    "--max_visible_envs": ["4"],
}
TRAIN_ONLY = {
    "--distributed": [],
    "--run_timestamp": ["2026-01-01_00-00-00"],
    "--max_iterations": ["3"],
    "--export_io_descriptors": [],
    "--ray-proc-id": ["4"],
    "-rid": ["5"],
    "--capture_env_sensors": ["2"],
    "--capture_env_sensors_length": ["100"],
    "--capture_env_sensors_interval": ["50"],
    "--capture_env_sensors_format": ["file"],
    "--resume_optimizer_state": [],  # after --no-resume_optimizer_state (see SETUP): its default is True
    "--no-resume_optimizer_state": [],
}
PLAY_ONLY = {"--disable_fabric": [], "--real-time": [], "--train_env_cfg": []}
ARGUMENTS = {"train": {**COMMON, **TRAIN_ONLY}, "play": {**COMMON, **PLAY_ONLY}}
SETUP = {"--resume_optimizer_state": ["--no-resume_optimizer_state"]}
"""Tokens before an option, where its default cannot be changed by the option alone."""
SET_AFTER_PARSING = {"enable_cameras"}
"""Set by Isaac Lab's entry point after parsing (``enable_cameras_for_video``: cameras for --video and sensor
capture), not an argument."""
OWN_DEFAULTS = {
    # the torchrl agent config is an entry point of its own ("torchrl" names it), not rsl_rl's
    "agent": "torchrl",
    # resolved later: the GPU when there is one, else the CPU (Isaac Lab's "cuda:0" fails on a machine without one)
    "device": None,
}
OWN_PLAY_DEFAULTS = {
    # Isaac Lab's None means the newest checkpoint of the newest run, which "latest" names here
    "checkpoint": "latest",
}
ACCEPTED_HERE_ONLY = {
    # Isaac Lab's rsl_rl parser allows wandb, tensorboard and neptune; this runner also logs to MLflow
    # (runners/trackers.py)
    "--logger": "mlflow",
}
"""Values that Isaac Lab's parser refuses and this one accepts on purpose."""


def _option(token: str) -> str:
    return token.split("=", 1)[0]


def _parse(script: str, ours: bool, argv: list[str]) -> tuple[dict, list[str]]:
    """Isaac Lab's or our parse of ``argv``: the namespace and the arguments left for Hydra."""
    theirs, make_parser = PARSERS[script]
    if ours:
        args, hydra_args = parse_args(make_parser(), argv)
        return vars(args), hydra_args
    saved = list(sys.argv)
    try:
        args = vars(theirs(argv))
        return args, sys.argv[1:]  # Isaac Lab's parser hands the overrides to Hydra through sys.argv
    finally:
        sys.argv = saved


def _isaaclab_options(script: str) -> set[str]:
    """The option strings of Isaac Lab's parser, read from the help it prints."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as exit_info:
        _parse(script, ours=False, argv=["--help"])
    assert exit_info.value.code == 0
    options = set()
    for line in out.getvalue().splitlines():
        if re.match(r"  -", line):  # "  --name VALUE, -n VALUE   help": each option's first line
            options.update(part.split()[0] for part in re.split(r"\s{2,}", line.strip())[0].split(", "))
    return options


@pytest.mark.fast
@pytest.mark.parametrize("script", ["train", "play"])
def test_every_isaaclab_argument_is_compared(script):
    """The table of non-default values holds every option of Isaac Lab's parser, and no other."""
    assert _isaaclab_options(script) == {*HELP, *map(_option, ARGUMENTS[script])}


@pytest.mark.fast
@pytest.mark.parametrize(
    ("script", "option"), [(script, option) for script in ("train", "play") for option in (*HELP, *ARGUMENTS[script])]
)
def test_each_isaaclab_argument_parses_to_the_same_value(script, option):
    """Set alone to a value other than its default, an Isaac Lab argument changes here the same entries of the
    namespace to the same values as there, and leaves the same Hydra overrides."""
    if option in HELP:
        for ours in (False, True):
            with contextlib.redirect_stdout(io.StringIO()), pytest.raises(SystemExit) as exit_info:
                _parse(script, ours, [option, *HYDRA])
            assert exit_info.value.code == 0
        return
    setup = SETUP.get(option, [])
    argv = [*setup, option, *ARGUMENTS[script][option], *HYDRA]
    changed = {}
    for ours in (False, True):
        before, _ = _parse(script, ours, [*setup, *HYDRA])
        after, hydra_args = _parse(script, ours, argv)
        assert hydra_args == HYDRA, (ours, hydra_args)
        changed[ours] = {
            name: value
            for name, value in after.items()
            if name not in SET_AFTER_PARSING and (name not in before or before[name] != value)
        }
    assert changed[False], f"{argv} sets {option} to its default in Isaac Lab's parser"
    assert changed[True] == changed[False]


@pytest.mark.fast
@pytest.mark.parametrize("script", ["train", "play"])
@pytest.mark.parametrize(("option", "value"), ACCEPTED_HERE_ONLY.items())
def test_listed_values_that_isaaclab_refuses_are_accepted_here(script, option, value):
    """The listed differences on purpose (ACCEPTED_HERE_ONLY) are real: Isaac Lab exits 2, this parser keeps it."""
    with contextlib.redirect_stderr(io.StringIO()), pytest.raises(SystemExit) as exit_info:
        _parse(script, ours=False, argv=[option, value])
    assert exit_info.value.code == 2
    ours, _ = _parse(script, ours=True, argv=[option, value])
    assert ours[option.lstrip("-")] == value


@pytest.mark.fast
@pytest.mark.parametrize("script", ["train", "play"])
def test_isaaclab_defaults_are_kept_but_where_listed(script):
    """Every Isaac Lab argument left out has Isaac Lab's default here, but the listed ones (see OWN_DEFAULTS)."""
    expected, _ = _parse(script, ours=False, argv=[])
    ours, _ = _parse(script, ours=True, argv=[])
    own = {**OWN_DEFAULTS, **(OWN_PLAY_DEFAULTS if script == "play" else {})}
    for name, value in expected.items():
        if name in SET_AFTER_PARSING:
            continue
        assert name in ours, f"Isaac Lab argument not accepted: {name}"
        if name in own:
            assert value != own[name] and ours[name] == own[name], name
        else:
            assert ours[name] == value, name


def test_external_callback_registers_a_task_that_trains(workdir):
    args = ["--task", "Isaac-Cartpole-Callback-Test", "--num_envs", "16", "--max_iterations", "1", *CPU_ARGS]
    process = run_script("train.py", args, cwd=workdir, extra_env=TASKS, timeout=300)
    assert process.returncode == 2 and "Unknown task 'Isaac-Cartpole-Callback-Test'" in process.stderr
    process = run_script(
        "train.py", [*args, "--external_callback", "callback_tasks.register"], workdir, extra_env=TASKS
    )
    assert_ok(process)
    assert len(run_dirs(workdir, "cartpole_direct")) == 1
    # Isaac Lab's two lines, from which its Ray tuner finds the run folder
    (root_line,) = [line for line in process.stdout.splitlines() if line.startswith("[INFO] Logging experiment in")]
    (name_line,) = [line for line in process.stdout.splitlines() if line.startswith("Exact experiment name")]
    run_dir = os.path.join(root_line.split(": ", 1)[1], name_line.split(": ", 1)[1])
    assert run_dir == run_dirs(workdir, "cartpole_direct")[0]


def test_a_checkpoint_from_elsewhere_continues_in_a_new_run_folder(short_mlp_run, workdir):
    _, source_run, _ = short_mlp_run
    os.makedirs(os.path.join(workdir, "downloads"))
    checkpoint = os.path.join(workdir, "downloads", "model_2.pt")
    shutil.copy(os.path.join(source_run, "model_2.pt"), checkpoint)
    args = ["--task", "Isaac-Cartpole-Direct", "--num_envs", "16", "--max_iterations", "1", *CPU_ARGS]
    process = run_script("train.py", [*args, "--checkpoint", checkpoint], cwd=workdir)
    assert_ok(process)
    assert f"Resuming from {checkpoint} (iteration 2" in process.stdout
    (run_dir,) = run_dirs(workdir, "cartpole_direct")
    assert sorted(name for name in os.listdir(run_dir) if name.endswith(".pt")) == ["model_3.pt"]
    assert os.path.exists(os.path.join(run_dir, "params", "agent.yaml"))
    assert os.listdir(os.path.join(workdir, "downloads")) == ["model_2.pt"], "the source folder is left as it was"


def test_training_records_a_video_from_the_first_worker(workdir):
    args = ["--task", "Isaac-Cartpole-Direct", "--num_envs", "16", "--num_collectors", "2", "--max_iterations", "2"]
    args += ["--device", "cpu", "--viz", "newton", "physics=newton_mjwarp"]
    args += ["--video", "--video_length", "8", "--video_interval", "10"]
    assert_ok(run_script("train.py", args, cwd=workdir))
    (run_dir,) = run_dirs(workdir, "cartpole_direct")
    videos = [name for name in os.listdir(os.path.join(run_dir, "videos", "train")) if name.endswith(".mp4")]
    assert videos, os.listdir(os.path.join(run_dir, "videos", "train"))


@pytest.mark.parametrize(
    "args, message",
    [
        (["--frontend", "warp"], "--frontend warp is not supported by the torchrl runner"),
        (["--video"], "--video needs a renderer or visualizer to record from"),  # CPU_ARGS: --viz none
        (["--capture_env_sensors", "2"], "--capture_env_sensors is not supported"),
        # no W&B login in the tests: Isaac Lab's helper cannot reach the run
        (["--checkpoint", "wandb:me/project/abc123"], "Cannot fetch the W&B checkpoint 'wandb:me/project/abc123'"),
        (["--checkpoint", "pretrained"], "--checkpoint pretrained is not supported"),
        (["--external_callback", "no_such_module.register"], "No module named 'no_such_module'"),
    ],
)
def test_isaaclab_arguments_that_cannot_apply_are_one_line(workdir, args, message):
    process = run_script("train.py", ["--task", "Isaac-Cartpole-Direct", *CPU_ARGS, *args], cwd=workdir, timeout=300)
    assert process.returncode == 2, process.stderr[-3000:]
    errors = [line for line in process.stderr.splitlines() if line.startswith("[torchrl] error:")]
    assert len(errors) == 1 and message in errors[0], process.stderr[-3000:]
    assert not os.path.exists(os.path.join(workdir, "logs")), "nothing may be written"


@pytest.mark.fast
@pytest.mark.parametrize("deterministic", [False, True])
def test_deterministic_is_requested_on_the_physics_config_as_isaac_labs_trainers_do(deterministic):
    """Isaac Lab's trainers record ``--deterministic`` on the physics config (``apply_env_overrides``); each worker
    then asks Warp for it before building its env (``envs.IsaacLabEnvFactory``)."""
    from isaaclab_torchrl.training import resolve_configs

    argv = ["--task", "Isaac-Cartpole-Direct", "--device", "cpu", "physics=newton_mjwarp"]
    args, hydra_args = parse_args(make_train_parser(), argv + (["--deterministic"] if deterministic else []))
    env_cfg, _ = resolve_configs(args, hydra_args)
    assert env_cfg.sim.physics.deterministic is deterministic
