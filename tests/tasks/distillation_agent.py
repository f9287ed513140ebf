"""A Cartpole task with distillation agents (Isaac Lab's Cartpole has no rsl_rl distillation agent):
``--task distillation_agent:Isaac-Cartpole-Distillation-Test`` with this folder on ``PYTHONPATH``, and the teacher
checkpoint of ``tests/data/cartpole_teacher`` (``--checkpoint``; its README says how it was made).

``--agent torchrl_distillation``: an MLP student; ``--agent torchrl_distillation_lstm``: a GRU student of 16 units.
Both learn the teacher's action, an MLP of 32x32 trained by PPO on ``Isaac-Cartpole-Direct``."""

import gymnasium as gym
from isaaclab.utils import configclass

from isaaclab_torchrl.agents import TorchRLActorCfg, TorchRLDistillationCfg, TorchRLDistillationRunnerCfg

TASK = "Isaac-Cartpole-Distillation-Test"
CARTPOLE = "isaaclab_tasks.core.cartpole"


@configclass
class CartpoleDistillationCfg(TorchRLDistillationRunnerCfg):
    experiment_name = "cartpole_distillation"
    num_steps_per_env = 16
    max_iterations = 20
    obs_groups = {"student": ["policy"], "teacher": ["policy"]}
    policy = TorchRLActorCfg(actor_hidden_dims=[32, 32], init_noise_std=0.1)
    teacher = TorchRLActorCfg(actor_hidden_dims=[32, 32])
    algorithm = TorchRLDistillationCfg(num_learning_epochs=4, learning_rate=3e-3, gradient_length=4)


@configclass
class CartpoleRecurrentDistillationCfg(CartpoleDistillationCfg):
    experiment_name = "cartpole_distillation_gru"
    policy = TorchRLActorCfg(rnn_type="gru", rnn_hidden_size=16, actor_hidden_dims=[32], init_noise_std=0.1)


if TASK not in gym.registry:
    gym.register(
        id=TASK,
        entry_point=f"{CARTPOLE}.cartpole_direct_env:CartpoleEnv",
        disable_env_checker=True,
        kwargs={
            "env_cfg_entry_point": f"{CARTPOLE}.cartpole_direct_env_cfg:CartpoleEnvCfg",
            "isaaclab_torchrl_distillation_cfg_entry_point": f"{__name__}:CartpoleDistillationCfg",
            "isaaclab_torchrl_distillation_lstm_cfg_entry_point": f"{__name__}:CartpoleRecurrentDistillationCfg",
        },
    )
