"""A task that exists only once a callback registered it: ``--external_callback callback_tasks.register`` with this
folder on ``PYTHONPATH`` (importing the module registers nothing). The agent is Cartpole's, ported from rsl_rl."""

import gymnasium as gym

TASK = "Isaac-Cartpole-Callback-Test"
CARTPOLE = "isaaclab_tasks.core.cartpole"


def register() -> None:
    if TASK not in gym.registry:
        gym.register(
            id=TASK,
            entry_point=f"{CARTPOLE}.cartpole_direct_env:CartpoleEnv",
            disable_env_checker=True,
            kwargs={
                "env_cfg_entry_point": f"{CARTPOLE}.cartpole_direct_env_cfg:CartpoleEnvCfg",
                "rsl_rl_cfg_entry_point": f"{CARTPOLE}.agents.rsl_rl_ppo_cfg:CartpoleDirectPPORunnerCfg",
            },
        )
