"""A Cartpole whose simulation "diverges": from its ``nan_after_steps``-th env step on, its rewards are NaN.

Used as ``--task nan_cartpole:Isaac-Cartpole-NaN-Test`` with this folder on ``PYTHONPATH``; the agent is
Cartpole's own (ported from its rsl_rl config).
"""

import gymnasium as gym
import torch
from isaaclab.utils import configclass
from isaaclab_tasks.core.cartpole.cartpole_direct_env import CartpoleEnv
from isaaclab_tasks.core.cartpole.cartpole_direct_env_cfg import CartpoleEnvCfg


@configclass
class NanCartpoleEnvCfg(CartpoleEnvCfg):
    nan_after_steps: int = 48
    """The first env step with NaN rewards: in the third rollout of 16 steps."""


class NanCartpoleEnv(CartpoleEnv):
    cfg: NanCartpoleEnvCfg

    def _get_rewards(self) -> torch.Tensor:
        rewards = super()._get_rewards()
        if self.common_step_counter >= self.cfg.nan_after_steps:
            rewards = torch.full_like(rewards, torch.nan)
        return rewards


gym.register(
    id="Isaac-Cartpole-NaN-Test",
    entry_point=f"{__name__}:NanCartpoleEnv",
    disable_env_checker=True,
    kwargs={
        "env_cfg_entry_point": f"{__name__}:NanCartpoleEnvCfg",
        "rsl_rl_cfg_entry_point": "isaaclab_tasks.core.cartpole.agents.rsl_rl_ppo_cfg:CartpoleDirectPPORunnerCfg",
    },
)
