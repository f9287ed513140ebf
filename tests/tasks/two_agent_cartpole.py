"""A two-agent Cartpole (``DirectMARLEnv``), the stand-in for Isaac Lab's multi-agent tasks, whose assets are not
here: ``--task two_agent_cartpole:Isaac-Cartpole-Two-Agent-Test`` with this folder on ``PYTHONPATH``.

The ``cart`` agent observes the cart's position and velocity, the ``pole`` agent the pole's angle and velocity;
each pushes the cart, the force being the sum of their actions, and each receives half of Cartpole's reward.
Isaac Lab's single-agent conversion makes it a task of 4 observations (the cart's, then the pole's), 2 actions and
Cartpole's reward (the sum of the agents'). The initial states, rewards and agent are Isaac-Cartpole-Direct's."""

from __future__ import annotations

import gymnasium as gym
import torch
from isaaclab.envs import DirectMARLEnv, DirectMARLEnvCfg
from isaaclab.utils import configclass
from isaaclab.utils.math import sample_uniform
from isaaclab_tasks.core.cartpole.cartpole_direct_env import compute_rewards
from isaaclab_tasks.core.cartpole.cartpole_direct_env_cfg import CartpoleEnvCfg

from isaaclab_torchrl.agents import TorchRLPolicyCfg, TorchRLPpoCfg, TorchRLRunnerCfg

TASK = "Isaac-Cartpole-Two-Agent-Test"
CARTPOLE = CartpoleEnvCfg()


@configclass
class TwoAgentCartpoleEnvCfg(DirectMARLEnvCfg):
    decimation = CARTPOLE.decimation
    episode_length_s = CARTPOLE.episode_length_s
    possible_agents = ["cart", "pole"]
    action_spaces = {"cart": 1, "pole": 1}
    observation_spaces = {"cart": 2, "pole": 2}
    state_space = -1
    sim = CARTPOLE.sim
    scene = CARTPOLE.scene
    action_scale = CARTPOLE.action_scale / 2


class TwoAgentCartpoleEnv(DirectMARLEnv):
    cfg: TwoAgentCartpoleEnvCfg

    def __init__(self, cfg: TwoAgentCartpoleEnvCfg, render_mode: str | None = None, **kwargs):
        super().__init__(cfg, render_mode, **kwargs)
        self.cartpole = self.scene["cartpole"]
        self._cart = torch.tensor(self.cartpole.find_joints(CARTPOLE.cart_dof_name)[0], device=self.device)
        self._pole = torch.tensor(self.cartpole.find_joints(CARTPOLE.pole_dof_name)[0], device=self.device)
        self.joint_pos = self.cartpole.data.joint_pos.torch
        self.joint_vel = self.cartpole.data.joint_vel.torch

    def _pre_physics_step(self, actions: dict[str, torch.Tensor]) -> None:
        self.force = self.cfg.action_scale * (actions["cart"] + actions["pole"])

    def _apply_action(self) -> None:
        self.cartpole.set_joint_effort_target_index(target=self.force, joint_ids=self._cart)

    def _get_observations(self) -> dict[str, torch.Tensor]:
        joints = {"cart": self._cart, "pole": self._pole}
        return {agent: torch.cat((self.joint_pos[:, i], self.joint_vel[:, i]), dim=-1) for agent, i in joints.items()}

    def _get_rewards(self) -> dict[str, torch.Tensor]:
        terminated = self.terminated_dict["cart"]
        reward = compute_rewards(
            CARTPOLE.rew_scale_alive,
            CARTPOLE.rew_scale_terminated,
            CARTPOLE.rew_scale_pole_pos,
            CARTPOLE.rew_scale_cart_vel,
            CARTPOLE.rew_scale_pole_vel,
            self.joint_pos[:, self._pole],
            self.joint_vel[:, self._pole],
            self.joint_vel[:, self._cart],
            terminated,
            self.step_dt,
        )
        return {agent: reward / 2 for agent in self.cfg.possible_agents}

    def _get_dones(self) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        self.joint_pos = self.cartpole.data.joint_pos.torch
        self.joint_vel = self.cartpole.data.joint_vel.torch
        time_out = self.episode_length_buf >= self.max_episode_length
        out_of_bounds = torch.any(torch.abs(self.joint_pos[:, self._cart]) > CARTPOLE.max_cart_pos, dim=1)
        return (
            {agent: out_of_bounds for agent in self.cfg.possible_agents},
            {agent: time_out for agent in self.cfg.possible_agents},
        )

    def _reset_idx(self, env_ids):
        if env_ids is None:
            env_ids = self.cartpole._ALL_INDICES
        super()._reset_idx(env_ids)
        joint_pos = self.cartpole.data.default_joint_pos.torch[env_ids].clone()
        joint_vel = self.cartpole.data.default_joint_vel.torch[env_ids].clone()
        # Isaac-Cartpole-Direct's initial states
        for state, joint, sampled in (
            (joint_pos, self._cart, CARTPOLE.initial_cart_position_range),
            (joint_vel, self._cart, CARTPOLE.initial_cart_velocity_range),
            (joint_pos, self._pole, CARTPOLE.initial_pole_angle_range),
            (joint_vel, self._pole, CARTPOLE.initial_pole_velocity_range),
        ):
            state[:, joint] += sample_uniform(*sampled, (len(env_ids), 1), self.device)
        root_pose = self.cartpole.data.default_root_pose.torch[env_ids].clone()
        root_pose[:, :3] += self.scene.env_origins[env_ids]
        self.joint_pos[env_ids] = joint_pos
        self.joint_vel[env_ids] = joint_vel
        self.cartpole.write_root_pose_to_sim_index(root_pose=root_pose, env_ids=env_ids)
        self.cartpole.write_root_velocity_to_sim_index(
            root_velocity=self.cartpole.data.default_root_vel.torch[env_ids].clone(), env_ids=env_ids
        )
        self.cartpole.write_joint_position_to_sim_index(position=joint_pos, env_ids=env_ids)
        self.cartpole.write_joint_velocity_to_sim_index(velocity=joint_vel, env_ids=env_ids)


@configclass
class TwoAgentCartpoleAgentCfg(TorchRLRunnerCfg):
    experiment_name = "two_agent_cartpole"
    num_steps_per_env = 16
    max_iterations = 5
    policy = TorchRLPolicyCfg(actor_hidden_dims=[32, 32], critic_hidden_dims=[32, 32])
    # Isaac-Cartpole-Direct's rsl_rl agent, ported
    algorithm = TorchRLPpoCfg(num_learning_epochs=5, num_mini_batches=4, learning_rate=1e-3, entropy_coef=0.005)


if TASK not in gym.registry:
    gym.register(
        id=TASK,
        entry_point=f"{__name__}:TwoAgentCartpoleEnv",
        disable_env_checker=True,
        kwargs={
            "env_cfg_entry_point": f"{__name__}:TwoAgentCartpoleEnvCfg",
            "isaaclab_torchrl_cfg_entry_point": f"{__name__}:TwoAgentCartpoleAgentCfg",
        },
    )
