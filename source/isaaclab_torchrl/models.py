"""Actor and critic networks, built by one function so that both share one recurrent design."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import NamedTuple

import torch
from tensordict.nn import AddStateIndependentNormalScale, TensorDictModule, TensorDictSequential
from tensordict.nn.utils import mappings
from torch import nn
from torchrl.modules import MLP, GRUModule, IndependentNormal, LSTMModule, ProbabilisticActor

from .agents.torchrl_cfg import TorchRLActorCfg, TorchRLPolicyCfg
from .recurrent import FusedGRUModule, FusedLSTMModule


@dataclass(frozen=True)
class EnvInterface:
    """What the models need to know of an environment: which observation groups the actor and the critic read,
    their concatenated sizes, and the action size.

    It is read from the task's environment by a short-lived probe process, or remembered from an earlier run (see
    :mod:`isaaclab_torchrl.interfaces`), never hard-coded; it is small and picklable, so that it travels to the
    collector subprocesses and into checkpoints.
    """

    actor_obs_keys: tuple[str, ...]
    actor_obs_dim: int
    critic_obs_keys: tuple[str, ...]
    critic_obs_dim: int
    action_dim: int
    rnd_obs_keys: tuple[str, ...] = ()
    """The groups random network distillation reads (none without it)."""
    rnd_obs_dim: int = 0
    teacher_obs_keys: tuple[str, ...] = ()
    """The groups a distillation run's teacher reads (none without one)."""
    teacher_obs_dim: int = 0
    step_dt: float | None = field(default=None, compare=False)
    """The task's seconds per env step (RND scales its weight by it)."""
    symmetry: dict | None = field(default=None, compare=False)
    """The task's symmetry (:func:`isaaclab_torchrl.symmetry.read_symmetry`) when the agent mirrors samples; not
    part of the sizes that are compared."""

    @classmethod
    def from_dict(cls, fields: dict) -> EnvInterface:
        """The inverse of :func:`dataclasses.asdict` after a trip through JSON or a checkpoint (lists to tuples)."""
        return cls(**{key: tuple(value) if isinstance(value, list) else value for key, value in fields.items()})

    def __str__(self) -> str:
        symmetry = f"; {self.symmetry['copies']} symmetric copies" if self.symmetry else ""
        rnd = f"; RND reads {', '.join(self.rnd_obs_keys)} ({self.rnd_obs_dim})" if self.rnd_obs_keys else ""
        readers = [("critic", self.critic_obs_keys, self.critic_obs_dim)]
        readers.append(("teacher", self.teacher_obs_keys, self.teacher_obs_dim))
        observes = f"actor observes {', '.join(self.actor_obs_keys)} ({self.actor_obs_dim})"
        observes += "".join(f", {name} {', '.join(keys)} ({dim})" for name, keys, dim in readers if keys)
        return f"{observes}; {self.action_dim} actions{symmetry}{rnd}"

    @property
    def obs_keys(self) -> tuple[str, ...]:
        """Every observation group either network reads."""
        return tuple(dict.fromkeys(self.actor_obs_keys + self.critic_obs_keys))


class Concatenate(nn.Module):
    """Joins observation groups along the feature dimension, in the order they are given."""

    def forward(self, *groups: torch.Tensor) -> torch.Tensor:
        return torch.cat(groups, dim=-1)


class ObservationNormalizer(nn.Module):
    """Running mean and variance of an input, subtracted and divided out (rsl_rl's ``EmpiricalNormalization``).

    The statistics are buffers: they travel with the weights to the collector workers, into checkpoints and
    into exported policies. Only :meth:`update` changes them; the learner calls it once per batch.
    """

    def __init__(self, size: int, eps: float = 1e-2, device=None):
        super().__init__()
        self.eps = eps
        self.register_buffer("mean", torch.zeros(size, device=device))
        self.register_buffer("var", torch.ones(size, device=device))
        self.register_buffer("count", torch.zeros((), dtype=torch.long, device=device))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.mean) / (self.var.sqrt() + self.eps)

    @torch.no_grad()
    def update(self, x: torch.Tensor) -> None:
        """Merges the statistics of the samples ``x`` (shape ``[..., size]``) into the running ones."""
        x = x.reshape(-1, x.shape[-1])
        if x.shape[0]:
            self.merge(x.shape[0], x.mean(0), x.var(0, unbiased=False))

    @torch.no_grad()
    def merge(self, count, mean: torch.Tensor, var: torch.Tensor) -> None:
        """Merges the statistics (sample count, mean, population variance) of a batch into the running ones."""
        total = self.count + count
        delta = mean - self.mean
        # Chan et al.'s parallel update of the mean and the (population) variance
        self.var.copy_((self.var * self.count + var * count + delta.square() * self.count * count / total) / total)
        self.mean.add_(delta * count / total)
        self.count.copy_(total)


