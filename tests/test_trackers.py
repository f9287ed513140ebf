"""Trackers beside TensorBoard, with their real clients and no network: MLflow with a local SQLite store, W&B and
Neptune in offline mode. A short Cartpole run sends its scalars, config and checkpoints; ``--resume`` continues the same
tracked run."""

import glob
import json
import os

import pytest
import yaml

from helpers import CPU_ARGS, assert_ok, run_dirs, run_script, scalars
from isaaclab_torchrl.agents import ported_agent
from isaaclab_torchrl.agents.validation import ConfigError, validate_agent_cfg

SHORT_RUN = ["--task", "Isaac-Cartpole-Direct", "--num_envs", "16", *CPU_ARGS]
TAGS = ["Train/mean_reward", "Loss/value", "Loss/surrogate", "Perf/total_fps"]


def test_mlflow_receives_scalars_params_and_checkpoints_and_resume_continues_the_run(workdir):
    mlflow = pytest.importorskip("mlflow")
    env = {"MLFLOW_TRACKING_URI": f"sqlite:///{workdir}/mlflow.db"}
    args = [*SHORT_RUN, "--logger", "mlflow", "--log_project_name", "cartpole_tracked"]
    assert_ok(run_script("train.py", [*args, "--max_iterations", "2"], cwd=workdir, extra_env=env))
    assert_ok(run_script("train.py", [*args, "--max_iterations", "1", "--resume"], cwd=workdir, extra_env=env))

    (run_dir,) = run_dirs(workdir, "cartpole_direct")
    assert set(TAGS) <= set(scalars(run_dir)), "TensorBoard events are written as well"
    mlflow.set_tracking_uri(env["MLFLOW_TRACKING_URI"])
    client = mlflow.tracking.MlflowClient()
    experiment = client.get_experiment_by_name("cartpole_tracked")
    (run,) = client.search_runs([experiment.experiment_id])  # the resumed run went on in the same tracked run
    for tag in TAGS:
        assert [m.step for m in client.get_metric_history(run.info.run_id, tag)] == [1, 2, 3], tag
    agent = yaml.safe_load(open(os.path.join(run_dir, "params", "agent.yaml")))
    assert run.data.params["algorithm.learning_rate"] == str(agent["algorithm"]["learning_rate"])
    assert run.data.params["logger"] == "mlflow"
    artifacts = {a.path for folder in ("checkpoints", "params") for a in client.list_artifacts(run.info.run_id, folder)}
    assert {"checkpoints/model_2.pt", "checkpoints/model_3.pt", "params/agent.yaml", "params/env.yaml"} <= artifacts


def test_wandb_offline_run_holds_scalars_and_config_and_resume_continues_it(workdir):
    pytest.importorskip("wandb")
    env = {"WANDB_MODE": "offline", "WANDB_SILENT": "true"}
    args = [*SHORT_RUN, "--logger", "wandb", "--log_project_name", "cartpole_tracked"]
    assert_ok(run_script("train.py", [*args, "--max_iterations", "2"], cwd=workdir, extra_env=env))
    (run_dir,) = run_dirs(workdir, "cartpole_direct")
    run_id = yaml.safe_load(open(os.path.join(run_dir, "params", "tracker.yaml")))["run_id"]
    assert_ok(run_script("train.py", [*args, "--max_iterations", "1", "--resume"], cwd=workdir, extra_env=env))

    runs = sorted(glob.glob(os.path.join(run_dir, "wandb", "offline-run-*")))
    assert len(runs) == 2 and all(path.endswith(f"-{run_id}") for path in runs), runs
    first = open(os.path.join(runs[0], f"run-{run_id}.wandb"), "rb").read()
    for text in [*TAGS, "learning_rate", "cartpole_tracked"]:
        assert text.encode() in first, f"{text} is not in the offline run"
    assert os.path.exists(os.path.join(runs[0], "files", "model_2.pt")), "the checkpoint is saved with the run"
    assert os.path.exists(os.path.join(runs[0], "files", "params", "agent.yaml"))
    assert b"Train/mean_reward" in open(os.path.join(runs[1], f"run-{run_id}.wandb"), "rb").read()


