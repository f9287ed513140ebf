"""play.py finds, plays and exports a trained run; train.py --resume continues it; bad checkpoints fail cleanly."""

import os
import shutil

import numpy as np
import onnxruntime
import pytest
import torch

from conftest import CPU_ARGS, assert_ok, run_dirs, run_script, scalars

TASK = ["--task", "Isaac-Cartpole-Direct"]


@pytest.fixture(scope="module")
def trained_lstm_run(tmp_path_factory):
    """A 3-iteration LSTM run (checkpoints at 2 and 3)."""
    workdir = tmp_path_factory.mktemp("lstm_run")
    process = run_script(
        "train.py",
        [*TASK, "--agent", "torchrl_lstm", "--num_envs", "32", "--max_iterations", "3", *CPU_ARGS, "agent.save_interval=2"],
        cwd=workdir,
    )
    assert_ok(process)
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
    actions, h_out, c_out = session.run(None, {"obs": np.zeros((1, 4), np.float32),
                                               "h_in": np.zeros((1, 1, 32), np.float32),
                                               "c_in": np.zeros((1, 1, 32), np.float32)})
    assert actions.shape == (1, 1) and h_out.shape == (1, 1, 32)
    scripted = torch.jit.load(os.path.join(run_dir, "exported", "policy.pt"))
    scripted.reset()
    assert scripted(torch.zeros(1, 4)).shape == (1, 1)


def test_resume_continues_iterations_optimizer_and_logs(trained_lstm_run, tmp_path):
    workdir, run_dir = trained_lstm_run
    resumed_dir = os.path.join(tmp_path, "logs", "torchrl", "cartpole_direct_lstm", os.path.basename(run_dir))
    shutil.copytree(run_dir, resumed_dir)
    before = torch.load(os.path.join(resumed_dir, "model_3.pt"), weights_only=True)
    process = run_script(
        "train.py",
        [*TASK, "--agent", "torchrl_lstm", "--num_envs", "32", "--max_iterations", "2", "--resume", *CPU_ARGS,
         "agent.save_interval=2"],
        cwd=tmp_path,
    )
    assert_ok(process)
    assert "Resuming from" in process.stdout and "(iteration 3," in process.stdout
    assert sorted(f for f in os.listdir(resumed_dir) if f.endswith(".pt")) == ["model_2.pt", "model_3.pt", "model_4.pt", "model_5.pt"]
    after = torch.load(os.path.join(resumed_dir, "model_5.pt"), weights_only=True)
    assert after["iteration"] == 5
    # Adam's step counter continues from the checkpoint: 3 + 2 iterations of 5 epochs x 4 minibatches
    steps = [s["step"] for s in after["optimizer"]["state"].values()]
    assert all(int(step) == 5 * 5 * 4 for step in steps)
    assert int(next(iter(before["optimizer"]["state"].values()))["step"]) == 3 * 5 * 4
    tags = scalars(resumed_dir)
    assert [step for step, _ in tags["Loss/surrogate"]] == [1, 2, 3, 4, 5], "one step axis, no gap, no reset"
    assert f"learning rate {before['learning_rate']:.6g})" in process.stdout, "the adaptive learning rate continues"
    assert dict(tags["Loss/learning_rate"])[3] == pytest.approx(before["learning_rate"])


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
        args = [*TASK, "--agent", "torchrl", "--num_envs", "4", *CPU_ARGS, "--checkpoint", os.path.join(copy, "model_2.pt")]
        expected = "does not fit"
    snapshot = {name: os.path.getsize(os.path.join(copy, name)) for name in os.listdir(copy)}
    scripts = [("play.py", []), ("train.py", ["--resume", "--max_iterations", "1"])]
    for script, extra in scripts[1:] if case == "other networks" else scripts:
        process = run_script(script, [*args, *extra], cwd=tmp_path, timeout=600)
        assert process.returncode == 2, f"{script}: {process.stderr[-3000:]}"
        assert expected in process.stderr, f"{script}: {process.stderr[-3000:]}"
        assert {name: os.path.getsize(os.path.join(copy, name)) for name in os.listdir(copy)} == snapshot
        assert sorted(os.listdir(os.path.join(tmp_path, "logs", "torchrl"))) == ["cartpole_direct_lstm"]
        assert sorted(os.listdir(os.path.dirname(copy))) == [os.path.basename(copy)]
