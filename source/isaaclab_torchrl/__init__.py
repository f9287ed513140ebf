"""TorchRL as an Isaac Lab training library: recurrent PPO over subprocess collectors.

Importing this package adds torchrl agent configs (``isaaclab_torchrl_cfg_entry_point`` and
``isaaclab_torchrl_lstm_cfg_entry_point``) to the registered Isaac Lab tasks (see :mod:`isaaclab_torchrl.agents`).
With ``ISAACLAB_TORCHRL_OFFLINE_ASSETS=1`` it first points ``ISAACSIM_ASSET_ROOT`` at the vendored asset root, so
that Isaac Lab, imported here, builds its asset paths from it (:mod:`isaaclab_torchrl.offline_assets`).
"""

from .offline_assets import export_offline_root

export_offline_root()

import isaaclab_tasks  # noqa: E402, F401  (registers Isaac Lab's tasks, which the agents attach to)

from .agents import register_agents  # noqa: E402

register_agents()

__version__ = "0.1.0"
