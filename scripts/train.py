"""Train an Isaac Lab task with TorchRL: (recurrent) PPO over subprocess collectors.

    python scripts/train.py --task Isaac-Cartpole-Direct --agent torchrl --viz none [--num_envs N]
        [--num_collectors K] [--async] [physics=newton_mjwarp] [agent.algorithm.learning_rate=3e-4 ...]

Isaac Lab runs only inside the collector subprocesses; this process resolves the configs and learns
(:func:`isaaclab_torchrl.training.main`). It first starts the process the workers are forked from, then imports the
learner: the two import torch, torchrl and Isaac Lab side by side (``docs/architecture.md``).
"""

from __future__ import annotations

import sys

from isaaclab_torchrl.offline_assets import export_offline_root
from isaaclab_torchrl.workers import start_worker_server

NO_TRAINING = {"--print_config", "-h", "--help"}
"""Arguments with which the script trains nothing, so starts no worker server."""


def main(argv: list[str]) -> int:
    if not NO_TRAINING & set(argv):
        # the server starts with this process's environment as it is now, the offline asset root included
        export_offline_root()
        start_worker_server()
    from isaaclab_torchrl import training  # the learner's imports, while the server imports the workers'

    return training.main(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
