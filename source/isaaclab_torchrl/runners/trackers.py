"""Experiment trackers beside TensorBoard: Weights & Biases, Neptune and MLflow (``agent.logger``).

TensorBoard events are always written to the run folder (:mod:`.logger`); a tracker receives the same scalars at
the same steps, the run's configs, the git state and the checkpoints. The clients are used directly (torchrl's
``record.loggers`` cannot continue an MLflow run or upload files): each tracker is a few calls of its own client.
The run id is kept in the run folder (``params/tracker.yaml``), so ``--resume`` continues the same tracked run.
"""

from __future__ import annotations

import os

import yaml

RUN_ID_FILE = os.path.join("params", "tracker.yaml")


def flatten(config: dict, prefix: str = "") -> dict[str, object]:
    """``{"algorithm": {"gamma": 0.99}}`` -> ``{"algorithm.gamma": 0.99}`` (MLflow's parameters are flat)."""
    flat = {}
    for key, value in config.items():
        if isinstance(value, dict) and value:
            flat.update(flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


class Tracker:
    """One tracked run of a training run; the base class tracks nothing (TensorBoard only)."""

    run_id: str | None = None
    resumed = False
    """Whether this continues a tracked run of the same run folder (``--resume``)."""

    def log_config(self, agent_cfg: dict, env_cfg: dict) -> None:
        """The resolved configs (called once, for a new run)."""

    def log_scalars(self, scalars: dict[str, float], step: int) -> None:
        """One iteration's scalars under their TensorBoard tags."""

    def log_evaluation(self, scalars: dict[str, float], iteration: int, step: int) -> None:
        """An evaluation's scalars, of the policy of ``iteration``, finished at the training iteration ``step``."""
        self.log_scalars(scalars, iteration)

    def log_file(self, path: str, folder: str) -> None:
        """A file of the run folder (a checkpoint, a config, the git state) under ``folder``."""

    def log_video(self, path: str, step: int) -> None:
        """A finished video of the run folder (``videos/<kind>/*.mp4``), at the iteration it was found."""

    def close(self) -> None:
        """Ends the tracked run (it can be continued with ``--resume``)."""


class WandbTracker(Tracker):
    """Weights & Biases: scalars, the configs as the run's config, files with ``wandb.save`` (rsl_rl's way)."""

    def __init__(self, project: str, name: str, log_dir: str, run_id: str | None):
        import wandb

        self.wandb, self.log_dir = wandb, log_dir
        self.run = wandb.init(project=project, name=name, dir=log_dir, id=run_id, resume="allow")
        self.run_id = self.run.id

    def log_config(self, agent_cfg: dict, env_cfg: dict) -> None:
        self.run.config.update({"agent_cfg": agent_cfg, "env_cfg": env_cfg}, allow_val_change=True)

    def log_scalars(self, scalars: dict[str, float], step: int) -> None:
        self.run.log(scalars, step=step)

    def log_evaluation(self, scalars: dict[str, float], iteration: int, step: int) -> None:
        # W&B drops a step lower than one already logged: the evaluation goes in at the step it finished, and its
        # charts are drawn against the iteration evaluated
        axis = "Eval/iteration"
        self.run.define_metric(axis)
        for tag in scalars:
            self.run.define_metric(tag, step_metric=axis)
        self.run.log({**scalars, axis: iteration}, step=step)

    def log_file(self, path: str, folder: str) -> None:
        self.run.save(path, base_path=self.log_dir, policy="now")

    def log_video(self, path: str, step: int) -> None:
        kind = os.path.basename(os.path.dirname(path))  # rsl_rl's key for training videos
        key = "video" if kind == "train" else f"video/{kind}"
        self.run.log({key: self.wandb.Video(path, format="mp4")}, step=step)

    def close(self) -> None:
        self.run.finish()


class NeptuneTracker(Tracker):
    """Neptune: scalars as series, the configs as run fields, files uploaded under their folder."""

    def __init__(self, project: str, name: str, run_id: str | None):
        import neptune

        self.run = neptune.init_run(project=project, name=name, with_id=run_id)
        # offline (NEPTUNE_MODE=offline: data under ./.neptune, `neptune sync` later) a run has no id to resume by
        self.run_id = self.run["sys/id"].fetch() if self.run.exists("sys/id") else None

    def log_config(self, agent_cfg: dict, env_cfg: dict) -> None:
        self.run["agent_cfg"] = flatten(agent_cfg)
        self.run["env_cfg"] = flatten(env_cfg)

    def log_scalars(self, scalars: dict[str, float], step: int) -> None:
        for tag, value in scalars.items():
            self.run[tag].append(value, step=step)

    def log_file(self, path: str, folder: str) -> None:
        self.run[f"{folder}/{os.path.basename(path)}"].upload(path)

    def log_video(self, path: str, step: int) -> None:
        self.log_file(path, f"videos/{os.path.basename(os.path.dirname(path))}")

    def close(self) -> None:
        self.run.stop()


class MlflowTracker(Tracker):
    """MLflow (the store of ``MLFLOW_TRACKING_URI``): metrics, the agent config as parameters, files as artifacts.

    MLflow's metric names may not hold spaces or some symbols; rsl_rl's tags (``Loss/value``) are valid as they are.
    """

    def __init__(self, experiment: str, name: str, run_id: str | None):
        import mlflow

        self.mlflow = mlflow
        if run_id is None:
            mlflow.set_experiment(experiment)
        self.run = mlflow.start_run(run_id=run_id, run_name=None if run_id else name)
        self.run_id = self.run.info.run_id

    def log_config(self, agent_cfg: dict, env_cfg: dict) -> None:
        # MLflow caps a parameter's value at 6000 characters; the env config goes in as a file (params/env.yaml)
        self.mlflow.log_params({key: str(value)[:6000] for key, value in flatten(agent_cfg).items()})

    def log_scalars(self, scalars: dict[str, float], step: int) -> None:
        self.mlflow.log_metrics(scalars, step=step)

    def log_file(self, path: str, folder: str) -> None:
        self.mlflow.log_artifact(path, folder)

    def log_video(self, path: str, step: int) -> None:
        self.log_file(path, f"videos/{os.path.basename(os.path.dirname(path))}")

    def close(self) -> None:
        self.mlflow.end_run()


class VideoUploads:
    """The videos of a run folder a tracker has not received yet (rsl_rl uploads each file once, as it appears).

    Isaac Lab's recorder writes a clip's mp4 in place, so a file is taken once its size has held from one look to the
    next (one iteration), and at the end of training, when the recording workers have stopped, as it is.
    """

    def __init__(self, log_dir: str):
        self.folder = os.path.join(log_dir, "videos")
        self._sizes: dict[str, int] = {}
        self._sent: set[str] = set()

    def ready(self, final: bool = False) -> list[str]:
        found = []
        for root, _, names in os.walk(self.folder):
            found += [os.path.join(root, name) for name in sorted(names) if name.endswith(".mp4")]
        ready = []
        for path in found:
            if path in self._sent:
                continue
            size = os.path.getsize(path)
            if final or self._sizes.get(path) == size > 0:
                ready.append(path)
                self._sent.add(path)
            self._sizes[path] = size
        return ready


def make_tracker(cfg, log_dir: str | None) -> Tracker:
    """The tracker of ``cfg.logger`` for the run folder ``log_dir`` (none without a folder: ranks other than 0), in
    its project (``cfg.wandb_project``, ``cfg.neptune_project``, ``cfg.mlflow_experiment`` or the experiment name).

    A run folder that already has a tracked run (``--resume``) continues that run.
    """
    logger = cfg.logger
    if log_dir is None or logger == "tensorboard":
        return Tracker()
    id_file = os.path.join(log_dir, RUN_ID_FILE)
    run_id = None
    if os.path.exists(id_file):
        with open(id_file) as file:
            saved = yaml.safe_load(file) or {}
        run_id = saved.get("run_id") if saved.get("logger") == logger else None
    name = os.path.basename(os.path.normpath(log_dir))
    if logger == "wandb":
        tracker = WandbTracker(cfg.wandb_project, name, log_dir, run_id)
    elif logger == "neptune":
        tracker = NeptuneTracker(cfg.neptune_project, name, run_id)
    else:
        tracker = MlflowTracker(cfg.mlflow_experiment or cfg.experiment_name, name, run_id)
    tracker.resumed = run_id is not None
    os.makedirs(os.path.dirname(id_file), exist_ok=True)
    with open(id_file, "w") as file:
        yaml.safe_dump({"logger": logger, "run_id": tracker.run_id}, file)
    return tracker
