"""Run folders: ``logs/torchrl/<experiment>/<time>[_<run name>]/``, as rsl_rl lays out ``logs/rsl_rl``."""

from __future__ import annotations

import os
import re
import tempfile
from datetime import datetime

LOG_ROOT = os.path.join("logs", "torchrl")
"""The folder of every experiment, relative to the working directory (Isaac Lab's ``logs/<library>``)."""


CHECKPOINT_NAME = re.compile(r"model_(\d+)\.pt")
"""An iteration's checkpoint in a run folder."""


class RunFolderError(OSError):
    """A run folder that cannot be written."""


def experiment_root(experiment_name: str) -> str:
    """``logs/torchrl/<experiment>`` as an absolute path: where the experiment's run folders are."""
    return os.path.abspath(os.path.join(LOG_ROOT, experiment_name))


def new_run_dir(experiment_name: str, run_name: str = "", timestamp: str | None = None) -> str:
    """The path of a new run folder ``logs/torchrl/<experiment>/<time>[_<run name>]`` (not created yet)."""
    name = timestamp or datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
    if run_name:
        name += f"_{run_name}"
    return os.path.join(experiment_root(experiment_name), name)


def resumed_run_dir(checkpoint: str, experiment_name: str) -> str | None:
    """The run folder a resumed run goes on in: the checkpoint's own, when it is a run folder of this experiment;
    ``None`` (a new run folder) for a checkpoint from elsewhere (another experiment, a download)."""
    run_dir = os.path.dirname(os.path.abspath(checkpoint))
    return run_dir if os.path.dirname(run_dir) == experiment_root(experiment_name) else None


def later_checkpoints(run_dir: str, iteration: int) -> list[int]:
    """The iterations after ``iteration`` that ``run_dir`` holds a checkpoint (``model_<N>.pt``) of, in order."""
    matches = (CHECKPOINT_NAME.fullmatch(name) for name in os.listdir(run_dir))
    return sorted(n for match in matches if match and (n := int(match[1])) > iteration)


def create_run_dir(run_dir: str) -> None:
    """Creates the run folder and checks that it is writable, before any simulator starts.

    Raises:
        RunFolderError: naming the folder and the reason.
    """
    try:
        os.makedirs(run_dir, exist_ok=True)
        with tempfile.TemporaryFile(dir=run_dir):
            pass
    except OSError as exc:
        raise RunFolderError(f"Cannot write the log directory {run_dir}: {exc}") from exc
