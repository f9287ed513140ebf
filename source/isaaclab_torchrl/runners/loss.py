"""PPO's loss: torchrl's clipped PPO loss with rsl_rl's KL of the adaptive learning rate and rsl_rl's symmetry terms.

The changes to torchrl's :class:`~torchrl.objectives.ClipPPOLoss` that the update needs, each a proposed upstream
change: the value clip a Python number (``torch.compile`` then traces the loss in one graph; a tensor coefficient
breaks it at every ``if self.clip_value:``), and the Gaussian KL written out (torch.distributions' lookup of the
formula breaks the graph too).
"""

from __future__ import annotations

import torch
from tensordict import TensorDictBase
from torchrl.objectives import ClipPPOLoss

from ..symmetry import Mirror


class ClipPPOLossWithKL(ClipPPOLoss):
    """torchrl's clipped PPO loss whose ``kl_approx`` output is rsl_rl's KL of the adaptive learning rate: the
    analytic Gaussian KL(reference || current), summed over the action dimensions and averaged over the samples.

    The reference policy's ``loc`` and ``scale`` are read from the data (the acting policy's, or lag-corrected, the
    proximal one's); the current distribution is the one the loss builds anyway, so the KL costs no extra forward
    pass. torchrl reads ``kl_approx`` for logging only.

    With a :class:`~isaaclab_torchrl.symmetry.Mirror`, it adds rsl_rl's mirror loss (``loss_symmetry``, unweighted)
    and, for minibatches that hold the mirrored copies (``augmented``), computes the entropy and the KL over the
    original samples (the first of the copies) only, as rsl_rl does; the surrogate and value losses average over
    all copies.
    """

    def __init__(self, *args, mirror: Mirror | None = None, augmented: bool = False, **kwargs):
        super().__init__(*args, **kwargs)
        self.mirror = mirror
        self.copies = mirror.copies if mirror is not None and augmented else 1
        """Copies of every sample in a minibatch (1: not augmented)."""

    def register_coeff_buffer(self, name, value, **kwargs) -> None:
        if name == "clip_value" and value is not None:
            self.clip_value = float(value)
            return
        super().register_coeff_buffer(name, value, **kwargs)

    def _originals(self, values: torch.Tensor) -> torch.Tensor:
        return values if self.copies == 1 else values[: values.shape[0] // self.copies]

    def _log_weight(self, tensordict: TensorDictBase, adv_shape: torch.Size):
        # read before the actor runs: it writes the current loc and scale into the same tensordict
        loc, scale = tensordict.get("loc"), tensordict.get("scale")
        log_weight, dist, _, log_is_weight = super()._log_weight(tensordict, adv_shape)
        current = dist.base_dist
        variance_ratio = (scale / current.scale).pow(2)
        kl = 0.5 * (variance_ratio + ((loc - current.loc) / current.scale).pow(2) - 1 - variance_ratio.log())
        return log_weight, dist, self._originals(kl.sum(-1, keepdim=True)), log_is_weight

    def _get_entropy(self, dist, adv_shape: torch.Size):
        return self._originals(super()._get_entropy(dist, adv_shape))

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        losses = super().forward(tensordict)
        if self.mirror is not None:
            obs = tensordict.select(*self.actor_network.in_keys)
            losses["loss_symmetry"] = self.mirror.mirror_loss(self.actor_network, obs, augmented=self.copies > 1)
        return losses
