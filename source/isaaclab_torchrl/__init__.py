"""TorchRL as an Isaac Lab training library: recurrent PPO over subprocess collectors.

Importing this package adds torchrl agent configs (``isaaclab_torchrl_cfg_entry_point`` and
``isaaclab_torchrl_lstm_cfg_entry_point``) to the registered Isaac Lab tasks (see :mod:`isaaclab_torchrl.agents`).
"""

import isaaclab_tasks  # noqa: F401  (registers Isaac Lab's tasks, which the agents attach to)

from .agents import register_agents

register_agents()

__version__ = "0.1.0"
