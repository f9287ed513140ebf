"""Cartpole agents, ported from Isaac Lab's ``CartpolePPORunnerCfg`` (rsl_rl)."""

from isaaclab.utils import configclass

from .torchrl_cfg import TorchRLPolicyCfg, TorchRLPpoCfg, TorchRLRunnerCfg


@configclass
class CartpolePPORunnerCfg(TorchRLRunnerCfg):
    num_steps_per_env = 16
    max_iterations = 150
    save_interval = 50
    experiment_name = "cartpole"
    policy = TorchRLPolicyCfg(actor_hidden_dims=[32, 32], critic_hidden_dims=[32, 32], activation="elu")
    algorithm = TorchRLPpoCfg(
        value_loss_coef=1.0,
        use_clipped_value_loss=True,
        clip_param=0.2,
        entropy_coef=0.005,
        num_learning_epochs=5,
        num_mini_batches=4,
        learning_rate=1.0e-3,
        schedule="adaptive",
        gamma=0.99,
        lam=0.95,
        desired_kl=0.01,
        max_grad_norm=1.0,
    )


@configclass
class CartpoleLstmPPORunnerCfg(CartpolePPORunnerCfg):
    experiment_name = "cartpole_lstm"
    policy = TorchRLPolicyCfg(
        rnn_type="lstm", rnn_hidden_size=32, actor_hidden_dims=[32, 32], critic_hidden_dims=[32, 32]
    )


@configclass
class CartpoleDirectPPORunnerCfg(CartpolePPORunnerCfg):
    experiment_name = "cartpole_direct"


@configclass
class CartpoleDirectLstmPPORunnerCfg(CartpoleLstmPPORunnerCfg):
    experiment_name = "cartpole_direct_lstm"
