"""rsl_rl's PPO extensions (symmetry augmentation, random network distillation), ported field by field for
:func:`isaaclab_torchrl.agents.rsl_rl_port.port_rsl_rl_cfg`."""

from __future__ import annotations

from .torchrl_cfg import TorchRLRndCfg, TorchRLRndWeightScheduleCfg, TorchRLSymmetryCfg


def port_symmetry(symmetry) -> TorchRLSymmetryCfg | None:
    """rsl_rl's ``RslRlSymmetryCfg`` as ours (``None`` stays ``None``)."""
    if symmetry is None:
        return None
    return TorchRLSymmetryCfg(
        use_data_augmentation=symmetry.use_data_augmentation,
        use_mirror_loss=symmetry.use_mirror_loss,
        data_augmentation_func=symmetry.data_augmentation_func,
        mirror_loss_coeff=symmetry.mirror_loss_coeff,
    )


def port_rnd(rnd) -> TorchRLRndCfg | None:
    """rsl_rl's ``RslRlRndCfg`` as ours (``None`` stays ``None``)."""
    if rnd is None:
        return None
    schedule = None
    if rnd.weight_schedule is not None:
        fields = ("mode", "final_value", "initial_step", "final_step")
        schedule = TorchRLRndWeightScheduleCfg(**{name: getattr(rnd.weight_schedule, name, None) for name in fields})
    return TorchRLRndCfg(
        weight=rnd.weight,
        weight_schedule=schedule,
        reward_normalization=rnd.reward_normalization,
        state_normalization=rnd.state_normalization,
        learning_rate=rnd.learning_rate,
        num_outputs=rnd.num_outputs,
        predictor_hidden_dims=list(rnd.predictor_hidden_dims),
        target_hidden_dims=list(rnd.target_hidden_dims),
    )
