"""An rsl_rl checkpoint as a distillation run's teacher: the actor of an rsl_rl 5 checkpoint (``actor_state_dict`` of
an ``MLPModel`` or an ``RNNModel``, as ``OnPolicyRunner.save`` writes it) in this runner's actor of
``agent.teacher``, layer by layer: the MLP's linear layers in order, the LSTM/GRU, the observation normaliser.

What the weights cannot tell, the activation, must be ``agent.teacher``'s; the weights' shapes are checked."""

from __future__ import annotations

import torch
from torch import nn

from ..agents.torchrl_cfg import TorchRLActorCfg
from ..models import EnvInterface, make_actor, observation_normalizers

RSL_RL_ACTOR_KEY = "rsl_rl_actor"
"""Where :func:`~isaaclab_torchrl.runners.checkpoint.load_checkpoint` puts an rsl_rl checkpoint's actor."""


def is_rsl_rl_checkpoint(state) -> bool:
    """Whether ``state`` (a loaded file) is a checkpoint of rsl_rl's ``OnPolicyRunner``."""
    return isinstance(state, dict) and {"actor_state_dict", "iter"} <= set(state)


def rsl_rl_actor_state(actor_state: dict, cfg: TorchRLActorCfg, interface: EnvInterface) -> dict:
    """The ``state_dict`` of the teacher of ``cfg`` and ``interface`` with the weights of rsl_rl's actor.

    Raises:
        ValueError: rsl_rl's actor has other layers, sizes or normalisation than ``cfg`` and ``interface``.
    """
    teacher = make_actor(cfg, interface, "cpu", role="teacher")
    linears = [module for module in teacher.parts.mean.modules() if isinstance(module, nn.Linear)]
    indices = sorted({int(key.split(".")[1]) for key in actor_state if key.startswith("mlp.")})
    if len(indices) != len(linears):
        raise ValueError(f"the rsl_rl actor's MLP has {len(indices)} linear layers, agent.teacher's {len(linears)}")
    normalizers = observation_normalizers(teacher)
    if bool(normalizers) != ("obs_normalizer._mean" in actor_state):
        raise ValueError("the rsl_rl actor's observation normalisation is not agent.teacher.actor_obs_normalization")
    rnn_state = {key.removeprefix("rnn.rnn."): value for key, value in actor_state.items() if key.startswith("rnn.")}
    if bool(rnn_state) != (teacher.parts.rnn is not None):
        raise ValueError("the rsl_rl actor's recurrent layer is not agent.teacher's")
    for linear, index in zip(linears, indices, strict=True):
        _copy(linear.weight, actor_state[f"mlp.{index}.weight"], f"mlp.{index}.weight")
        _copy(linear.bias, actor_state[f"mlp.{index}.bias"], f"mlp.{index}.bias")
    for name, value in rnn_state.items():
        _copy(teacher.parts.rnn.get_parameter(name), value, f"rnn.rnn.{name}")
    for normalizer in normalizers:  # rsl_rl's (x - mean) / (std + eps), with the same eps
        _copy(normalizer.mean, actor_state["obs_normalizer._mean"].reshape(-1), "obs_normalizer._mean")
        _copy(normalizer.var, actor_state["obs_normalizer._std"].reshape(-1).square(), "obs_normalizer._std")
        _copy(normalizer.count, actor_state["obs_normalizer.count"], "obs_normalizer.count")
    return teacher.state_dict()


def _copy(target: torch.Tensor, value: torch.Tensor, name: str) -> None:
    if target.shape != value.shape:
        raise ValueError(
            f"the rsl_rl actor's {name} has the shape {list(value.shape)}, agent.teacher's {list(target.shape)}"
        )
    with torch.no_grad():
        target.copy_(value)
