"""A task of a user's own package: Isaac Lab's manager-based Cartpole with a privileged ``critic`` observation
group (asymmetric actor-critic) and only an rsl_rl agent, which the torchrl runner ports.

Used as ``--task asymmetric_cartpole:Isaac-Cartpole-Asymmetric-Test`` with this folder on ``PYTHONPATH``.
"""

import gymnasium as gym
from isaaclab.managers import ObservationGroupCfg as ObsGroup
from isaaclab.managers import ObservationTermCfg as ObsTerm
from isaaclab.utils import configclass
from isaaclab_tasks.core.cartpole import mdp
from isaaclab_tasks.core.cartpole.cartpole_manager_env_cfg import CartpoleEnvCfg, ObservationsCfg

CRITIC_OBS_DIM = 8
"""Relative and absolute joint positions and velocities of the cart and the pole."""


@configclass
class CriticCfg(ObsGroup):
    joint_pos_rel = ObsTerm(func=mdp.joint_pos_rel)
    joint_vel_rel = ObsTerm(func=mdp.joint_vel_rel)
    joint_pos = ObsTerm(func=mdp.joint_pos)
    joint_vel = ObsTerm(func=mdp.joint_vel)

    def __post_init__(self):
        self.enable_corruption = False
        self.concatenate_terms = True


@configclass
class AsymmetricObservationsCfg(ObservationsCfg):
    critic: CriticCfg = CriticCfg()


@configclass
class AsymmetricCartpoleEnvCfg(CartpoleEnvCfg):
    observations: AsymmetricObservationsCfg = AsymmetricObservationsCfg()


gym.register(
    id="Isaac-Cartpole-Asymmetric-Test",
    entry_point="isaaclab.envs:ManagerBasedRLEnv",
    disable_env_checker=True,
    kwargs={
        "env_cfg_entry_point": f"{__name__}:AsymmetricCartpoleEnvCfg",
        "rsl_rl_cfg_entry_point": "isaaclab_tasks.core.cartpole.agents.rsl_rl_ppo_cfg:CartpolePPORunnerCfg",
    },
)