ACTIVATION_CLASSES = {
    cls.__name__.lower(): cls for cls in (nn.ELU, nn.ReLU, nn.Tanh, nn.SELU, nn.LeakyReLU, nn.GELU, nn.SiLU)
}
"""The modules behind the names of :data:`isaaclab_torchrl.agents.torchrl_cfg.ACTIVATIONS`."""


MIN_STD = 1e-6
"""The floor of the action noise's standard deviation, whatever ``std_range`` says (rsl_rl's)."""


class BoundedNormalScale(AddStateIndependentNormalScale):
    """tensordict's state-independent Gaussian scale, clamped to ``[scale_lb, scale_ub]`` (rsl_rl's ``std_range``)
    instead of only from below; with ``make_param=False`` the scale is a buffer, fixed at its initial value."""

    def __init__(self, *args, scale_ub: float = math.inf, **kwargs):
        super().__init__(*args, **kwargs)
        self.scale_ub = scale_ub

    def forward(self, loc: torch.Tensor, *others: torch.Tensor) -> tuple[torch.Tensor, ...]:
        loc, scale, *others = super().forward(loc, *others)
        return loc, scale.clamp_max(self.scale_ub), *others


class StateDependentScale(nn.Module):
    """Splits the actor MLP's output into the action mean and the noise's standard deviation (rsl_rl's
    ``HeteroscedasticGaussianDistribution``): the second half is the std (``"scalar"``) or its log (``"log"``),
    clamped to ``[scale_lb, scale_ub]`` (in log space for ``"log"``)."""

    def __init__(self, action_dim: int, std_type: str, scale_lb: float, scale_ub: float):
        super().__init__()
        self.action_dim, self.std_type = action_dim, std_type
        self.scale_lb, self.scale_ub = scale_lb, scale_ub

    def forward(self, output: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        loc, std = output.split(self.action_dim, dim=-1)
        if self.std_type == "log":
            return loc, std.clamp(math.log(self.scale_lb), math.log(self.scale_ub)).exp()
        return loc, std.clamp(self.scale_lb, self.scale_ub)


class MeanSlice(nn.Module):
    """The action mean: the first ``action_dim`` outputs of a state-dependent-noise actor's MLP."""

    def __init__(self, action_dim: int):
        super().__init__()
        self.action_dim = action_dim

    def forward(self, output: torch.Tensor) -> torch.Tensor:
        return output[..., : self.action_dim]


@dataclass(frozen=True)
class ActorParts:
    """The actor's deterministic path, as a deployed policy runs it: input normalizer (identity without
    normalisation), recurrent layer (``nn.LSTM`` / ``nn.GRU``, or ``None``) and the MLP that outputs the action mean
    (with state-dependent noise: the actor's MLP layers followed by :class:`MeanSlice`).

    These are the actor's own submodules (one copy of the weights), named here so that export and play need not
    search the actor for them.
    """

    normalizer: nn.Module
    rnn: nn.LSTM | nn.GRU | None
    mean: nn.Module


class GaussianActor(ProbabilisticActor):
    """torchrl's :class:`~torchrl.modules.ProbabilisticActor` with its deterministic path named (:attr:`parts`)."""

    def __init__(self, module: TensorDictSequential, parts: ActorParts, prefix: str = ""):
        super().__init__(
            module,
            in_keys=[f"{prefix}loc", f"{prefix}scale"],
            out_keys=[f"{prefix}action"],
            distribution_class=IndependentNormal,
            return_log_prob=True,
            log_prob_key=f"{prefix}action_log_prob",
        )
        self.parts = parts  # a plain attribute: the modules are registered once, inside ``module``

    @property
    def deterministic(self) -> TensorDictSequential:
        """The actor without its sampling step: observations in, the mean (``loc``) and the std (``scale``) out."""
        return self.module[0]


class Models(NamedTuple):
    """What :func:`make_models` builds."""

    actor: GaussianActor
    critic: TensorDictSequential


def _recurrent_module(cfg: TorchRLActorCfg, in_key: str, input_size: int, name: str, device):
    """An LSTM/GRU module reading ``in_key`` and writing ``<name>_features``; its state is ``<name>_h[/_c]``."""
    lstm = cfg.rnn_type == "lstm"
    state_keys = [f"{name}_h", f"{name}_c"] if lstm else [f"{name}_h"]
    kwargs = dict(
        input_size=input_size,
        hidden_size=cfg.rnn_hidden_size,
        num_layers=cfg.rnn_num_layers,
        in_keys=[in_key, *state_keys],
        out_keys=[f"{name}_features", *(("next", key) for key in state_keys)],
        device=device,
    )
    if cfg.recurrent_backend == "fused":
        return (FusedLSTMModule if lstm else FusedGRUModule)(**kwargs)
    return (LSTMModule if lstm else GRUModule)(**kwargs, recurrent_backend="pad")


def make_actor(
    cfg: TorchRLActorCfg,
    interface: EnvInterface,
    device: torch.device | str,
    role: str = "actor",
    recurrent_module: nn.Module | None = None,
) -> GaussianActor:
    """Builds a Gaussian actor (its config checked by :func:`~isaaclab_torchrl.agents.validation.validate_policy_cfg`).

    ``role="actor"`` reads ``interface.actor_obs_keys`` and writes ``action``, ``loc``, ``scale`` and
    ``action_log_prob``; ``role="teacher"`` (a distillation run's, beside the student in one tensordict) reads
    ``interface.teacher_obs_keys`` and writes the same keys with ``teacher_`` in front. The parameters are named
    alike either way, so that a checkpoint's actor loads into a teacher.

    With ``cfg.rnn_type`` set, the actor starts with a recurrent layer (``recurrent_module`` when it is made
    beforehand; state ``<role>_rnn_h[/_c]``); outside :func:`torchrl.modules.set_recurrent_mode` it runs step by
    step, as the collectors need, and inside it over whole trajectory slices, as the updates need.
    """
    prefix = "" if role == "actor" else f"{role}_"
    obs_keys, obs_dim = getattr(interface, f"{role}_obs_keys"), getattr(interface, f"{role}_obs_dim")
    layers, in_key, normalizer = _input_layers(obs_keys, cfg.actor_obs_normalization, obs_dim, role, device)
    rnn = None
    if cfg.rnn_type is not None:
        layers.append(recurrent_module or _recurrent_module(cfg, in_key, obs_dim, f"{role}_rnn", device))
        rnn = layers[-1].lstm if cfg.rnn_type == "lstm" else layers[-1].gru
        in_key, obs_dim = f"{role}_rnn_features", cfg.rnn_hidden_size

    action_dim = interface.action_dim
    mlp = MLP(
        in_features=obs_dim,
        out_features=2 * action_dim if cfg.state_dependent_std else action_dim,
        num_cells=list(cfg.actor_hidden_dims),
        activation_class=ACTIVATION_CLASSES[cfg.activation.lower()],
        device=device,
    )
    loc, scale = f"{prefix}loc", f"{prefix}scale"
    scale_lb, scale_ub = max(float(cfg.std_range[0]), MIN_STD), float(cfg.std_range[1])
    initial_std = math.log(cfg.init_noise_std) if cfg.noise_std_type == "log" else cfg.init_noise_std
    if cfg.state_dependent_std:
        with torch.no_grad():  # the std head starts at the initial std for every input, like rsl_rl's
            mlp[-1].weight[action_dim:].zero_()
            mlp[-1].bias[action_dim:].fill_(initial_std)
        layers.append(TensorDictModule(mlp, in_keys=[in_key], out_keys=[f"{role}_output"]))
        noise = StateDependentScale(action_dim, cfg.noise_std_type, scale_lb, scale_ub)
        layers.append(TensorDictModule(noise, in_keys=[f"{role}_output"], out_keys=[loc, scale]))
        mean = nn.Sequential(*mlp, MeanSlice(action_dim))
    else:
        layers.append(TensorDictModule(mlp, in_keys=[in_key], out_keys=[loc]))
        noise = BoundedNormalScale(
            action_dim,
            scale_mapping="exp" if cfg.noise_std_type == "log" else "none",
            scale_lb=scale_lb,
            scale_ub=scale_ub,
            init_value=initial_std,
            make_param=cfg.learn_std,
            device=device,
        )
        layers.append(TensorDictModule(noise, in_keys=[loc], out_keys=[loc, scale]))
        mean = mlp
    parts = ActorParts(normalizer or nn.Identity(), rnn, mean)
    return GaussianActor(TensorDictSequential(*layers), parts, prefix)


def make_models(cfg: TorchRLPolicyCfg, interface: EnvInterface, device: torch.device | str) -> Models:
    """Builds the Gaussian actor (:func:`make_actor`) and the value network, each with its own recurrent layer when
    ``cfg.rnn_type`` is set, made first (the actor's, then the critic's), as a seed has always initialised them.

    Returns:
        ``(actor, critic)``: the actor writes ``action``, ``loc``, ``scale`` and ``action_log_prob`` and names its
        deterministic path (:class:`ActorParts`); the critic writes ``state_value``.
    """
    critic_layers, critic_in, _ = _input_layers(
        interface.critic_obs_keys, cfg.critic_obs_normalization, interface.critic_obs_dim, "critic", device
    )
    actor_rnn, critic_in_dim = None, interface.critic_obs_dim
    if cfg.rnn_type is not None:
        actor_in = _input_key(interface.actor_obs_keys, cfg.actor_obs_normalization, "actor")
        actor_rnn = _recurrent_module(cfg, actor_in, interface.actor_obs_dim, "actor_rnn", device)
        critic_layers.append(_recurrent_module(cfg, critic_in, critic_in_dim, "critic_rnn", device))
        critic_in, critic_in_dim = "critic_rnn_features", cfg.rnn_hidden_size
    actor = make_actor(cfg, interface, device, recurrent_module=actor_rnn)
    critic_mlp = MLP(
        in_features=critic_in_dim,
        out_features=1,
        num_cells=list(cfg.critic_hidden_dims),
        activation_class=ACTIVATION_CLASSES[cfg.activation.lower()],
        device=device,
    )
    critic_layers.append(TensorDictModule(critic_mlp, in_keys=[critic_in], out_keys=["state_value"]))
    return Models(actor, TensorDictSequential(*critic_layers))


def _input_key(keys: tuple[str, ...], normalize: bool, name: str) -> str:
    """The key of a network's input that :func:`_input_layers` writes."""
    return f"{name}_obs_normalized" if normalize else keys[0] if len(keys) == 1 else f"{name}_obs"


def _input_layers(
    keys: tuple[str, ...], normalize: bool, size: int, name: str, device
) -> tuple[list, str, ObservationNormalizer | None]:
    """Modules that turn the observation groups ``keys`` into one network input; returns them, its key and the
    normalizer (``None`` without normalisation).

    One group is read as is; several are concatenated into ``<name>_obs``; with ``normalize``, an
    :class:`ObservationNormalizer` writes ``<name>_obs_normalized``.
    """
    layers, key, normalizer = [], keys[0], None
    if len(keys) > 1:
        key = f"{name}_obs"
        layers.append(TensorDictModule(Concatenate(), in_keys=list(keys), out_keys=[key]))
    if normalize:
        normalizer = ObservationNormalizer(size, device=device)
        # a key of its own per network: a teacher's or a critic's statistics differ from the actor's
        layers.append(TensorDictModule(normalizer, in_keys=[key], out_keys=[_input_key(keys, normalize, name)]))
    return layers, _input_key(keys, normalize, name), normalizer


def observation_normalizers(module: nn.Module) -> list[ObservationNormalizer]:
    """The observation normalizers inside ``module`` (none when normalisation is off)."""
    return [m for m in module.modules() if isinstance(m, ObservationNormalizer)]


def noise_std(actor: nn.Module) -> torch.Tensor | None:
    """The standard deviation of the actor's Gaussian action noise, one value per action dimension; ``None`` when
    it depends on the observation (``state_dependent_std``)."""
    noise = next(m for m in actor.modules() if isinstance(m, (BoundedNormalScale, StateDependentScale)))
    if isinstance(noise, StateDependentScale):
        return None
    scale = mappings(noise.scale_mapping)(noise.state_independent_scale.detach())
    return scale.clamp(noise.scale_lb, noise.scale_ub)


class CollectionPolicy(TensorDictSequential):
    """The networks the collector workers run, writing into a copy of their input instead of the input itself.

    torchrl's graphed inference (``agent.collector.cudagraph_policy``) replays a module that returns its own input
    by merging the graph's locked output into the caller's tensordict, nested entries by reference: the recurrent
    state under ``"next"`` would become the graph's locked output and the collector's next write into it would fail
    (``Cannot modify locked TensorDict``). A module that returns a new tensordict is replayed into a fresh clone.
    """

    def forward(self, tensordict, *args, **kwargs):
        return super().forward(tensordict.copy(), *args, **kwargs)


def make_collection_policy(actor: ProbabilisticActor, critic: TensorDictSequential, cfg: TorchRLPolicyCfg):
    """The module the collector workers run: the actor, plus the critic when it is recurrent.

    A recurrent critic must see every step during collection, or its hidden state at the start of the next
    rollout would be unknown to the learner. The returned module holds the given
    networks, not copies, so the learner's weights are the ones the weight-sync scheme sends.
    """
    if cfg.rnn_type is not None:
        return CollectionPolicy(actor, critic)
    return CollectionPolicy(actor)


class CollectionPolicyFactory:
    """Picklable builder of the collection policy inside a collector subprocess: the learner's networks, built from
    the same config (the workers step the recurrent layers one step at a time, with cuDNN, whatever the backend)."""

    def __init__(self, cfg: TorchRLPolicyCfg, interface: EnvInterface, device: str):
        self.cfg = cfg
        self.interface = interface
        self.device = device

    def __call__(self):
        actor, critic = make_models(self.cfg, self.interface, self.device)
        return make_collection_policy(actor, critic, self.cfg)
