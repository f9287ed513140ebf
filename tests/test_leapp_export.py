"""scripts/export.py exports a trained policy with LEAPP for manager-based Isaac-Cartpole: LEAPP's replay validates
it, the pipeline names the task's state inputs and action outputs, its recurrent state is the actor's across a
reset, and ``isaaclab leapp deploy`` runs it. Without LEAPP, the command says so in one line."""

import importlib.util
import os
import signal
import subprocess
import sys
import time

import pytest
import torch
import yaml
from tensordict import TensorDict
from torchrl.envs.utils import ExplorationType, set_exploration_type

from helpers import CPU_ARGS, REPO, SIMULATION_CPU_ARGS, assert_ok, run_dirs, run_script, script_env
from isaaclab_torchrl.policy import load_policy

TASK = "Isaac-Cartpole"
AGENTS = {"mlp": ("torchrl", "cartpole"), "lstm": ("torchrl_lstm", "cartpole_lstm")}
EFFORT_SCALE = 100.0  # Isaac-Cartpole's joint_effort action term: effort = 100 x action


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """A 2-iteration run of each agent (observation normalisation on), exported: ``{kind: (run_dir, process)}``."""
    workdir = tmp_path_factory.mktemp("leapp_export")
    runs = {}
    for kind, (agent, experiment) in AGENTS.items():
        train = ["--task", TASK, "--agent", agent, "--num_envs", "16", "--max_iterations", "2", *CPU_ARGS]
        assert_ok(run_script("train.py", [*train, "agent.policy.actor_obs_normalization=true"], cwd=workdir))
        (run_dir,) = run_dirs(workdir, experiment)
        process = run_script("export.py", ["--task", TASK, "--agent", agent, *SIMULATION_CPU_ARGS], cwd=workdir)
        runs[kind] = run_dir, process
    return runs


def pipeline_path(run_dir: str) -> str:
    return os.path.join(run_dir, TASK, f"{TASK}.yaml")


@pytest.mark.parametrize("kind", list(AGENTS))
def test_export_passes_leapp_validation_and_names_the_terms(exported, kind):
    run_dir, process = exported[kind]
    assert_ok(process)
    assert f"Exported LEAPP pipeline: {pipeline_path(run_dir)}" in process.stdout
    assert "LEAPP's replay of the recorded steps validated it" in process.stdout
    with open(os.path.join(run_dir, TASK, "log.txt")) as file:
        log = file.read()
    assert f"[PASS] {TASK} passed validation (5 examples)" in log and "Passed: 1/1" in log
    with open(pipeline_path(run_dir)) as file:
        description = yaml.safe_load(file)
    pipeline, node = description["pipeline"], description["models"][TASK]
    # the observation terms joint_pos_rel and joint_vel_rel read the robot's joint state; the action term
    # joint_effort writes the cart's effort target
    assert pipeline["inputs"] == {TASK: ["robot_joint_pos", "robot_joint_vel"]}
    connections = {tensor["name"]: tensor.get("isaaclab_connection") for tensor in node["inputs"] + node["outputs"]}
    assert connections["robot_joint_pos"] == "state:robot:joint_pos"
    assert connections["robot_joint_vel"] == "state:robot:joint_vel"
    assert pipeline["outputs"][TASK][0] == "joint_effort"
    assert connections["joint_effort"] == "write:robot:set_joint_effort_target_index"
    if kind == "lstm":
        assert pipeline["feedback_flow"] == {
            f"{TASK}/actor_state_0_out": [f"{TASK}/actor_state_0_in"],
            f"{TASK}/actor_state_1_out": [f"{TASK}/actor_state_1_in"],
        }
        assert os.path.isfile(os.path.join(run_dir, TASK, pipeline["initial_values"]))
    else:
        assert pipeline["feedback_flow"] == {}


def test_a_task_without_leapp_annotations_is_refused_in_one_line(short_mlp_run):
    """Isaac-Cartpole-Direct annotates none of its tensors: LEAPP traces no model, which is said, not validated."""
    workdir, _, _ = short_mlp_run
    process = run_script("export.py", ["--task", "Isaac-Cartpole-Direct", *SIMULATION_CPU_ARGS], cwd=workdir)
    assert process.returncode == 2, process.stderr[-4000:]
    errors = [line for line in process.stderr.splitlines() if line.startswith("[torchrl] error")]
    assert errors == [
        "[torchrl] error: LEAPP traced no model: task 'Isaac-Cartpole-Direct' annotates none of its tensors for LEAPP "
        "(Isaac Lab annotates manager-based tasks; a Direct task annotates its own)."
    ]
    assert "validated" not in process.stdout


