"""Isaac Lab's camera Cartpole (``Isaac-Cartpole-Camera``, rendered kitless by Newton's Warp renderer, on the CPU
too) with its images as the camera gives them, uint8 RGB, and a small camera (32 x 32):
``--task camera_cartpole:Isaac-Cartpole-Camera-Uint8-Test`` with this folder on ``PYTHONPATH``.

Its agent is Isaac-Cartpole-Camera's rsl_rl agent, ported (a CNN actor on the images, an MLP critic on the state)."""

from __future__ import annotations

import gymnasium as gym
from isaaclab.utils import configclass
from isaaclab_tasks.core.cartpole.cartpole_manager_camera_env_cfg import CartpoleCameraEnvCfg

from isaaclab_torchrl.agents.rsl_rl_port import ported_entry_point

TASK = "Isaac-Cartpole-Camera-Uint8-Test"


@configclass
class Uint8CameraCartpoleEnvCfg(CartpoleCameraEnvCfg.BaseCartpoleCameraEnvCfg):
    def __post_init__(self):
        super().__post_init__()
        self.observations = CartpoleCameraEnvCfg().rgb.observations
        self.observations.policy.image.params["normalize"] = False  # uint8 frames, stacked along the channels
        self.scene.tiled_camera = self.scene.tiled_camera.rgb
        self.scene.tiled_camera.width = self.scene.tiled_camera.height = 32


if TASK not in gym.registry:
    gym.register(
        id=TASK,
        entry_point="isaaclab.envs:ManagerBasedRLEnv",
        disable_env_checker=True,
        kwargs={
            "env_cfg_entry_point": f"{__name__}:Uint8CameraCartpoleEnvCfg",
            "isaaclab_torchrl_cfg_entry_point": ported_entry_point("Isaac-Cartpole-Camera"),
        },
    )
