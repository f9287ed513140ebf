"""ANYmal-D velocity-tracking agents, ported from Isaac Lab's ``AnymalD*PPORunnerCfg`` (rsl_rl)."""

from isaaclab.utils import configclass

from .torchrl_cfg import TorchRLPolicyCfg, TorchRLPpoCfg, TorchRLRunnerCfg


@configclass
class AnymalDRoughPPORunnerCfg(TorchRLRunnerCfg):
    num_steps_per_env = 24
    max_iterations = 2000
    save_interval = 50
    experiment_name = "anymal_d_rough"
    policy = TorchRLPolicyCfg(actor_hidden_dims=[512, 256, 128], critic_hidden_dims=[512, 256, 128], activation="elu")
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
class AnymalDRoughLstmPPORunnerCfg(AnymalDRoughPPORunnerCfg):
    experiment_name = "anymal_d_rough_lstm"
    policy = TorchRLPolicyCfg(
        rnn_type="lstm", rnn_hidden_size=256, actor_hidden_dims=[512, 256, 128], critic_hidden_dims=[512, 256, 128]
    )


@configclass
class AnymalDFlatPPORunnerCfg(AnymalDRoughPPORunnerCfg):
    max_iterations = 300
    experiment_name = "anymal_d_flat"
    policy = TorchRLPolicyCfg(actor_hidden_dims=[128, 128, 128], critic_hidden_dims=[128, 128, 128], activation="elu")


@configclass
class AnymalDFlatLstmPPORunnerCfg(AnymalDFlatPPORunnerCfg):
    """rsl_rl's ``AnymalDFlatPPORunnerRecurrentCfg``: an LSTM of 256 units in front of each MLP."""

    experiment_name = "anymal_d_flat_lstm"
    policy = TorchRLPolicyCfg(
        rnn_type="lstm", rnn_hidden_size=256, actor_hidden_dims=[128, 128, 128], critic_hidden_dims=[128, 128, 128]
    )