def test_exported_recurrent_state_is_the_actors_across_a_reset(exported):
    """The pipeline, run by LEAPP's InferenceManager (what ``isaaclab leapp deploy`` runs it with), against the
    checkpoint's actor stepped as the collectors step it, on the same joint states; both reset at step 3."""
    from leapp import InferenceManager

    run_dir, process = exported["lstm"]
    assert_ok(process)
    inference = InferenceManager(pipeline_path(run_dir))
    actor = load_policy(os.path.join(run_dir, "model_2.pt")).actor
    torch.manual_seed(0)
    steps, reset_at = 6, 3
    joint_pos, joint_vel = 0.3 * torch.randn(steps, 1, 2), torch.randn(steps, 1, 2)
    td = TensorDict({"actor_rnn_h": torch.zeros(1, 1, 32), "actor_rnn_c": torch.zeros(1, 1, 32)}, [1])
    inference.reset()
    for step in range(steps):
        if step == reset_at:
            inference.reset()
            td = TensorDict({key: torch.zeros_like(value) for key, value in td.items()}, [1])
        outputs = inference.run_policy(
            {f"{TASK}/robot_joint_pos": joint_pos[step], f"{TASK}/robot_joint_vel": joint_vel[step]}
        )
        # Cartpole's default joint positions and velocities are zero: its observations are the joint state
        td["policy"] = torch.cat([joint_pos[step], joint_vel[step]], dim=-1)
        td["is_init"] = torch.tensor([[step in (0, reset_at)]])
        with torch.no_grad(), set_exploration_type(ExplorationType.DETERMINISTIC):
            out = actor(td)
        state = inference.value_dict[TASK]
        torch.testing.assert_close(state["actor_state_0_in"], out["next", "actor_rnn_h"], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(state["actor_state_1_in"], out["next", "actor_rnn_c"], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(outputs[f"{TASK}/joint_effort"], EFFORT_SCALE * out["action"], atol=1e-4, rtol=1e-5)
        td = TensorDict({key: out["next", key] for key in ("actor_rnn_h", "actor_rnn_c")}, [1])


def test_isaaclab_leapp_deploy_runs_the_exported_pipeline(exported):
    """``isaaclab leapp deploy`` steps the pipeline without an error until Ctrl+C stops it (it has no step limit).

    A test run started in the background by a non-interactive shell (``.ci/run &``, ``nohup``) inherits SIGINT as
    ignored, and a Python process that starts with SIGINT ignored never raises ``KeyboardInterrupt``: the deploy is
    started with the default disposition, as from a terminal."""
    run_dir, process = exported["lstm"]
    assert_ok(process)
    command = [
        sys.executable,
        "-m",
        "isaaclab",
        "leapp",
        "deploy",
        "--task",
        TASK,
        "--pipeline",
        pipeline_path(run_dir),
    ]
    deploy = subprocess.Popen(
        [*command, *SIMULATION_CPU_ARGS],
        env=script_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    lines, stopped = [], False
    try:
        for line in deploy.stdout:
            lines.append(line)
            if "[INFO]: Num envs: 1" in line:
                break
        time.sleep(5)  # stepping
        running = deploy.poll() is None
        deploy.send_signal(signal.SIGINT)
        try:
            remaining, _ = deploy.communicate(timeout=60)
            stopped = True
        except subprocess.TimeoutExpired:
            deploy.kill()
            remaining, _ = deploy.communicate()
    finally:
        if deploy.poll() is None:
            deploy.kill()
    output = "".join(lines) + remaining
    assert running, output[-4000:]
    assert f"Deploying task '{TASK}' with LEAPP pipeline" in output
    assert "Traceback" not in output, output[-4000:]
    assert stopped, "the deploy did not stop within 60 s of Ctrl+C:\n" + output[-4000:]


def test_without_leapp_the_export_says_so_in_one_line(exported, tmp_path):
    """The interpreter's site-packages without LEAPP: every other entry linked into a folder of its own, which is the
    subprocess's only site folder. The checkpoint is a real one, so that nothing else stops the export."""
    checkpoint = os.path.join(exported["mlp"][0], "model_2.pt")
    site_packages = os.path.dirname(os.path.dirname(importlib.util.find_spec("leapp").origin))
    shadow = tmp_path / "site-packages"
    shadow.mkdir()
    for name in os.listdir(site_packages):
        if name != "leapp" and not name.startswith("leapp-"):
            os.symlink(os.path.join(site_packages, name), shadow / name)
    launcher = (
        "import runpy, site, sys; site.addsitedir(sys.argv[1]); sys.argv = sys.argv[2:]; "
        "runpy.run_path(sys.argv[0], run_name='__main__')"
    )
    process = subprocess.run(
        [sys.executable, "-S", "-c", launcher, str(shadow), os.path.join(REPO, "scripts", "export.py")]
        + ["--task", TASK, "--checkpoint", checkpoint]
        + SIMULATION_CPU_ARGS,
        cwd=tmp_path,
        env=script_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert process.returncode == 2, process.stderr[-4000:]
    errors = [line for line in process.stderr.splitlines() if "error" in line.lower()]
    assert errors == [
        "[torchrl] error: LEAPP is not installed: pip install -e '.[leapp]' (or pip install leapp==0.7.2)."
    ], process.stderr[-4000:]
