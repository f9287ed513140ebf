"""How the processes that run Isaac Lab start: forked from a server that has already imported what they import.

A collector worker (and the probe that reads a task's sizes) is a fresh interpreter: under Python's ``spawn`` it
imports torch, torchrl, Isaac Lab, its task configs and its physics backend (seconds) before it builds its
simulation, and only after the main process has resolved the configs. :func:`start_worker_server` starts
Python's ``forkserver``, told to import those modules at once; ``scripts/train.py`` starts it before it imports the
learner, so the server imports the workers' modules while the main process imports its own and resolves the
configs, and every worker is then forked from it with them imported.

The server is a fresh interpreter as well (not a fork of the main process), and importing these modules
initialises neither CUDA nor Warp, so the workers start with no device state, as under ``spawn``. The kernel ends
the server with the main process and the workers with the server (:func:`end_with_parent`).
"""

from __future__ import annotations

import ctypes
import multiprocessing
import multiprocessing.forkserver
import signal
import sys

WORKER_MODULES = (
    "isaaclab_torchrl.fork_server",  # first: the server ends with the main process from then on
    "isaaclab_torchrl.envs",  # the env factory, and with the package torch, Isaac Lab and its task configs
    "isaaclab_torchrl.interfaces",  # the probe that reads a task's sizes
    "isaaclab_torchrl.runners.collection",  # the collector classes, and with them torchrl's collectors
    "newton",  # the kitless physics backend a worker's simulation starts
    "mujoco_warp",
    "pandas",  # tensordict imports it the first time it builds a TensorDict from a dict
)
"""What the server imports before it forks a worker. Not Isaac Lab's simulation modules: importing them initialises
Warp (``isaaclab.utils.warp`` calls ``wp.init()``), and a process forked after CUDA was initialised cannot use it.
Nor Python's own ``"__main__"`` entry: Python 3.12 ignores it (CPython gh-126631, fixed in 3.13), so each worker
imported the training script again after the fork; the script now imports only what the server already has. A
module that fails to import is skipped by Python silently: ``tests/test_workers.py`` checks that a worker starts
with every one of them, and with neither Warp nor CUDA initialised."""


def start_worker_server(modules: tuple[str, ...] = WORKER_MODULES) -> None:
    """Makes ``forkserver`` the start method of the workers and starts the server, which imports ``modules`` while
    the caller goes on (call it before the script imports what the workers do not need; each worker imports the
    script again, as a spawned worker would, so the script must do its work under ``if __name__ == "__main__"`` and
    should import little at its top)."""
    multiprocessing.set_start_method("forkserver", force=True)
    multiprocessing.set_forkserver_preload(list(modules))
    multiprocessing.forkserver.ensure_running()


def worker_context():
    """The multiprocessing context workers start with: the server's when :func:`start_worker_server` made it the
    default, else ``spawn`` (never ``fork``: the main process may hold CUDA state and threads)."""
    method = multiprocessing.get_start_method(allow_none=True)
    return multiprocessing.get_context("forkserver" if method == "forkserver" else "spawn")


def end_with_parent() -> None:
    """Has the kernel kill the calling process when its parent ends, however it ends (Linux; elsewhere nothing)."""
    if sys.platform == "linux":
        PR_SET_PDEATHSIG = 1
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
