"""Actor and critic networks, built by one function so that both share one recurrent design."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import NamedTuple

import torch
from tensordict.nn import TensorDictModule, TensorDictSequential
from torch import nn
from torchrl.modules import MLP, IndependentNormal, ProbabilisticActor

from .action_noise import MIN_STD, BoundedNormalScale, MeanSlice, StateDependentScale
from .agents.torchrl_cfg import TorchRLActorCfg, TorchRLPolicyCfg
from .encoders import ImageFeatures, make_image_encoders
from .recurrent import FusedGRUModule, FusedLSTMModule, PaddedGRUModule, PaddedLSTMModule


@dataclass(frozen=True)
class EnvInterface:
    """What the models need to know of an environment: which observation groups the actor and the critic read,
    the concatenated size of their flat groups, the image groups' shapes and dtypes, and the action size.

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
    images: tuple[tuple[str, tuple[int, int, int], str], ...] = ()
    """The image groups among those read (``[C, H, W]`` per environment, rsl_rl's 2D groups): ``(name, shape,
    dtype)`` each; the ``*_obs_dim`` sizes count the flat groups only."""

    @classmethod
    def from_dict(cls, fields: dict) -> EnvInterface:
        """The inverse of :func:`dataclasses.asdict` after a trip through JSON or a checkpoint (lists to tuples)."""
        fields = {key: tuple(value) if isinstance(value, list) else value for key, value in fields.items()}
        fields["images"] = tuple((name, tuple(shape), dtype) for name, shape, dtype in fields.get("images", ()))
        return cls(**fields)

    def image_groups(self, role: str) -> list[tuple[str, tuple[int, int, int], str]]:
        """The image groups ``role`` (``"actor"``, ``"critic"``, ``"teacher"``) reads, in its group order."""
        images = {name: (name, shape, dtype) for name, shape, dtype in self.images}
        return [images[key] for key in getattr(self, f"{role}_obs_keys") if key in images]

    def flat_keys(self, role: str) -> tuple[str, ...]:
        """The flat (vector) groups ``role`` reads, in its group order: the normaliser's input."""
        images = {name for name, _, _ in self.images}
        return tuple(key for key in getattr(self, f"{role}_obs_keys") if key not in images)

    def __str__(self) -> str:
        symmetry = f"; {self.symmetry['copies']} symmetric copies" if self.symmetry else ""
        rnd = f"; RND reads {', '.join(self.rnd_obs_keys)} ({self.rnd_obs_dim})" if self.rnd_obs_keys else ""
        readers = [("critic", self.critic_obs_keys, self.critic_obs_dim)]
        readers.append(("teacher", self.teacher_obs_keys, self.teacher_obs_dim))
        observes = f"actor observes {', '.join(self.actor_obs_keys)} ({self.actor_obs_dim})"
        observes += "".join(f", {name} {', '.join(keys)} ({dim})" for name, keys, dim in readers if keys)
        images = "".join(f"; {name} {'x'.join(map(str, shape))} {dtype}" for name, shape, dtype in self.images)
        return f"{observes}; {self.action_dim} actions{images}{symmetry}{rnd}"

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


@dataclass(frozen=True)
class ActorParts:
    """The actor's deterministic path, as a deployed policy runs it: input normalizer (identity without
    normalisation), image encoders, recurrent layer (``nn.LSTM`` / ``nn.GRU``, or ``None``) and the MLP that
    outputs the action mean (with state-dependent noise: the actor's MLP layers followed by :class:`MeanSlice`).

    These are the actor's own submodules (one copy of the weights), named here so that export and play need not
    search the actor for them.
    """

    normalizer: nn.Module
    rnn: nn.LSTM | nn.GRU | None
    mean: nn.Module
    images: ImageFeatures | None = None
    """The image groups' encoders, whose features follow the normalised flat input (``None`` without images)."""


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
    return (PaddedLSTMModule if lstm else PaddedGRUModule)(**kwargs)


