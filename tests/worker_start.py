"""Starts the workers' fork server with ``scripts/train.py``'s own function and forks one process from it, which
prints as JSON which of the server's modules it lacks, whether Warp or CUDA is initialised in it, the asset root Isaac
Lab resolved when the server imported it, and whether its garbage collector runs, with the server's objects frozen
(``tests/test_workers.py``)."""

from __future__ import annotations

import gc
import importlib.util
import json
import os
import runpy
import sys


def report(queue) -> None:
    import torch
    from isaaclab.utils import assets
    from warp._src import context

    from isaaclab_torchrl.workers import OPTIONAL_WORKER_MODULES, WORKER_MODULES

    installed = [module for module in OPTIONAL_WORKER_MODULES if importlib.util.find_spec(module.split(".")[0])]
    expected = ["isaaclab_torchrl", "isaaclab_torchrl.fork_server", *WORKER_MODULES, *installed]
    missing = [module for module in expected if module not in sys.modules]
    warp, cuda = context.runtime is not None, torch.cuda.is_initialized()
    collector = {"enabled": gc.isenabled(), "frozen": gc.get_freeze_count()}
    queue.put({"missing": missing, "warp": warp, "cuda": cuda, "asset_root": assets.NUCLEUS_ASSET_ROOT_DIR} | collector)


if __name__ == "__main__":
    script = runpy.run_path(os.path.join(os.path.dirname(__file__), "..", "scripts", "train.py"), run_name="imported")
    script["start_worker_server"]()
    from isaaclab_torchrl.workers import worker_context

    context = worker_context()
    queue = context.Queue()
    process = context.Process(target=report, args=(queue,))
    process.start()
    print(json.dumps(queue.get(timeout=300)))
    process.join()
