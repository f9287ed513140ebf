"""A Cartpole task whose torchrl agent config sets only what a task author cares about, leaving the networks and the
algorithm unset (``--task bare_agent:Isaac-Cartpole-Bare-Agent-Test`` with this folder on ``PYTHONPATH``)."""

import gymnasium as gym
from isaaclab.utils import configclass

from isaaclab_torchrl.agents import TorchRLRunnerCfg

TASK = "Isaac-Cartpole-Bare-Agent-Test"
CARTPOLE = "isaaclab_tasks.core.cartpole"


@configclass
class BareAgentCfg(TorchRLRunnerCfg):
    experiment_name = "bare_agent"
    num_steps_per_env = 16
    max_iterations = 5


if TASK not in gym.registry:
    gym.register(
        id=TASK,
        entry_point=f"{CARTPOLE}.cartpole_direct_env:CartpoleEnv",
        disable_env_checker=True,
        kwargs={
            "env_cfg_entry_point": f"{CARTPOLE}.cartpole_direct_env_cfg:CartpoleEnvCfg",
            "isaaclab_torchrl_cfg_entry_point": f"{__name__}:BareAgentCfg",
        },
    )
