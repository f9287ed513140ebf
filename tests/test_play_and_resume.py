"""play.py finds, plays and exports a trained run; train.py --resume continues it; bad checkpoints fail cleanly."""

import os
import shutil

import numpy as np
import onnxruntime
import pytest
import torch

from helpers import CPU_ARGS, assert_ok, run_dirs, run_script, scalars, tree_digest
from isaaclab_torchrl.models import EnvInterface
from isaaclab_torchrl.policy import load_policy

TASK = ["--task", "Isaac-Cartpole-Direct"]


@pytest.fixture(scope="module")
def trained_lstm_run(tmp_path_factory):
    """A 3-iteration LSTM run (checkpoints at 2 and 3), with the recurrent backend of the GPU's graphed update
    (fused), eager here."""
    workdir = tmp_path_factory.mktemp("lstm_run")
    process = run_script(
        "train.py",
        [
            *TASK,
            "--agent",
            "torchrl_lstm",
            "--num_envs",
            "32",
            "--max_iterations",
            "3",
            *CPU_ARGS,
            "agent.save_interval=2",
            "agent.policy.recurrent_backend=fused",
        ],
        cwd=workdir,
    )
    assert_ok(process)
    assert "recurrent backend fused" in process.stdout
    (run_dir,) = run_dirs(workdir, "cartpole_direct_lstm")
    return workdir, run_dir


def test_play_finds_latest_checkpoint_reports_returns_and_exports(trained_lstm_run):
    workdir, run_dir = trained_lstm_run
    process = run_script(
        "play.py", [*TASK, "--agent", "torchrl_lstm", "--num_envs", "4", "--num_episodes", "3", *CPU_ARGS], cwd=workdir
    )
    assert_ok(process)
    assert f"Playing checkpoint: {os.path.join(run_dir, 'model_3.pt')}" in process.stdout
    assert process.stdout.count("[torchrl] episode") >= 3 and "mean return" in process.stdout
    session = onnxruntime.InferenceSession(os.path.join(run_dir, "exported", "policy.onnx"))
    assert [i.name for i in session.get_inputs()] == ["obs", "h_in", "c_in"]
    actions, h_out, c_out = session.run(
        None,
        {
            "obs": np.zeros((1, 4), np.float32),
            "h_in": np.zeros((1, 1, 32), np.float32),
            "c_in": np.zeros((1, 1, 32), np.float32),
        },
    )
    assert actions.shape == (1, 1) and h_out.shape == (1, 1, 32)
    scripted = torch.jit.load(os.path.join(run_dir, "exported", "policy.pt"))
    scripted.reset()
    assert scripted(torch.zeros(1, 4)).shape == (1, 1)


def test_play_records_a_video_with_a_visualizer_and_says_when_there_is_none(trained_lstm_run):
    workdir, run_dir = trained_lstm_run
    args = [
        *TASK,
        "--agent",
        "torchrl_lstm",
        "--num_envs",
        "2",
        "--num_episodes",
        "1",
        "--video",
        "--video_length",
        "20",
        "--device",
        "cpu",
        "physics=newton_mjwarp",
    ]
    process = run_script("play.py", [*args, "--viz", "none"], cwd=workdir)
    assert process.returncode == 2 and "--video needs a renderer or visualizer" in process.stderr, process.stderr[
        -2000:
    ]
    process = run_script("play.py", [*args, "--viz", "newton"], cwd=workdir)
    assert_ok(process)
    videos = [name for name in os.listdir(os.path.join(run_dir, "videos", "play")) if name.endswith(".mp4")]
    assert videos, os.listdir(os.path.join(run_dir, "videos", "play"))
    from moviepy.editor import VideoFileClip

    with VideoFileClip(os.path.join(run_dir, "videos", "play", videos[0])) as clip:
        frames = sum(1 for _ in clip.iter_frames())
        size = clip.size
    assert frames >= 20 and size[0] > 0 and size[1] > 0, (frames, size)


