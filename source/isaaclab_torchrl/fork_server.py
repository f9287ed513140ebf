"""The fork server's first preloaded module (:data:`isaaclab_torchrl.workers.WORKER_MODULES`), imported there only.

It has the kernel kill the server the moment the main process ends, whatever ended it; the workers forked from the
server die with it (:func:`~isaaclab_torchrl.runners.safety.init_worker`). Left to itself the server would wait
for every worker to end first, and a worker that no longer runs (stopped, or hung in the simulator) never would.
"""

from isaaclab_torchrl.workers import end_with_parent

end_with_parent()
