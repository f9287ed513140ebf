"""What the workers' fork server imports before it forks a worker (``scripts/train.py`` preloads this module alone,
and only there): the package (torch, Isaac Lab, its task configs), then
:data:`~isaaclab_torchrl.workers.WORKER_MODULES`.

Once the package is imported it has the kernel kill the server the moment the main process ends, whatever ended it;
the workers forked from the server die with it (:func:`~isaaclab_torchrl.runners.safety.init_worker`). Left to
itself the server would wait for every worker to end first, and a worker that no longer runs (stopped, or hung in
the simulator) never would.
"""

import importlib

from isaaclab_torchrl.workers import WORKER_MODULES, end_with_parent

end_with_parent()
for module in WORKER_MODULES:
    importlib.import_module(module)
