"""How the learner's update is compiled: torch.compile's settings, where its compiled code persists, and the
precision of the CUDA matrix products (``agent.compile``, ``agent.tf32``)."""

from __future__ import annotations

import contextlib
import os

import torch

COMPILE_SETTINGS = {"allow_rnn": True}
"""torch.compile's settings while it traces the update. tensordict finds the actor's distribution by walking its
modules, an ``nn.LSTM``/``nn.GRU`` among them, which dynamo refuses to wrap by default: it would run the whole loss
eagerly, the recurrent pass's backward included. Those modules' own forward never runs in the update (the
recurrent layers run :mod:`isaaclab_torchrl.recurrent`'s fused pass)."""


def compile_cache_dir() -> str:
    """Where inductor keeps compiled graphs and kernels between runs: ``TORCHINDUCTOR_CACHE_DIR`` when the user set
    it, else ``isaaclab_torchrl/torchinductor`` in the user's cache folder (``$XDG_CACHE_HOME`` or ``~/.cache``),
    which outlives a reboot where torch's own default (``/tmp/torchinductor_<user>``) may not.

    Importing tensordict already sets the variable to torch's default, so that value counts as not set.
    """
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    current = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if current and current != default_cache_dir():
        return current
    cache_home = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache_home, "isaaclab_torchrl", "torchinductor")


@contextlib.contextmanager
def tf32_products(enabled: bool):
    """CUDA float32 matrix products in TF32 inside the block (``agent.tf32``), as they were outside it after."""
    previous = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = enabled
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = previous
