"""Train an Isaac Lab task with TorchRL: (recurrent) PPO over subprocess collectors.

    python scripts/train.py --task Isaac-Cartpole-Direct --agent torchrl --viz none [--num_envs N]
        [--num_collectors K] [--async] [physics=newton_mjwarp] [agent.algorithm.learning_rate=3e-4 ...]

Isaac Lab runs only inside the collector subprocesses; this process resolves the configs and learns
(:func:`isaaclab_torchrl.training.main`). It first starts the process the workers are forked from, then imports the
package and the learner: the two import torch, torchrl and Isaac Lab side by side (``docs/architecture.md``).
"""

from __future__ import annotations

import gc
import multiprocessing
import multiprocessing.forkserver
import sys

WORKER_SERVER_MODULE = "isaaclab_torchrl.fork_server"
"""What the workers' server imports before it forks one: the package and every module a worker imports."""

NO_TRAINING = {"--print_config", "-h", "--help"}
"""Arguments with which the script trains nothing, so starts no worker server."""


def start_worker_server() -> None:
    """Makes Python's ``forkserver`` the workers' start method and starts the server, which imports
    :data:`WORKER_SERVER_MODULE` while this process goes on (``isaaclab_torchrl.workers``). Each worker imports this
    script again, as a spawned worker would: it imports nothing at its top but the standard library."""
    multiprocessing.set_start_method("forkserver", force=True)
    multiprocessing.set_forkserver_preload([WORKER_SERVER_MODULE])
    multiprocessing.forkserver.ensure_running()


def import_training():
    """The package and the learner (:mod:`isaaclab_torchrl.training`), imported while the server imports the
    workers' modules: without the cyclic garbage collector, and then frozen, as the server's preload
    (``isaaclab_torchrl.workers.long_lived_imports``, which this script cannot import before the server starts)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        from isaaclab_torchrl import training
    finally:
        gc.freeze()
        if enabled:
            gc.enable()
    return training


def main(argv: list[str]) -> int:
    if not NO_TRAINING & set(argv):
        start_worker_server()
    return import_training().main(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
