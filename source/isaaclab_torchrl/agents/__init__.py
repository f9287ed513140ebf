"""Agent configurations of the torchrl runner and their registration on Isaac Lab's tasks."""

import gymnasium as gym

from .torchrl_cfg import TorchRLCollectorCfg, TorchRLPolicyCfg, TorchRLPpoCfg, TorchRLRunnerCfg

ENTRY_POINT = "isaaclab_torchrl_cfg_entry_point"
"""Gym-registry key of a task's default torchrl agent (``--agent torchrl``)."""
LSTM_ENTRY_POINT = "isaaclab_torchrl_lstm_cfg_entry_point"
"""Gym-registry key of a task's recurrent (LSTM) torchrl agent (``--agent torchrl_lstm``)."""
AGENT_ALIASES = {"torchrl": ENTRY_POINT, "torchrl_lstm": LSTM_ENTRY_POINT}

# Isaac Lab's own torchrl backend reads "torchrl_cfg_entry_point"; our keys sit beside it, never replacing it.
TASK_AGENTS = {
    "Isaac-Cartpole-Direct": {
        ENTRY_POINT: f"{__name__}.cartpole:CartpoleDirectPPORunnerCfg",
        LSTM_ENTRY_POINT: f"{__name__}.cartpole:CartpoleDirectLstmPPORunnerCfg",
    },
    "Isaac-Cartpole": {
        ENTRY_POINT: f"{__name__}.cartpole:CartpolePPORunnerCfg",
        LSTM_ENTRY_POINT: f"{__name__}.cartpole:CartpoleLstmPPORunnerCfg",
    },
    "Isaac-Velocity-Flat-AnymalD": {
        ENTRY_POINT: f"{__name__}.anymal_d:AnymalDFlatPPORunnerCfg",
        LSTM_ENTRY_POINT: f"{__name__}.anymal_d:AnymalDFlatLstmPPORunnerCfg",
    },
    "Isaac-Velocity-Rough-AnymalD": {
        ENTRY_POINT: f"{__name__}.anymal_d:AnymalDRoughPPORunnerCfg",
        LSTM_ENTRY_POINT: f"{__name__}.anymal_d:AnymalDRoughLstmPPORunnerCfg",
    },
}


def register_agents() -> None:
    """Adds the torchrl agent entry points to the registered Isaac Lab tasks.

    A task that already declares one of these keys in its own ``gym.register`` kwargs keeps its value.
    """
    for task, entry_points in TASK_AGENTS.items():
        if task not in gym.registry:
            continue
        kwargs = gym.registry[task].kwargs
        for key, entry_point in entry_points.items():
            kwargs.setdefault(key, entry_point)


def agent_entry_point(agent: str) -> str:
    """Maps ``--agent`` to a registry key: an alias (``torchrl``, ``torchrl_lstm``) or an explicit key."""
    return AGENT_ALIASES.get(agent, agent)


__all__ = [
    "AGENT_ALIASES",
    "ENTRY_POINT",
    "LSTM_ENTRY_POINT",
    "TASK_AGENTS",
    "TorchRLCollectorCfg",
    "TorchRLPolicyCfg",
    "TorchRLPpoCfg",
    "TorchRLRunnerCfg",
    "agent_entry_point",
    "register_agents",
]
