"""The Gaussian action noise's scale modules: state-independent (a parameter, or a fixed buffer) or read from the
actor's MLP output (rsl_rl's ``HeteroscedasticGaussianDistribution``)."""

from __future__ import annotations

import math

import torch
from tensordict.nn import AddStateIndependentNormalScale
from tensordict.nn.utils import mappings
from torch import nn

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


def noise_std(actor: nn.Module) -> torch.Tensor | None:
    """The standard deviation of the actor's Gaussian action noise, one value per action dimension; ``None`` when
    it depends on the observation (``state_dependent_std``)."""
    noise = next(m for m in actor.modules() if isinstance(m, (BoundedNormalScale, StateDependentScale)))
    if isinstance(noise, StateDependentScale):
        return None
    scale = mappings(noise.scale_mapping)(noise.state_independent_scale.detach())
    return scale.clamp(noise.scale_lb, noise.scale_ub)
