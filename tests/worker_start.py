"""Starts the workers' fork server as ``scripts/train.py`` does and forks one process from it, which prints as JSON
which of the server's modules it lacks and whether Warp or CUDA is initialised in it (``tests/test_workers.py``)."""

from __future__ import annotations

import json
import sys


def report(queue) -> None:
    import torch
    from warp._src import context

    from isaaclab_torchrl.workers import WORKER_MODULES

    missing = [module for module in WORKER_MODULES if module not in sys.modules]
    queue.put({"missing": missing, "warp": context.runtime is not None, "cuda": torch.cuda.is_initialized()})


if __name__ == "__main__":
    from isaaclab_torchrl.workers import start_worker_server, worker_context

    start_worker_server()
    context = worker_context()
    queue = context.Queue()
    process = context.Process(target=report, args=(queue,))
    process.start()
    print(json.dumps(queue.get(timeout=300)))
    process.join()