def make_actor(
    cfg: TorchRLActorCfg,
    interface: EnvInterface,
    device: torch.device | str,
    role: str = "actor",
    recurrent_module: nn.Module | None = None,
    image_encoders: nn.ModuleList | None = None,
) -> GaussianActor:
    """Builds a Gaussian actor (its config checked by :func:`~isaaclab_torchrl.agents.validation.validate_policy_cfg`).

    ``role="actor"`` reads ``interface.actor_obs_keys`` and writes ``action``, ``loc``, ``scale`` and
    ``action_log_prob``; ``role="teacher"`` (a distillation run's, beside the student in one tensordict) reads
    ``interface.teacher_obs_keys`` and writes the same keys with ``teacher_`` in front. The parameters are named
    alike either way, so that a checkpoint's actor loads into a teacher.

    With ``cfg.rnn_type`` set, the actor starts with a recurrent layer (``recurrent_module`` when it is made
    beforehand; state ``<role>_rnn_h[/_c]``); outside :func:`torchrl.modules.set_recurrent_mode` it runs step by
    step, as the collectors need, and inside it over whole trajectory slices, as the updates need. Image groups go
    through ``image_encoders`` (made beforehand, possibly shared), else through encoders made from
    ``cfg.actor_cnn_cfg`` (:mod:`isaaclab_torchrl.encoders`).
    """
    prefix = "" if role == "actor" else f"{role}_"
    if image_encoders is None:
        image_encoders = _image_encoders(cfg.actor_cnn_cfg, cfg.encoder, cfg, interface, role, device)
    layers, in_key, obs_dim, normalizer, images = _input_layers(
        interface, role, cfg.actor_obs_normalization, device, image_encoders
    )
    rnn = None
    if cfg.rnn_type is not None:
        layers.append(recurrent_module or _recurrent_module(cfg, in_key, obs_dim, f"{role}_rnn", device))
        rnn = layers[-1].lstm if cfg.rnn_type == "lstm" else layers[-1].gru
        in_key, obs_dim = f"{role}_rnn_features", cfg.rnn_hidden_size

    action_dim = interface.action_dim
    out_features = 2 * action_dim if cfg.state_dependent_std else action_dim
    mlp = make_network(cfg.actor_class_name, obs_dim, out_features, cfg.actor_hidden_dims, cfg, device)
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
    parts = ActorParts(normalizer or nn.Identity(), rnn, mean, images)
    return GaussianActor(TensorDictSequential(*layers), parts, prefix)


def make_models(cfg: TorchRLPolicyCfg, interface: EnvInterface, device: torch.device | str) -> Models:
    """Builds the Gaussian actor (:func:`make_actor`) and the value network, each with its own recurrent layer when
    ``cfg.rnn_type`` is set, made first (the actor's, then the critic's), as a seed has always initialised them;
    with image groups, their encoders before them (the actor's, then the critic's unless ``share_cnn_encoders``).

    Returns:
        ``(actor, critic)``: the actor writes ``action``, ``loc``, ``scale`` and ``action_log_prob`` and names its
        deterministic path (:class:`ActorParts`); the critic writes ``state_value``.
    """
    actor_encoders = _image_encoders(cfg.actor_cnn_cfg, cfg.encoder, cfg, interface, "actor", device)
    critic_encoders = actor_encoders
    if not cfg.share_cnn_encoders:
        critic_encoders = _image_encoders(cfg.critic_cnn_cfg, "cnn", cfg, interface, "critic", device)
    critic_layers, critic_in, critic_in_dim, _, _ = _input_layers(
        interface, "critic", cfg.critic_obs_normalization, device, critic_encoders
    )
    actor_rnn = None
    if cfg.rnn_type is not None:
        actor_in = _input_key(interface, "actor", cfg.actor_obs_normalization)
        actor_in_dim = interface.actor_obs_dim + sum(encoder.output_dim for encoder in actor_encoders or ())
        actor_rnn = _recurrent_module(cfg, actor_in, actor_in_dim, "actor_rnn", device)
        critic_layers.append(_recurrent_module(cfg, critic_in, critic_in_dim, "critic_rnn", device))
        critic_in, critic_in_dim = "critic_rnn_features", cfg.rnn_hidden_size
    actor = make_actor(cfg, interface, device, recurrent_module=actor_rnn, image_encoders=actor_encoders)
    critic_mlp = make_network(cfg.critic_class_name, critic_in_dim, 1, cfg.critic_hidden_dims, cfg, device)
    critic_layers.append(TensorDictModule(critic_mlp, in_keys=[critic_in], out_keys=["state_value"]))
    return Models(actor, TensorDictSequential(*critic_layers))


def make_network(class_name: str | None, in_features: int, out_features: int, hidden_dims, cfg, device) -> nn.Module:
    """The network after the inputs (and the recurrent layer): torchrl's MLP of ``hidden_dims`` with
    ``cfg.activation``, or ``Class(in_features, out_features, cfg)`` for a ``class_name`` ``"module:Class"`` (the
    config's ``actor_class_name`` / ``critic_class_name``)."""
    if class_name is None:
        activation = ACTIVATION_CLASSES[cfg.activation.lower()]
        return MLP(in_features, out_features, num_cells=list(hidden_dims), activation_class=activation, device=device)
    from isaaclab.utils.string import string_to_callable

    return string_to_callable(class_name)(in_features, out_features, cfg).to(device)


