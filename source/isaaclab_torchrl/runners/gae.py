"""GAE on the collectors' batches: torchrl's shifted GAE, fed the true next observations that ``compact_obs`` drops."""

from __future__ import annotations

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase
from torchrl.modules import set_recurrent_mode
from torchrl.objectives.value import GAE

from ..envs import FINAL_OBS_KEY

CONTINUES_KEY = "continues_trajectory"
"""Marks the observations torchrl's shifted GAE inserts after a step (True) among the root ones (False)."""


class ContinuingInsertedObservations(TensorDictModuleBase):
    """A recurrent critic as torchrl's shifted GAE should run it: the next observation it inserts after a step (a
    time-out's final observation, the slice's last next observation) continues that step's trajectory, but torchrl
    0.14 gives it the step's ``is_init`` (``_call_value_net_shifted``: ``next is_init |= root is_init``), so V of a
    time-out on an episode's first step, and V(s_T) after an episode that starts on the slice's last step, would be
    computed from a fresh recurrent state. The inserted entries carry :data:`CONTINUES_KEY`; their ``is_init`` is
    cleared. Proposed upstream: no ``is_init`` from the root for the inserted entries of the shifted path
    (``docs/benchmarks.md``)."""

    def __init__(self, critic: TensorDictModuleBase):
        super().__init__()
        self.critic = critic
        self.in_keys = [*critic.in_keys, CONTINUES_KEY]
        self.out_keys = list(critic.out_keys)

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        tensordict["is_init"] = tensordict["is_init"] & ~tensordict[CONTINUES_KEY]
        return self.critic(tensordict)


class CollectedBatchGAE:
    """Advantages and value targets of a collected batch, bootstrapped with V(s_T) where an episode is cut.

    ``compact_obs`` drops the ``("next", obs)`` copies of the observations; the critic's true next observations
    come from ``("next", "final_obs")`` instead. torchrl's GAE with ``shifted=True`` runs the (recurrent) critic
    once per trajectory slice over ``[obs_0 .. obs_T-1]`` with each time-out's final observation inserted after
    it, and the observation after the slice's last step at its end: it bootstraps there with V(s_T) and never on
    terminations. The room it reserves for the inserted observations (its ``shifted_budget``) is set per batch
    from the most time-outs in one slice, so no sample is displaced.

    Args:
        critic: The value network (recurrent or not), run in recurrent mode over whole slices.
        gamma: Discount factor.
        lam: GAE's lambda.
        critic_obs_keys: The observation groups the critic reads.
    """

    def __init__(self, critic: TensorDictModuleBase, gamma: float, lam: float, critic_obs_keys: tuple[str, ...]):
        self.critic_obs_keys = critic_obs_keys
        self.recurrent = "is_init" in critic.in_keys
        if self.recurrent:
            critic = ContinuingInsertedObservations(critic)
        self._gae = GAE(gamma=gamma, lmbda=lam, value_network=critic, average_gae=False, shifted=True)

    def __call__(self, batch: TensorDictBase) -> TensorDictBase:
        """Writes ``advantage``, ``value_target`` and ``state_value`` into ``batch``.

        Args:
            batch: A collected batch laid out as ``[..., time]`` (leading dims are trajectory slices).

        Returns:
            The batch as ``[slice, time]``.
        """
        batch = batch.reshape(-1, batch.shape[-1])
        batch.names = [None, "time"]  # torchrl's GAE finds the time dimension by name
        for key in self.critic_obs_keys:
            batch["next", key] = batch["next", FINAL_OBS_KEY, key]
        if self.recurrent:
            batch[CONTINUES_KEY] = torch.zeros_like(batch["is_init"])
            batch["next", CONTINUES_KEY] = torch.ones_like(batch["is_init"])
        next_td = batch["next"]
        time_outs = (next_td["done"] & ~next_td["terminated"]).squeeze(-1)[:, :-1]
        # one host sync per batch: the budget is a shape
        self._gae.shifted_budget = int(time_outs.sum(-1).max()) + 1
        with torch.no_grad(), set_recurrent_mode(True):
            self._gae(batch)
        return batch.exclude(CONTINUES_KEY, ("next", CONTINUES_KEY)) if self.recurrent else batch
