"""A trained policy from a checkpoint, for play, export and a user's own script:

from isaaclab_torchrl.policy import load_policy
policy = load_policy("logs/torchrl/<experiment>/<run>/model_100.pt")
actor = policy.actor  # a torchrl module: observation groups in, action out (the mean under
                      # set_exploration_type(ExplorationType.DETERMINISTIC))
"""

from __future__ import annotations

import dataclasses

import torch
import yaml

from .agents.torchrl_cfg import TorchRLActorCfg
from .agents.validation import ConfigError, validate_policy_cfg
from .models import EnvInterface, GaussianActor, make_actor
from .runners.checkpoint import load_checkpoint


@dataclasses.dataclass
class Policy:
    """A checkpoint's actor (a distillation checkpoint's: the student) and what it was trained with."""

    actor: GaussianActor
    cfg: TorchRLActorCfg
    """The actor's config the checkpoint was trained with."""
    interface: EnvInterface
    """The observation groups and sizes the actor reads, and the action size."""
    obs_groups: dict | None
    """The runner's ``obs_groups`` the checkpoint was trained with."""
    path: str


def load_policy(path: str, device: torch.device | str = "cpu", interface: EnvInterface | None = None) -> Policy:
    """Rebuilds the actor a checkpoint of this runner was trained with, and loads its weights.

    Args:
        path: The checkpoint file.
        device: Where the actor runs.
        interface: The environment's sizes, checked against the checkpoint's (needed for checkpoints that do not
            store their sizes).

    Raises:
        ValueError: the file is not a readable checkpoint, or the checkpoint does not fit ``interface``.
    """
    checkpoint = load_checkpoint(path, map_location=device)
    trained = yaml.safe_load(checkpoint["config"])
    # fields the current config class lacks are left out, so that checkpoints of other versions load; the networks
    # step one step at a time here, where every recurrent backend computes the same with cuDNN
    fields = {field.name for field in dataclasses.fields(TorchRLActorCfg)}
    cfg = TorchRLActorCfg(**{key: value for key, value in trained["policy"].items() if key in fields})
    cfg.recurrent_backend = "pad"
    try:
        validate_policy_cfg(cfg)
    except ConfigError as exc:
        raise ValueError(f"Checkpoint {path} holds networks this version cannot build: {exc}") from None
    stored = checkpoint.get("interface")
    stored = None if stored is None else EnvInterface.from_dict(stored)
    if stored is not None and interface is not None and stored != interface:
        raise ValueError(f"Checkpoint {path} was trained on other sizes ({stored}) than this task's ({interface}).")
    interface = stored or interface
    if interface is None:
        raise ValueError(f"Checkpoint {path} does not store its sizes: pass the environment's (interface=...).")
    actor = make_actor(cfg, interface, device)
    try:
        actor.load_state_dict(checkpoint["actor"])
    except RuntimeError as exc:
        raise ValueError(f"Checkpoint {path} does not fit this task: {str(exc).splitlines()[0]}") from None
    actor.eval()
    return Policy(actor, cfg, interface, trained.get("obs_groups"), path)