def _image_encoders(cnn_cfg, encoder: str, cfg, interface: EnvInterface, role: str, device) -> nn.ModuleList | None:
    """The encoders of the image groups ``role`` reads, from ``cnn_cfg`` (``None`` when it reads none)."""
    groups = interface.image_groups(role)
    if not groups:
        return None
    if cnn_cfg is None:
        names = ", ".join(name for name, _, _ in groups)
        raise ValueError(f"The {role} reads the image groups {names}: set agent.policy.{role}_cnn_cfg (a CNN).")
    return make_image_encoders(groups, cnn_cfg, encoder, cfg.init_temperature).to(device)


def _input_key(interface: EnvInterface, role: str, normalize: bool) -> str:
    """The key of a network's input that :func:`_input_layers` writes."""
    keys = interface.flat_keys(role)
    if interface.image_groups(role):
        return f"{role}_obs_encoded"
    return f"{role}_obs_normalized" if normalize else keys[0] if len(keys) == 1 else f"{role}_obs"


def _input_layers(
    interface: EnvInterface, role: str, normalize: bool, device, image_encoders: nn.ModuleList | None
) -> tuple[list, str, int, ObservationNormalizer | None, ImageFeatures | None]:
    """Modules that turn the observation groups ``role`` reads into one network input; returns them, its key, its
    size, the normalizer (``None`` without normalisation) and the image features (``None`` without images).

    One flat group is read as is; several are concatenated into ``<role>_obs``; with ``normalize``, an
    :class:`ObservationNormalizer` writes ``<role>_obs_normalized``. With image groups, :class:`ImageFeatures`
    writes ``<role>_obs_encoded``: the flat input, then each image group's features (rsl_rl's order).
    """
    keys, size = interface.flat_keys(role), getattr(interface, f"{role}_obs_dim")
    layers, key, normalizer, images = [], keys[0] if keys else None, None, None
    if len(keys) > 1:
        key = f"{role}_obs"
        layers.append(TensorDictModule(Concatenate(), in_keys=list(keys), out_keys=[key]))
    if normalize and keys:
        normalizer = ObservationNormalizer(size, device=device)
        # a key of its own per network: a teacher's or a critic's statistics differ from the actor's
        layers.append(TensorDictModule(normalizer, in_keys=[key], out_keys=[f"{role}_obs_normalized"]))
        key = f"{role}_obs_normalized"
    if image_encoders is not None:
        images = ImageFeatures(image_encoders, has_flat=bool(keys))
        in_keys = ([key] if keys else []) + [name for name, _, _ in interface.image_groups(role)]
        key, size = f"{role}_obs_encoded", size + images.output_dim
        layers.append(TensorDictModule(images, in_keys=in_keys, out_keys=[key]))
    return layers, key, size, normalizer, images


def observation_normalizers(module: nn.Module) -> list[ObservationNormalizer]:
    """The observation normalizers inside ``module`` (none when normalisation is off)."""
    return [m for m in module.modules() if isinstance(m, ObservationNormalizer)]


INTERMEDIATE_KEYS = frozenset(
    f"{role}_{name}"
    for role in ("actor", "critic", "teacher")
    for name in ("obs", "obs_normalized", "obs_encoded", "rnn_features", "output")
)
"""What the networks write on the way to their outputs (see :func:`_input_layers`): the update recomputes them."""


class CollectionPolicy(TensorDictSequential):
    """The networks the collector workers run, writing into a copy of their input instead of the input itself, and
    returning their outputs without their intermediates (:data:`INTERMEDIATE_KEYS`).

    torchrl's graphed inference (``agent.collector.cudagraph_policy``) replays a module that returns its own input
    by merging the graph's locked output into the caller's tensordict, nested entries by reference: the recurrent
    state under ``"next"`` would become the graph's locked output and the collector's next write into it would fail
    (``Cannot modify locked TensorDict``). A module that returns a new tensordict is replayed into a fresh clone.
    The collector stores every key the policy returns in the batch, so the intermediates (recurrent features,
    concatenated, normalised or encoded observations) would be carried to the learner, which recomputes them.
    """

    def __init__(self, *modules):
        super().__init__(*modules)
        self.intermediate_keys = tuple(key for key in self.out_keys if key in INTERMEDIATE_KEYS)

    def forward(self, tensordict, *args, **kwargs):
        return super().forward(tensordict.copy(), *args, **kwargs).exclude(*self.intermediate_keys)


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
