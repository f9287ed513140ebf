"""Checkpoint files: written atomically, read with ``weights_only=True``."""

from __future__ import annotations

import os
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
