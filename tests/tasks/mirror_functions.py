"""Symmetry augmentation functions for the tests, in Isaac Lab's form ``f(env, obs, actions) -> (obs, actions)``."""

import torch


@torch.no_grad()
def clamped(env=None, obs=None, actions=None):
    """Cartpole's left-right mirror, clamped: not a column selection with signs, which the runner refuses."""
    obs_aug = actions_aug = None
    if obs is not None:
        obs_aug = torch.cat([obs, obs]) if isinstance(obs, torch.Tensor) else obs.repeat(2)
        obs_aug["policy"][obs.batch_size[0] :] = (-obs["policy"]).clamp(-0.5, 0.5)
    if actions is not None:
        actions_aug = torch.cat((actions, -actions))
    return obs_aug, actions_aug
