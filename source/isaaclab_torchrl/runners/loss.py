"""PPO's loss: torchrl's clipped PPO loss with rsl_rl's KL of the adaptive learning rate and rsl_rl's symmetry terms.

The changes to torchrl's :class:`~torchrl.objectives.ClipPPOLoss` that the update needs, each a proposed upstream
change: the coefficients Python numbers (``torch.compile`` then traces the loss in one graph, where a tensor value
clip breaks it at every ``if self.clip_value:``, and bakes them into the kernels, where tensors on the CPU, as a CUDA
graph needs its host-side branches, put CPU work into a GPU graph), the Gaussian KL written out
(torch.distributions' lookup of the formula breaks the graph too), and no statistics that nothing reads (an option to
leave out the logged ones; the measured cost is in ``docs/benchmarks.md``).
"""

from __future__ import annotations

import math

import torch
from tensordict import TensorDict, TensorDictBase
from torchrl.objectives import ClipPPOLoss

from ..paired_recurrence import pair
from ..symmetry import Mirror


def make_loss(actor, critic, algo, mirror: Mirror | None, augmented: bool) -> ClipPPOLossWithKL:
    """PPO's loss of ``algo`` (:class:`~isaaclab_torchrl.agents.TorchRLPpoCfg`) on the networks themselves; a fused-LSTM
    actor and critic run their recurrent layers together (:mod:`isaaclab_torchrl.paired_recurrence`), except with a
    symmetry mirror, whose loss runs the whole actor."""
    recurrence, loss_actor, loss_critic = (None if mirror is not None else pair(actor, critic)) or (None, actor, critic)
    return ClipPPOLossWithKL(
        loss_actor,
        loss_critic,
        recurrence=recurrence,
        clip_epsilon=algo.clip_param,
        entropy_coeff=algo.entropy_coef,
        critic_coeff=algo.value_loss_coef,
        loss_critic_type="l2",
        clip_value=algo.clip_param if algo.use_clipped_value_loss else None,
        normalize_advantage=False,
        log_explained_variance=False,  # not logged
        # the networks themselves, not functional copies of their parameters swapped in at every call
        functional=False,
        mirror=mirror,
        augmented=augmented,
    )


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

    COEFFICIENTS = frozenset(("clip_value", "entropy_coeff", "critic_coeff"))
    """torchrl's coefficient buffers that this loss keeps as Python numbers."""

    def __init__(
        self,
        *args,
        clip_epsilon: float,
        mirror: Mirror | None = None,
        augmented: bool = False,
        recurrence: torch.nn.Module | None = None,
        **kwargs,
    ):
        super().__init__(*args, clip_epsilon=clip_epsilon, **kwargs)
        self.recurrence = recurrence
        """What runs the networks' recurrent layers before their heads (the networks given are then the heads)."""
        self.clip_bounds = (math.log1p(-clip_epsilon), math.log1p(clip_epsilon))
        """The clip of the log-ratio (torchrl's ``_clip_bounds``, from its ``clip_epsilon`` buffer)."""
        self.mirror = mirror
        self.copies = mirror.copies if mirror is not None and augmented else 1
        """Copies of every sample in a minibatch (1: not augmented)."""

    def minibatch_keys(self) -> list:
        """What the loss reads of a minibatch, sorted (torchrl lists ``in_keys`` from a set, in an order that varies
        per process, and the order is part of inductor's cache key): the networks' inputs but the next step's, the
        reference policy's ``loc`` and ``scale`` (the KL of the adaptive learning rate), and the advantage, value
        target and value; with the paired recurrence, what it reads instead of what it writes."""
        keys = set(self.in_keys)
        if self.recurrence is not None:
            keys = (keys - set(self.recurrence.out_keys)) | set(self.recurrence.in_keys)
        keys = [key for key in sorted(keys, key=str) if not (isinstance(key, tuple) and key[0] == "next")]
        return keys + [key for key in ("loc", "scale", "advantage", "value_target", "state_value") if key not in keys]

    def register_coeff_buffer(self, name, value, **kwargs) -> None:
        if name in self.COEFFICIENTS and value is not None:
            setattr(self, name, float(value))
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
        # the actor's Gaussian has its entropy in closed form: torchrl's check that it is finite (a host sync per
        # minibatch) and, while compiling, the Monte Carlo estimate it draws beside it (a sample and its
        # log-probability per minibatch, used only where the closed form is not finite) are left out
        return self._originals(dist.entropy().unsqueeze(-1))

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        # torchrl's ClipPPOLoss.forward less what nothing reads: the effective sample size, the clip fraction and the
        # ratios' mean and maximum, logged by torchrl's trainers (a third of the operators of a CPU minibatch's losses)
        tensordict = tensordict.clone(False)  # the networks write into it; every epoch reads the same minibatch
        if self.recurrence is not None:
            self.recurrence(tensordict)
        advantage = tensordict.get(self.tensor_keys.advantage)
        # no importance weight of torchrl's (its delayed actor and ratio cap are off): the lag correction weights
        # the advantages itself (PPO.update)
        log_weight, dist, kl, _ = self._log_weight(tensordict, adv_shape=advantage.shape[:-1])
        clipped = log_weight.clamp(*self.clip_bounds)
        gain = torch.minimum(log_weight.exp() * advantage, clipped.exp() * advantage)
        entropy = self._get_entropy(dist, advantage.shape[:-1])
        loss_critic, _, _ = self.loss_critic(tensordict)
        losses = TensorDict(
            loss_objective=self._reduce_loss(-gain, tensordict).squeeze(-1),
            loss_critic=self._reduce_loss(loss_critic, tensordict).squeeze(-1),
            loss_entropy=self._reduce_loss(self._weighted_loss_entropy(entropy), tensordict).squeeze(-1),
            entropy=entropy.detach().mean(),
            kl_approx=kl.detach().mean(),
        )
        if self.mirror is not None:
            obs = tensordict.select(*self.actor_network.in_keys)
            losses["loss_symmetry"] = self.mirror.mirror_loss(self.actor_network, obs, augmented=self.copies > 1)
        return losses
