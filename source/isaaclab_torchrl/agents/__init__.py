"""Agent configurations of the torchrl runner and their registration on Isaac Lab's tasks."""

import gymnasium as gym

from .rsl_rl_port import RSL_RL_ENTRY_POINT, UnsupportedAgentError, ported_agent, ported_entry_point
from .torchrl_cfg import TorchRLCollectorCfg, TorchRLPolicyCfg, TorchRLPpoCfg, TorchRLRunnerCfg

ENTRY_POINT = "isaaclab_torchrl_cfg_entry_point"
"""Gym-registry key of a task's default torchrl agent (``--agent torchrl``)."""
LSTM_ENTRY_POINT = "isaaclab_torchrl_lstm_cfg_entry_point"
"""Gym-registry key of a task's recurrent (LSTM) torchrl agent (``--agent torchrl_lstm``)."""
AGENT_ALIASES = {"torchrl": ENTRY_POINT, "torchrl_lstm": LSTM_ENTRY_POINT}

# Hand-written agents (also examples of a torchrl agent config for your own task). Every other task with an rsl_rl
# agent gets one ported from it (see rsl_rl_port.py). Isaac Lab's own torchrl backend reads
# "torchrl_cfg_entry_point"; our keys sit beside it, never replacing it.
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
    """Adds the torchrl agent entry points to the registered Isaac Lab tasks: the hand-written ones of
    :data:`TASK_AGENTS`, and for every other task with an rsl_rl agent, its port (MLP or as rsl_rl has it, and
    recurrent).

    A task that already declares one of these keys in its own ``gym.register`` kwargs keeps its value.
    """
    for task, spec in gym.registry.items():
        if task in TASK_AGENTS:
            entry_points = TASK_AGENTS[task]
        elif RSL_RL_ENTRY_POINT in spec.kwargs:
            entry_points = {ENTRY_POINT: ported_entry_point(task), LSTM_ENTRY_POINT: ported_entry_point(task, True)}
        else:
            continue
        for key, entry_point in entry_points.items():
            spec.kwargs.setdefault(key, entry_point)


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
    "UnsupportedAgentError",
    "agent_entry_point",
    "ported_agent",
    "register_agents",
]