def test_resume_continues_iterations_optimizer_and_logs(tmp_path):
    """Train 20 iterations, stop, resume for 5: counters, optimizer, learning rate and policy carry on."""
    mlp = [*TASK, "--agent", "torchrl", "--num_envs", "64", "--seed", "42", *CPU_ARGS, "agent.save_interval=10"]
    assert_ok(run_script("train.py", [*mlp, "--max_iterations", "20"], cwd=tmp_path))
    (run_dir,) = run_dirs(tmp_path, "cartpole_direct")
    before = torch.load(os.path.join(run_dir, "model_20.pt"), weights_only=True)
    process = run_script("train.py", [*mlp, "--max_iterations", "5", "--resume"], cwd=tmp_path)
    assert_ok(process)
    assert f"Resuming from {os.path.join(run_dir, 'model_20.pt')} (iteration 20," in process.stdout
    # the optimizer's own learning rate after loading is the trained one, not the config's initial 1e-3
    assert f"learning rate {before['learning_rate']:.6g})" in process.stdout, "the adaptive learning rate continues"
    assert before["learning_rate"] != 1e-3
    assert run_dirs(tmp_path, "cartpole_direct") == [run_dir], "a resumed run stays in its folder"
    assert sorted(f for f in os.listdir(run_dir) if f.endswith(".pt")) == ["model_10.pt", "model_20.pt", "model_25.pt"]
    after = torch.load(os.path.join(run_dir, "model_25.pt"), weights_only=True)
    assert after["iteration"] == 25
    # the adapted learning rate is the one the optimizer steps with (one tensor, not a copy left behind at load)
    assert [float(group["lr"]) for group in after["optimizer"]["param_groups"]] == [after["learning_rate"]]
    # Adam's step counts continue: 25 iterations of 5 epochs x 4 minibatches
    assert {int(state["step"]) for state in before["optimizer"]["state"].values()} == {20 * 5 * 4}
    assert {int(state["step"]) for state in after["optimizer"]["state"].values()} == {25 * 5 * 4}
    tags = scalars(run_dir)
    assert [step for step, _ in tags["Loss/surrogate"]] == list(range(1, 26)), "one step axis, no gap, no reset"
    # not a fresh start: the action noise goes on from where training left it, nearer to it than to a new
    # policy's (the simulators restart, so the resumed iterations are not those of an uninterrupted run)
    std = dict(tags["Policy/mean_std"])
    assert abs(std[21] - std[20]) < abs(std[21] - std[1]), std

    # from an earlier checkpoint of the run: going on in its folder would overwrite model_20.pt and hide the later
    # iterations' logs, so the run continues in a new folder and leaves that one as it is
    snapshot = tree_digest(run_dir)
    earlier = os.path.join(run_dir, "model_10.pt")
    process = run_script("train.py", [*mlp, "--max_iterations", "1", "--checkpoint", earlier], cwd=tmp_path)
    assert_ok(process)
    assert f"{earlier} is iteration 10 of a run that went on to iteration 25" in process.stdout
    assert tree_digest(run_dir) == snapshot
    (new_run,) = set(run_dirs(tmp_path, "cartpole_direct")) - {run_dir}
    assert sorted(f for f in os.listdir(new_run) if f.endswith(".pt")) == ["model_11.pt"]


@pytest.mark.parametrize("case", ["missing run", "truncated checkpoint", "other networks"])
def test_bad_checkpoints_fail_cleanly_and_change_nothing(trained_lstm_run, tmp_path, case):
    workdir, run_dir = trained_lstm_run
    copy = os.path.join(tmp_path, "logs", "torchrl", "cartpole_direct_lstm", os.path.basename(run_dir))
    shutil.copytree(run_dir, copy)
    args = [*TASK, "--agent", "torchrl_lstm", "--num_envs", "4", *CPU_ARGS]
    if case == "missing run":
        args += ["--load_run", "no-such-run"]
        expected = "No run matching 'no-such-run'"
    elif case == "truncated checkpoint":
        with open(os.path.join(copy, "model_3.pt"), "r+b") as file:
            file.truncate(100)
        expected = "Cannot read checkpoint"
    else:  # resuming the LSTM run with the MLP agent
        args = [
            *TASK,
            "--agent",
            "torchrl",
            "--num_envs",
            "4",
            *CPU_ARGS,
            "--checkpoint",
            os.path.join(copy, "model_2.pt"),
        ]
        expected = "does not fit"
    snapshot = tree_digest(copy)
    scripts = [("play.py", []), ("train.py", ["--resume", "--max_iterations", "1"])]
    for script, extra in scripts[1:] if case == "other networks" else scripts:
        process = run_script(script, [*args, *extra], cwd=tmp_path, timeout=600)
        assert process.returncode == 2, f"{script}: {process.stderr[-3000:]}"
        assert expected in process.stderr, f"{script}: {process.stderr[-3000:]}"
        assert tree_digest(copy) == snapshot
        assert sorted(os.listdir(os.path.join(tmp_path, "logs", "torchrl"))) == ["cartpole_direct_lstm"]
        assert sorted(os.listdir(os.path.dirname(copy))) == [os.path.basename(copy)]


def test_load_policy_rebuilds_the_trained_actor(trained_lstm_run):
    """A user's script: ``load_policy`` rebuilds the trained actor from the checkpoint alone."""
    _, run_dir = trained_lstm_run
    path = os.path.join(run_dir, "model_3.pt")
    policy = load_policy(path)
    assert (policy.interface.actor_obs_dim, policy.interface.action_dim) == (4, 1)
    assert policy.cfg.rnn_type == "lstm" and policy.cfg.rnn_hidden_size == 32
    saved = torch.load(path, weights_only=True)["actor"]
    assert policy.actor.state_dict().keys() == saved.keys()
    for key, value in policy.actor.state_dict().items():
        assert torch.equal(value, saved[key]), key
    with pytest.raises(ValueError, match="trained on other sizes"):
        load_policy(path, interface=EnvInterface(("policy",), 5, ("policy",), 5, 1))
