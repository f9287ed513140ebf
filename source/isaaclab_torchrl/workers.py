"""How the processes that run Isaac Lab start: forked from a server that has already imported what they import.

A collector worker (and the probe that reads a task's sizes) is a fresh interpreter: under Python's ``spawn`` it
imports torch, torchrl, Isaac Lab, its task configs and its physics backend (seconds) before it builds its
simulation, and only after the main process has resolved the configs. :func:`start_worker_server` starts
Python's ``forkserver`` at the beginning of ``scripts/train.py``, told to import those modules at once: it imports
them while the main process resolves the configs, and every worker is then forked from it with them imported.

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
    "__main__",  # the training script's own imports: torch, tensordict, torchrl, Isaac Lab and its task configs
    "isaaclab_torchrl.envs",
    "torchrl.collectors",
    "isaaclab.envs",
    "isaaclab_newton.physics",  # the kitless physics backend a worker's simulation starts
    "newton",
    "mujoco_warp",
    "isaaclab_torchrl.fork_server",  # last: the server ends with the main process
)
"""What the server imports before it forks a worker; a module that does not import is skipped."""


def start_worker_server(modules: tuple[str, ...] = WORKER_MODULES) -> None:
    """Makes ``forkserver`` the start method of the workers and starts the server, which imports ``modules`` while
    the caller goes on (call it first thing in a script; the script is imported by the server as ``__main__`` is
    by a spawned worker, so it must do its work under ``if __name__ == "__main__"``)."""
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
