"""Actor and critic networks, built by one function so that both share one recurrent design."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from tensordict.nn import AddStateIndependentNormalScale, TensorDictModule, TensorDictSequential
from torch import nn
from torchrl.modules import MLP, GRUModule, IndependentNormal, LSTMModule, ProbabilisticActor

from .agents.torchrl_cfg import TorchRLPolicyCfg

RNN_TYPES = ("lstm", "gru")
RECURRENT_BACKENDS = ("pad", "scan", "triton")


@dataclass(frozen=True)
class EnvInterface:
    """What the models need to know of an environment: observation sizes and the action size.

    It is read from a collector worker's environment (see :func:`isaaclab_torchrl.envs.probe_env_interface`),
    never hard-coded, and it is small and picklable so that it can travel to the collector subprocesses.
    """

    actor_obs_key: str
    actor_obs_dim: int
    critic_obs_key: str
    critic_obs_dim: int
    action_dim: int


def _activation(name: str) -> type[nn.Module]:
    classes = {cls.__name__.lower(): cls for cls in (nn.ELU, nn.ReLU, nn.Tanh, nn.SELU, nn.LeakyReLU, nn.GELU, nn.SiLU)}
    try:
        return classes[name.lower()]
    except KeyError:
        raise ValueError(
            f"agent.policy.activation={name!r} is not supported; choose one of {sorted(classes)}."
        ) from None


def _recurrent_module(cfg: TorchRLPolicyCfg, in_key: str, input_size: int, name: str, backend: str, device):
    """An LSTM/GRU module reading ``in_key`` and writing ``<name>_features``; its state is ``<name>_h[/_c]``."""
    if cfg.rnn_type == "lstm":
        return LSTMModule(
            input_size=input_size,
            hidden_size=cfg.rnn_hidden_size,
            num_layers=cfg.rnn_num_layers,
            recurrent_backend=backend,
            in_keys=[in_key, f"{name}_h", f"{name}_c"],
            out_keys=[f"{name}_features", ("next", f"{name}_h"), ("next", f"{name}_c")],
            device=device,
        )
    return GRUModule(
        input_size=input_size,
        hidden_size=cfg.rnn_hidden_size,
        num_layers=cfg.rnn_num_layers,
        recurrent_backend=backend,
        in_keys=[in_key, f"{name}_h"],
        out_keys=[f"{name}_features", ("next", f"{name}_h")],
        device=device,
    )


def make_models(
    cfg: TorchRLPolicyCfg, interface: EnvInterface, device: torch.device | str, recurrent_backend: str = "pad"
) -> tuple[ProbabilisticActor, TensorDictSequential]:
    """Builds the Gaussian actor and the value network.

    With ``cfg.rnn_type`` set, each network starts with a recurrent layer (one shared layer when
    ``cfg.share_rnn``); outside :func:`torchrl.modules.set_recurrent_mode` they run step by step, as the
    collectors need, and inside it over whole trajectory slices, as PPO's update and GAE need.

    Returns:
        ``(actor, critic)``: the actor writes ``action``, ``loc``, ``scale`` and ``action_log_prob``;
        the critic writes ``state_value``.
    """
    if cfg.rnn_type is not None and cfg.rnn_type not in RNN_TYPES:
        raise ValueError(f"agent.policy.rnn_type={cfg.rnn_type!r} is not supported; choose one of {RNN_TYPES} or None.")
    if recurrent_backend not in RECURRENT_BACKENDS:
        raise ValueError(
            f"agent.collector.recurrent_backend={recurrent_backend!r} is not supported; "
            f"choose one of {RECURRENT_BACKENDS}."
        )
    activation = _activation(cfg.activation)
    actor_layers, critic_layers = [], []
    actor_in, actor_in_dim = interface.actor_obs_key, interface.actor_obs_dim
    critic_in, critic_in_dim = interface.critic_obs_key, interface.critic_obs_dim
    if cfg.rnn_type is not None:
        actor_rnn = _recurrent_module(cfg, actor_in, actor_in_dim, "actor_rnn", recurrent_backend, device)
        actor_layers.append(actor_rnn)
        if cfg.share_rnn:
            critic_layers.append(actor_rnn)
            critic_in = "actor_rnn_features"
        else:
            critic_layers.append(
                _recurrent_module(cfg, critic_in, critic_in_dim, "critic_rnn", recurrent_backend, device)
            )
            critic_in = "critic_rnn_features"
        actor_in = "actor_rnn_features"
        actor_in_dim = critic_in_dim = cfg.rnn_hidden_size

    actor_mlp = MLP(
        in_features=actor_in_dim,
        out_features=interface.action_dim,
        num_cells=list(cfg.actor_hidden_dims),
        activation_class=activation,
        device=device,
    )
    actor_layers.append(TensorDictModule(actor_mlp, in_keys=[actor_in], out_keys=["loc"]))
    noise = AddStateIndependentNormalScale(
        interface.action_dim, scale_mapping="exp", init_value=math.log(cfg.init_noise_std), device=device
    )
    actor_layers.append(TensorDictModule(noise, in_keys=["loc"], out_keys=["loc", "scale"]))
    actor = ProbabilisticActor(
        TensorDictSequential(*actor_layers),
        in_keys=["loc", "scale"],
        out_keys=["action"],
        distribution_class=IndependentNormal,
        return_log_prob=True,
    )

    critic_mlp = MLP(
        in_features=critic_in_dim,
        out_features=1,
        num_cells=list(cfg.critic_hidden_dims),
        activation_class=activation,
        device=device,
    )
    critic_layers.append(TensorDictModule(critic_mlp, in_keys=[critic_in], out_keys=["state_value"]))
    critic = TensorDictSequential(*critic_layers)
    return actor, critic


def make_collection_policy(actor: ProbabilisticActor, critic: TensorDictSequential, cfg: TorchRLPolicyCfg):
    """The module the collector workers run: the actor, plus the critic when it has a recurrent state of its own.

    A critic with its own recurrent layer must see every step during collection, or its hidden state at the
    start of the next rollout would be unknown to the learner. The returned module holds the given
    networks, not copies, so the learner's weights are the ones the weight-sync scheme sends.
    """
    if cfg.rnn_type is not None and not cfg.share_rnn:
        return TensorDictSequential(actor, critic)
    return actor


class CollectionPolicyFactory:
    """Picklable builder of the collection policy inside a collector subprocess."""

    def __init__(self, cfg: TorchRLPolicyCfg, interface: EnvInterface, device: str):
        self.cfg = cfg
        self.interface = interface
        self.device = device

    def __call__(self):
        actor, critic = make_models(self.cfg, self.interface, self.device)
        return make_collection_policy(actor, critic, self.cfg)
