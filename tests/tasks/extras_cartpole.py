"""A Cartpole whose resets replace ``env.extras`` instead of updating it, which drops the true final observations
Isaac Lab stores there (``extras["final_obs"]``).

Used as ``--task extras_cartpole:Isaac-Cartpole-Extras-Test`` with this folder on ``PYTHONPATH``; the agent is
Cartpole's own (ported from its rsl_rl config).
"""

import gymnasium as gym
from isaaclab_tasks.core.cartpole.cartpole_direct_env import CartpoleEnv


class ExtrasReplacingCartpoleEnv(CartpoleEnv):
    def _reset_idx(self, env_ids):
        super()._reset_idx(env_ids)
        self.extras = {"log": {}}


gym.register(
    id="Isaac-Cartpole-Extras-Test",
    entry_point=f"{__name__}:ExtrasReplacingCartpoleEnv",
    disable_env_checker=True,
    kwargs={
        "env_cfg_entry_point": "isaaclab_tasks.core.cartpole.cartpole_direct_env_cfg:CartpoleEnvCfg",
        "rsl_rl_cfg_entry_point": "isaaclab_tasks.core.cartpole.agents.rsl_rl_ppo_cfg:CartpoleDirectPPORunnerCfg",
    },
)