@pytest.mark.fast
def test_wandb_without_credentials_is_rejected_before_training(monkeypatch, tmp_path):
    pytest.importorskip("wandb")
    for name in ("WANDB_MODE", "WANDB_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))  # no stored login
    agent_cfg = ported_agent("Isaac-Cartpole-Direct")
    agent_cfg.logger = "wandb"
    with pytest.raises(ConfigError, match="not logged in"):
        validate_agent_cfg(agent_cfg, num_envs=64)
    monkeypatch.setenv("WANDB_MODE", "offline")
    validate_agent_cfg(agent_cfg, num_envs=64)


def test_neptune_offline_run_holds_scalars_config_and_checkpoints(workdir):
    pytest.importorskip("neptune")
    env = {"NEPTUNE_MODE": "offline"}
    args = [*SHORT_RUN, "--logger", "neptune", "--log_project_name", "me/cartpole", "--max_iterations", "2"]
    assert_ok(run_script("train.py", args, cwd=workdir, extra_env=env))
    (data,) = glob.glob(os.path.join(workdir, ".neptune", "offline", "run__*", "data-1.log"))
    content = open(data).read()
    for field in [*TAGS, "agent_cfg/algorithm.learning_rate", "checkpoints/model_2.pt", "params/agent.yaml"]:
        path = json.dumps(field.split("/"))  # Neptune's log names a field by its path: ["Train", "mean_reward"]
        assert f'"path": {path}' in content, f"{field} is not in the offline run"


@pytest.mark.fast
def test_a_tracker_without_its_client_is_rejected_before_training(monkeypatch):
    """The check a user without ``pip install 'isaaclab-torchrl[mlflow]'`` meets (the test environment has every
    client, so the lookup answers as for an environment without this one)."""
    import importlib.util

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "mlflow" else find_spec(name, *a))
    agent_cfg = ported_agent("Isaac-Cartpole-Direct")
    agent_cfg.logger = "mlflow"
    with pytest.raises(
        ConfigError, match=r"--logger mlflow needs the mlflow client: pip install 'isaaclab-torchrl\[mlflow\]'"
    ):
        validate_agent_cfg(agent_cfg, num_envs=64)


@pytest.mark.parametrize("logger", ["wandb", "mlflow"])
def test_a_training_video_reaches_the_tracker(workdir, logger):
    """``--video`` (kitless: the Newton visualizer renders headless): the clip the first worker records is uploaded
    once it is complete, as rsl_rl uploads its videos to W&B."""
    pytest.importorskip(logger)
    env = {"WANDB_MODE": "offline", "WANDB_SILENT": "true", "MLFLOW_TRACKING_URI": f"sqlite:///{workdir}/mlflow.db"}
    args = ["--task", "Isaac-Cartpole-Direct", "--num_envs", "16", "--max_iterations", "2", "--logger", logger]
    args += ["--device", "cpu", "--viz", "newton", "physics=newton_mjwarp", "agent.collector.sync=true"]
    args += ["--video", "--video_length", "8", "--video_interval", "10", "--log_project_name", "cartpole_video"]
    assert_ok(run_script("train.py", args, cwd=workdir, extra_env=env))
    (run_dir,) = run_dirs(workdir, "cartpole_direct")
    recorded = sorted(os.listdir(os.path.join(run_dir, "videos", "train")))
    assert recorded and all(name.endswith(".mp4") for name in recorded), recorded
    if logger == "wandb":
        (run,) = glob.glob(os.path.join(run_dir, "wandb", "offline-run-*"))
        uploaded = glob.glob(os.path.join(run, "files", "media", "videos", "video_*.mp4"))
        assert len(uploaded) == len(recorded), uploaded
    else:
        import mlflow

        mlflow.set_tracking_uri(env["MLFLOW_TRACKING_URI"])
        client = mlflow.tracking.MlflowClient()
        (run,) = client.search_runs([client.get_experiment_by_name("cartpole_video").experiment_id])
        uploaded = [os.path.basename(a.path) for a in client.list_artifacts(run.info.run_id, "videos/train")]
        assert uploaded == recorded, uploaded
