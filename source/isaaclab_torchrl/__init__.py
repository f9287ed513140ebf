"""TorchRL as an Isaac Lab training library: recurrent PPO over subprocess collectors.

Importing this package adds torchrl agent configs (``isaaclab_torchrl_cfg_entry_point`` and
``isaaclab_torchrl_lstm_cfg_entry_point``) to the Isaac Lab tasks listed in
:data:`isaaclab_torchrl.agents.TASK_AGENTS`.
"""

from .offline_assets import use_offline_assets_if_requested

use_offline_assets_if_requested()

import isaaclab_tasks  # noqa: E402, F401  (registers Isaac Lab's tasks, which the agents attach to)

from .agents import register_agents  # noqa: E402

register_agents()

__version__ = "0.1.0"
