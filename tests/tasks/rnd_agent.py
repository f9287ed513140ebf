"""A Cartpole task whose torchrl agent adds random network distillation (no Isaac Lab task sets it; users do):
``--task rnd_agent:Isaac-Cartpole-Rnd-Test`` with this folder on ``PYTHONPATH``."""

import gymnasium as gym
from isaaclab.utils import configclass

from isaaclab_torchrl.agents import TorchRLPolicyCfg, TorchRLPpoCfg, TorchRLRunnerCfg
from isaaclab_torchrl.agents.torchrl_cfg import TorchRLRndCfg, TorchRLRndWeightScheduleCfg

TASK = "Isaac-Cartpole-Rnd-Test"
CARTPOLE = "isaaclab_tasks.core.cartpole"


@configclass
class RndAgentCfg(TorchRLRunnerCfg):
    experiment_name = "rnd_agent"
    num_steps_per_env = 16
    max_iterations = 5
    policy = TorchRLPolicyCfg(actor_hidden_dims=[32, 32], critic_hidden_dims=[32, 32])
    algorithm = TorchRLPpoCfg(
        num_learning_epochs=2,
        num_mini_batches=2,
        learning_rate=1e-3,
        rnd_cfg=TorchRLRndCfg(
            weight=10.0,
            weight_schedule=TorchRLRndWeightScheduleCfg(mode="step", final_step=24, final_value=0.0),
            reward_normalization=True,
            state_normalization=True,
        ),
    )


if TASK not in gym.registry:
    gym.register(
        id=TASK,
        entry_point=f"{CARTPOLE}.cartpole_direct_env:CartpoleEnv",
        disable_env_checker=True,
        kwargs={
            "env_cfg_entry_point": f"{CARTPOLE}.cartpole_direct_env_cfg:CartpoleEnvCfg",
            "isaaclab_torchrl_cfg_entry_point": f"{__name__}:RndAgentCfg",
        },
    )
