"""Symmetry augmentation and mirror loss (rsl_rl's ``Symmetry`` extension) for a learner without an environment.

rsl_rl calls the task's augmentation function ``f(env, obs, actions) -> (obs, actions)`` inside its update, with the
environment at hand. Here Isaac Lab runs only in the collector workers, so the function is read once, where an
environment is built (the probe, :mod:`isaaclab_torchrl.interfaces`), as what Isaac Lab's functions are: for each
mirrored copy, every output column is one input column times a factor (a permutation with signs). :func:`read_symmetry`
derives that form from unit inputs and checks it on random ones; a function that is not of this form is refused
with the reason. The learner applies it with :class:`Mirror` (an index and a product, exact in any precision).
"""

from __future__ import annotations

import torch
from tensordict import TensorDict, TensorDictBase

CHECK_SAMPLES = 7
"""Random samples on which a derived form is compared with the task's function."""


class SymmetryError(ValueError):
    """The task's augmentation function is not a column selection with factors, or not consistent."""


def _selection(outputs: torch.Tensor, copies: int, what: str) -> tuple[torch.Tensor, torch.Tensor]:
    """``outputs``: the function's ``[copies * (1 + size), size]`` answer to a zero row and the unit rows; returns
    the source column and the factor of every output column of every copy (``[copies, size]`` each)."""
    size = outputs.shape[-1]
    outputs = outputs.view(copies, 1 + size, size)
    offset, linear = outputs[:, 0], outputs[:, 1:] - outputs[:, :1]
    if offset.abs().max() > 0:
        raise SymmetryError(f"it adds a constant to the {what}")
    if ((linear != 0).sum(1) > 1).any():
        raise SymmetryError(f"an output column of the {what} mixes several input columns")
    index = linear.abs().argmax(1)
    scale = linear.gather(1, index.unsqueeze(1)).squeeze(1)
    identity = torch.arange(size)
    if not (torch.equal(index[0], identity) and torch.equal(scale[0], torch.ones(size))):
        raise SymmetryError(f"its first copy of the {what} is not the original (rsl_rl's convention)")
    return index, scale


