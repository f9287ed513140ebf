"""Checkpoint files: written atomically, read with ``weights_only=True``."""

from __future__ import annotations

import os
import re
import tempfile

import torch


def save_checkpoint(state: dict, path: str) -> None:
    """Writes ``state`` to ``path`` through a temporary file in the same folder, so a crash never leaves a
    truncated checkpoint behind."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp_path = tempfile.mkstemp(prefix=".tmp_", suffix=".pt", dir=folder)
    try:
        with os.fdopen(fd, "wb") as file:
            torch.save(state, file)
        os.replace(tmp_path, path)
    except BaseException:
        os.unlink(tmp_path)
        raise


def load_checkpoint(path: str, map_location: str | torch.device = "cpu") -> dict:
    return torch.load(path, map_location=map_location, weights_only=True)


def _natural_key(name: str) -> list:
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def find_checkpoint(log_root: str, load_run: str = ".*", checkpoint: str = r"model_.*\.pt") -> str:
    """The checkpoint to play or resume, rsl_rl style: the newest run folder under ``log_root`` whose name
    matches ``load_run`` and, in it, the last file matching ``checkpoint`` (natural order: model_10 after
    model_9).

    Raises:
        FileNotFoundError: with the folder searched and what was found there.
    """
    if not os.path.isdir(log_root):
        raise FileNotFoundError(f"No runs: the log folder {log_root} does not exist.")
    runs = sorted(
        (name for name in os.listdir(log_root) if os.path.isdir(os.path.join(log_root, name)) and re.match(load_run, name)),
        key=_natural_key,
    )
    if not runs:
        raise FileNotFoundError(
            f"No run matching {load_run!r} in {log_root} (found: {', '.join(sorted(os.listdir(log_root))) or 'nothing'})."
        )
    run_dir = os.path.join(log_root, runs[-1])
    files = sorted((name for name in os.listdir(run_dir) if re.fullmatch(checkpoint, name)), key=_natural_key)
    if not files:
        raise FileNotFoundError(f"No checkpoint matching {checkpoint!r} in {run_dir}.")
    return os.path.join(run_dir, files[-1])
