"""How the learner's update is compiled: torch.compile's settings, where its compiled code persists, and the
precision of the CUDA matrix products (``agent.compile``, ``agent.tf32``)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable

import torch

COMPILE_SETTINGS = {"allow_rnn": True}
"""torch.compile's settings while it traces the update. tensordict finds the actor's distribution by walking its
modules, an ``nn.LSTM``/``nn.GRU`` among them, which dynamo refuses to wrap by default: it would run the whole loss
eagerly, the recurrent pass's backward included. Those modules' own forward never runs in the update (the
recurrent layers run :mod:`isaaclab_torchrl.recurrent`'s fused pass)."""


def compile_losses(losses: Callable) -> Callable:
    """``losses`` compiled by ``torch.compile``: traced with :data:`COMPILE_SETTINGS`, and its forward and backward
    graphs kept in AOTAutograd's cache although they contain a custom ``autograd.Function``.

    torch 2.11 leaves such graphs out of AOTAutograd's cache by default, so every new process traced the joint graph
    and partitioned it again. The fused recurrent pass (:mod:`isaaclab_torchrl.recurrent`) is such a function; dynamo
    traces its forward and its backward into the graph (``autograd_function_apply``), so they are part of the key of
    the cached entry. The cached steps and what is left of a run's first update are in ``docs/benchmarks.md``.
    """
    compiled = torch._dynamo.config.patch(**COMPILE_SETTINGS)(torch.compile(losses))
    return torch._functorch.config.patch(autograd_cache_allow_custom_autograd_functions=True)(compiled)


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
