"""Agent configurations of the torchrl runner and their registration on Isaac Lab's tasks."""

import gymnasium as gym

from .rsl_rl_distillation_port import RSL_RL_DISTILLATION_ENTRY_POINT, RSL_RL_DISTILLATION_RECURRENT_ENTRY_POINT
from .rsl_rl_port import (
    RSL_RL_ENTRY_POINT,
    RSL_RL_SYMMETRY_ENTRY_POINT,
    UnsupportedAgentError,
    ported_agent,
    ported_entry_point,
)
from .torchrl_cfg import (
    TorchRLActorCfg,
    TorchRLCNNCfg,
    TorchRLCollectorCfg,
    TorchRLDistillationCfg,
    TorchRLDistillationRunnerCfg,
    TorchRLPolicyCfg,
    TorchRLPpoCfg,
    TorchRLRunnerCfg,
    TorchRLSymmetryCfg,
)

ENTRY_POINT = "isaaclab_torchrl_cfg_entry_point"
"""Gym-registry key of a task's default torchrl agent (``--agent torchrl``)."""
LSTM_ENTRY_POINT = "isaaclab_torchrl_lstm_cfg_entry_point"
"""Gym-registry key of a task's recurrent (LSTM) torchrl agent (``--agent torchrl_lstm``)."""
SYMMETRY_ENTRY_POINT = "isaaclab_torchrl_symmetry_cfg_entry_point"
"""Gym-registry key of a task's torchrl agent with symmetry augmentation (``--agent torchrl_symmetry``), for the
tasks whose rsl_rl agent has one."""
DISTILLATION_ENTRY_POINT = "isaaclab_torchrl_distillation_cfg_entry_point"
"""Gym-registry key of a task's student-teacher distillation agent (``--agent torchrl_distillation``), for the tasks
whose rsl_rl agents include one (``rsl_rl_distillation_cfg_entry_point``)."""
DISTILLATION_LSTM_ENTRY_POINT = "isaaclab_torchrl_distillation_lstm_cfg_entry_point"
"""Gym-registry key of a task's distillation agent with recurrent networks (``--agent torchrl_distillation_lstm``),
ported from ``rsl_rl_distillation_recurrent_cfg_entry_point``."""
AGENT_ALIASES = {
    "torchrl": ENTRY_POINT,
    "torchrl_lstm": LSTM_ENTRY_POINT,
    "torchrl_symmetry": SYMMETRY_ENTRY_POINT,
    "torchrl_distillation": DISTILLATION_ENTRY_POINT,
    "torchrl_distillation_lstm": DISTILLATION_LSTM_ENTRY_POINT,
}

# Every task with an rsl_rl agent gets its port (see rsl_rl_port.py); these tasks get a variant of it, so that only
# what differs is written here and the rest cannot drift from the rsl_rl config. Isaac Lab's own torchrl backend
# reads "torchrl_cfg_entry_point"; our keys sit beside it, never replacing it.
TASK_AGENTS = {
    # Cartpole's four observations need no LSTM of 256 units; 32 keep the recurrent learning test fast on 2 CPUs
    task: {LSTM_ENTRY_POINT: ported_entry_point(task, recurrent=True, rnn_hidden_size=32)}
    for task in ("Isaac-Cartpole-Direct", "Isaac-Cartpole")
}


def register_agents() -> None:
    """Adds the torchrl agent entry points to every registered task with an rsl_rl agent: its port (MLP, or
    recurrent as rsl_rl has it) and a recurrent one, or the variant of :data:`TASK_AGENTS`; and the ports of its
    rsl_rl agent with symmetry augmentation and of its distillation agents (MLP, recurrent) where it has them.

    A task that already declares one of these keys in its own ``gym.register`` kwargs keeps its value.
    """
    for task, spec in gym.registry.items():
        if RSL_RL_ENTRY_POINT not in spec.kwargs:
            continue
        entry_points = {ENTRY_POINT: ported_entry_point(task), LSTM_ENTRY_POINT: ported_entry_point(task, True)}
        if RSL_RL_SYMMETRY_ENTRY_POINT in spec.kwargs:
            entry_points[SYMMETRY_ENTRY_POINT] = ported_entry_point(task, symmetry=True)
        if RSL_RL_DISTILLATION_ENTRY_POINT in spec.kwargs:
            entry_points[DISTILLATION_ENTRY_POINT] = ported_entry_point(task, distillation=True)
        if RSL_RL_DISTILLATION_RECURRENT_ENTRY_POINT in spec.kwargs:
            entry_points[DISTILLATION_LSTM_ENTRY_POINT] = ported_entry_point(task, True, distillation=True)
        entry_points.update(TASK_AGENTS.get(task, {}))
        for key, entry_point in entry_points.items():
            spec.kwargs.setdefault(key, entry_point)


def agent_entry_point(agent: str) -> str:
    """Maps ``--agent`` to a registry key: an alias (:data:`AGENT_ALIASES`) or an explicit key."""
    return AGENT_ALIASES.get(agent, agent)


__all__ = [
    "AGENT_ALIASES",
    "DISTILLATION_ENTRY_POINT",
    "DISTILLATION_LSTM_ENTRY_POINT",
    "ENTRY_POINT",
    "LSTM_ENTRY_POINT",
    "SYMMETRY_ENTRY_POINT",
    "TASK_AGENTS",
    "TorchRLActorCfg",
    "TorchRLCNNCfg",
    "TorchRLCollectorCfg",
    "TorchRLDistillationCfg",
    "TorchRLDistillationRunnerCfg",
    "TorchRLPolicyCfg",
    "TorchRLPpoCfg",
    "TorchRLRunnerCfg",
    "TorchRLSymmetryCfg",
    "UnsupportedAgentError",
    "agent_entry_point",
    "ported_agent",
    "register_agents",
]
