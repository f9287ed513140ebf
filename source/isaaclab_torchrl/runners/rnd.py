"""Random network distillation (rsl_rl's ``RandomNetworkDistillation``) for a learner that receives whole batches.

rsl_rl computes the intrinsic reward of each env step as it is collected, from the observation the step returned.
Here the learner adds it to the batch's rewards before GAE, step by step in the batch's time order, which keeps
rsl_rl's sequential rules (the weight schedule counts env steps; the reward normalisation divides by the running
std of a per-environment discounted sum). The state a step reached is its true next observation
(``("next", "final_obs")``), so an episode's last step is rated on its final state, where rsl_rl takes the next
episode's first. The predictor is trained on every minibatch with its own Adam, like rsl_rl's.
"""

from __future__ import annotations

import torch
from tensordict import TensorDictBase
from torch import nn
from torchrl.modules import MLP

from ..agents.torchrl_cfg import TorchRLRndCfg
from ..models import ACTIVATION_CLASSES, ObservationNormalizer

UNTIL = int(1e8)
"""Samples after which RND's normalisers stop learning (rsl_rl's ``until``)."""


class RunningNormalizer(ObservationNormalizer):
    """rsl_rl's ``EmpiricalNormalization`` with ``until``: the observation normaliser's running statistics (the same
    update), learned until :data:`UNTIL` samples; without a host sync, so that it can run at every step."""

    @property
    def std(self) -> torch.Tensor:
        return self.var.sqrt()

    @torch.no_grad()
    def update(self, x: torch.Tensor) -> None:
        learning = self.count < UNTIL
        before = [self.mean.clone(), self.var.clone(), self.count.clone()]
        super().update(x)
        for statistic, old in zip((self.mean, self.var, self.count), before, strict=True):
            statistic.copy_(torch.where(learning, statistic, old))


class RandomNetworkDistillation(nn.Module):
    """The predictor, the fixed target, their input's normaliser and the intrinsic reward's normalisation.

    Args:
        cfg: The RND config.
        obs_keys: The observation groups it reads (concatenated).
        obs_dim: Their total size.
        step_dt: The task's seconds per env step (the weight is multiplied by it, as in rsl_rl).
        device: Where the networks live.
    """

    def __init__(self, cfg: TorchRLRndCfg, obs_keys: tuple[str, ...], obs_dim: int, step_dt: float, device):
        super().__init__()
        self.cfg, self.obs_keys = cfg, obs_keys
        self.initial_weight = cfg.weight * step_dt
        self.weight = self.initial_weight
        self.gamma = 0.99
        """Discount of the reward normalisation's running sum (rsl_rl's, not the algorithm's)."""

        def mlp(hidden: list[int]) -> MLP:
            sizes = [obs_dim if size == -1 else size for size in hidden]
            return MLP(
                obs_dim, cfg.num_outputs, num_cells=sizes, activation_class=ACTIVATION_CLASSES["elu"], device=device
            )

        self.predictor = mlp(cfg.predictor_hidden_dims)
        self.target = mlp(cfg.target_hidden_dims).requires_grad_(False)
        self.state_normalizer = RunningNormalizer(obs_dim, device=device) if cfg.state_normalization else None
        self.reward_normalizer = RunningNormalizer(1, device=device) if cfg.reward_normalization else None
        self.discounted_sum: torch.Tensor | None = None
        """Per environment, the discounted sum of its intrinsic rewards (reward normalisation; not saved, as in
        rsl_rl)."""
        self.register_buffer("steps", torch.zeros((), dtype=torch.long, device=device))
        """Env steps (of one environment) rated so far: the weight schedule's clock (saved in checkpoints, so that a
        resumed run continues its schedule)."""

    def state(self, obs: TensorDictBase) -> torch.Tensor:
        """The normalised input: the groups of :attr:`obs_keys`, concatenated."""
        state = torch.cat([obs[key] for key in self.obs_keys], dim=-1)
        return state if self.state_normalizer is None else self.state_normalizer(state)

    def loss(self, obs: TensorDictBase) -> torch.Tensor:
        """The predictor's mean squared error against the target on the observations ``obs``."""
        with torch.no_grad():
            state = self.state(obs)
            target = self.target(state)
        return nn.functional.mse_loss(self.predictor(state), target)

    @torch.no_grad()
    def intrinsic_rewards(self, next_obs: TensorDictBase) -> torch.Tensor:
        """The weighted intrinsic reward of every step of a ``[envs, time]`` batch, from the states the steps reached
        (``[envs, time, 1]``); advances the weight schedule by ``time`` steps."""
        state = self.state(next_obs)
        error = torch.linalg.vector_norm(self.target(state) - self.predictor(state), dim=-1)
        rewards = []
        for t in range(error.shape[1]):
            reward = error[:, t]
            if self.reward_normalizer is not None:
                if self.discounted_sum is None or self.discounted_sum.shape != reward.shape:
                    self.discounted_sum = reward.clone()
                else:
                    self.discounted_sum = self.discounted_sum * self.gamma + reward
                self.reward_normalizer.update(self.discounted_sum.unsqueeze(-1))
                std = self.reward_normalizer.std
                reward = torch.where(std > 0, reward / std, reward)
            self.steps += 1
            self.weight = self._scheduled_weight(int(self.steps))
            rewards.append(reward * self.weight)
        return torch.stack(rewards, dim=1).unsqueeze(-1)

    def _scheduled_weight(self, step: int) -> float:
        schedule = self.cfg.weight_schedule
        if schedule is None or schedule.mode == "constant":
            return self.initial_weight
        if schedule.mode == "step":
            return self.initial_weight if step < schedule.final_step else schedule.final_value
        if step < schedule.initial_step:
            return self.initial_weight
        if step > schedule.final_step:
            return schedule.final_value
        progress = (step - schedule.initial_step) / (schedule.final_step - schedule.initial_step)
        return self.initial_weight + (schedule.final_value - self.initial_weight) * progress

    def update_normalization(self, obs: TensorDictBase) -> None:
        """Merges the batch's observations into the input normaliser's statistics (after the epochs, as rsl_rl)."""
        if self.state_normalizer is not None:
            self.state_normalizer.update(torch.cat([obs[key] for key in self.obs_keys], dim=-1))


__all__ = ["RandomNetworkDistillation"]