def _apply(x: torch.Tensor, index: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """``x [N, size]`` -> ``[copies * N, size]``: copy ``k`` is ``x[:, index[k]] * scale[k]``, the copies one after
    the other (the layout of Isaac Lab's functions and of rsl_rl's augmented minibatches)."""
    return (x[:, index] * scale).transpose(0, 1).flatten(0, 1)


def read_symmetry(function, env, groups: dict[str, int], obs_keys: tuple[str, ...], action_dim: int) -> dict:
    """The form of the task's augmentation ``function`` over the observation groups ``obs_keys`` and the actions.

    Args:
        function: The task's ``f(env, obs, actions) -> (obs, actions)``.
        env: The Isaac Lab environment it is given (``env.unwrapped`` is the task's env).
        groups: Every observation group of the task and its size (the function receives them all, as in rsl_rl).
        obs_keys: The groups the networks read, whose form is kept.
        action_dim: The action size.

    Returns:
        ``{"copies": K, "obs": {group: {"index": [[...]] * K, "scale": [[...]] * K}}, "actions": {...}}``, plain
        lists (it is remembered with the task's sizes as JSON).

    Raises:
        SymmetryError: the function is not a column selection with factors per copy, mixes groups, or its copies
            disagree in number.
    """
    names = list(groups)
    total = sum(groups.values())
    units = torch.cat((torch.zeros(1, total), torch.eye(total)))
    obs = TensorDict(dict(zip(names, units.split(list(groups.values()), dim=1), strict=True)), batch_size=[1 + total])
    obs_out, _ = function(env=env, obs=obs, actions=None)
    copies = obs_out.batch_size[0] // (1 + total)
    if copies * (1 + total) != obs_out.batch_size[0]:
        raise SymmetryError("its observation batch is not a whole number of copies of the input")
    index, scale = _selection(torch.cat([obs_out[name] for name in names], dim=1).float(), copies, "observations")
    starts = dict(zip(names, torch.tensor([0, *groups.values()]).cumsum(0).tolist(), strict=False))
    form = {"copies": copies, "obs": {}}
    for name in obs_keys:
        start, end = starts[name], starts[name] + groups[name]
        group_index = index[:, start:end] - start
        if ((group_index < 0) | (group_index >= groups[name])).any():
            raise SymmetryError(f"the mirrored observation group {name!r} reads other groups")
        form["obs"][name] = {"index": group_index.tolist(), "scale": scale[:, start:end].tolist()}
    _, actions_out = function(env=env, obs=None, actions=torch.cat((torch.zeros(1, action_dim), torch.eye(action_dim))))
    if actions_out.shape[0] != copies * (1 + action_dim):
        raise SymmetryError(
            f"it mirrors the actions into {actions_out.shape[0] // (1 + action_dim)} copies and the "
            f"observations into {copies}"
        )
    index, scale = _selection(actions_out.float(), copies, "actions")
    form["actions"] = {"index": index.tolist(), "scale": scale.tolist()}
    _check(function, env, groups, form, action_dim)
    return form


def _check(function, env, groups: dict[str, int], form: dict, action_dim: int) -> None:
    """Compares the form with the function on random observations and actions."""
    generator = torch.Generator().manual_seed(0)
    obs = TensorDict(
        {name: torch.randn(CHECK_SAMPLES, size, generator=generator) for name, size in groups.items()},
        batch_size=[CHECK_SAMPLES],
    )
    actions = torch.randn(CHECK_SAMPLES, action_dim, generator=generator)
    obs_out, actions_out = function(env=env, obs=obs, actions=actions)
    mirror = Mirror(form, "cpu")
    expected = mirror.observations(obs.select(*form["obs"]))
    for name in form["obs"]:
        if not torch.allclose(obs_out[name].float(), expected[name], rtol=1e-5, atol=1e-6):
            raise SymmetryError(f"it does not mirror the observation group {name!r} as its unit inputs said")
    if not torch.allclose(actions_out.float(), mirror.actions(actions), rtol=1e-5, atol=1e-6):
        raise SymmetryError("it does not mirror the actions as its unit inputs said")


class Mirror:
    """The task's symmetry (the form :func:`read_symmetry` returns) on the learner's device."""

    def __init__(self, form: dict, device: torch.device | str):
        self.copies = int(form["copies"])
        self._obs = {
            name: (torch.tensor(group["index"], device=device), torch.tensor(group["scale"], device=device))
            for name, group in form["obs"].items()
        }
        self._actions = tuple(torch.tensor(form["actions"][key], device=device) for key in ("index", "scale"))

    def observations(self, obs: TensorDictBase) -> TensorDictBase:
        """``[N]`` -> ``[copies * N]``: the mirrored copies of the observation groups (the original first)."""
        return TensorDict(
            {name: _apply(obs[name], *self._obs[name]) for name in self._obs}, batch_size=[self.copies * obs.shape[0]]
        )

    def actions(self, actions: torch.Tensor) -> torch.Tensor:
        """``[N, A]`` -> ``[copies * N, A]``: the mirrored copies of the actions (the original first)."""
        return _apply(actions, *self._actions)

    def augment(self, minibatch: TensorDictBase) -> TensorDictBase:
        """rsl_rl's data augmentation of a minibatch of steps: observations and actions mirrored, every other entry
        (old log-probabilities, values, advantages, returns, the reference policy) repeated for each copy."""
        augmented = minibatch.repeat(self.copies)
        augmented.update(self.observations(minibatch))
        augmented["action"] = self.actions(minibatch["action"])
        return augmented

    def mirror_loss(self, actor, obs: TensorDictBase, augmented: bool) -> torch.Tensor:
        """rsl_rl's mirror loss: the mean squared difference between the actor's mean on the mirrored observations
        and the mirrored mean on the original ones (the latter a fixed target). ``obs`` holds the mirrored copies
        already when ``augmented``."""
        if not augmented:
            obs = self.observations(obs)
        mean = actor.get_dist_params(obs)["loc"]
        originals = mean.shape[0] // self.copies
        target = self.actions(mean[:originals]).detach()
        return torch.nn.functional.mse_loss(mean[originals:], target[originals:])
