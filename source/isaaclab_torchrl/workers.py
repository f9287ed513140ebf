"""How the processes that run Isaac Lab start: forked from a server that has already imported what they import.

A collector worker (and the probe that reads a task's sizes) is a fresh interpreter: under Python's ``spawn`` it
imports torch, torchrl, Isaac Lab, its task configs and its physics backend (seconds) before it builds its
simulation, and only after the main process has resolved the configs. ``scripts/train.py`` first starts Python's
``forkserver``, told to import :mod:`isaaclab_torchrl.fork_server` (the package, then :data:`WORKER_MODULES`), and
only then imports the package and the learner itself: the two processes import side by side, and every worker is
then forked from the server with its modules imported.

The server is a fresh interpreter as well (not a fork of the main process), and importing these modules
initialises neither CUDA nor Warp, so the workers start with no device state, as under ``spawn``. The kernel ends
the server with the main process and the workers with the server (:func:`end_with_parent`).
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import multiprocessing
import signal
import sys

WORKER_MODULES = (
    "isaaclab_torchrl.envs",  # the env factory
    "isaaclab_torchrl.interfaces",  # the probe that reads a task's sizes
    "isaaclab_torchrl.runners.collection",  # the collector classes, and with them torchrl's collectors
    "newton",  # the kitless physics backend a worker's simulation starts
    "mujoco_warp",
    "pandas",  # tensordict imports it the first time it builds a TensorDict from a dict
)
"""What the fork server imports after the package (:mod:`isaaclab_torchrl.fork_server`). Not Isaac Lab's
simulation modules: importing them initialises Warp (``isaaclab.utils.warp`` calls ``wp.init()``), and a process
forked after CUDA was initialised cannot use it. Nor Python's own ``"__main__"`` entry: Python 3.12 ignores it
(CPython gh-126631, fixed in 3.13), so each worker imports the training script again after the fork; the script
imports nothing at its top but the standard library. A preloaded module that fails to import is skipped by Python
silently: ``tests/test_workers.py`` checks that a worker starts with every one of them, and with neither Warp nor
CUDA initialised."""

OPTIONAL_WORKER_MODULES = (
    "moviepy.editor",  # Isaac Lab's video recorder, which its env classes import
    "leapp",  # LEAPP, which Isaac Lab's sensors import for their export annotations
)
"""What the fork server imports after :data:`WORKER_MODULES` when it is installed: Isaac Lab's optional dependencies
that its simulation modules import if they can (otherwise a worker imports them after the fork), neither of which
initialises Warp."""


def worker_context():
    """The multiprocessing context workers start with: the server's when ``scripts/train.py`` made it the
    default, else ``spawn`` (never ``fork``: the main process may hold CUDA state and threads)."""
    method = multiprocessing.get_start_method(allow_none=True)
    return multiprocessing.get_context("forkserver" if method == "forkserver" else "spawn")


def end_with_parent() -> None:
    """Has the kernel kill the calling process when its parent ends, however it ends (Linux; elsewhere nothing)."""
    if sys.platform == "linux":
        PR_SET_PDEATHSIG = 1
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


@contextlib.contextmanager
def long_lived_imports():
    """Imports in the block run without Python's cyclic garbage collector, and the objects they built are then
    frozen (``gc.freeze``): later collections, in this process and in the processes forked from it, skip them.

    Modules live as long as the process, yet each full collection during the imports traverses all the objects built
    so far (over a million by the end of the fork server's preload), and a worker's first full collection after the
    fork traverses the server's again; the measured share of the start is in ``docs/benchmarks.md`` (the start of a
    run). Freezing before the forks is what Python's documentation advises for a process that forks workers: their
    collections then leave the server's pages shared. The garbage the imports left stays frozen. Used by the fork
    server and, inline (it imports nothing of the package first), by ``scripts/train.py``.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if enabled:
            gc.enable()
