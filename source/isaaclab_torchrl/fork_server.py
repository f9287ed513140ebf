"""What the workers' fork server imports before it forks a worker (``scripts/train.py`` preloads this module alone,
and only there): the package (torch, Isaac Lab, its task configs), then :data:`~isaaclab_torchrl.workers.WORKER_MODULES`
and, where installed, :data:`~isaaclab_torchrl.workers.OPTIONAL_WORKER_MODULES`.

Once the package is imported it has the kernel kill the server the moment the main process ends, whatever ended it;
the workers forked from the server die with it (:func:`~isaaclab_torchrl.runners.safety.init_worker`). Left to
itself the server would wait for every worker to end first, and a worker that no longer runs (stopped, or hung in
the simulator) never would.

The preload runs without Python's cyclic garbage collector, and what it built is frozen before any fork
(:func:`~isaaclab_torchrl.workers.long_lived_imports`).
"""

import contextlib
import importlib

from isaaclab_torchrl.workers import OPTIONAL_WORKER_MODULES, WORKER_MODULES, end_with_parent, long_lived_imports

end_with_parent()
with long_lived_imports():
    for module in WORKER_MODULES:
        importlib.import_module(module)
    for module in OPTIONAL_WORKER_MODULES:
        with contextlib.suppress(ImportError):
            importlib.import_module(module)
