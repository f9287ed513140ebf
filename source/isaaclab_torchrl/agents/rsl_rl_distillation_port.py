"""rsl_rl's distillation agents (``RslRlDistillationRunnerCfg``), ported field by field to
:class:`~isaaclab_torchrl.agents.torchrl_cfg.TorchRLDistillationRunnerCfg` with the helpers of the PPO port
(:mod:`isaaclab_torchrl.agents.rsl_rl_port`): the same refusals, the same runner fields."""

from __future__ import annotations

from .rsl_rl_port import (
    UnsupportedAgentError,
    _actor_fields,
    _check_models,
    _distribution,
    _migrated,
    _noise_fields,
    _refuse_unhandled,
    _rnn,
    _rnn_fields,
    _runner_fields,
)
from .torchrl_cfg import TorchRLActorCfg, TorchRLDistillationCfg, TorchRLDistillationRunnerCfg

RSL_RL_DISTILLATION_ENTRY_POINT = "rsl_rl_distillation_cfg_entry_point"
RSL_RL_DISTILLATION_RECURRENT_ENTRY_POINT = "rsl_rl_distillation_recurrent_cfg_entry_point"
HANDLED_DISTILLATION_FIELDS = {
    # every field of rsl_rl's distillation algorithm config (any other one set away from its default is refused)
    "class_name",
    "num_learning_epochs",
    "learning_rate",
    "gradient_length",
    "max_grad_norm",
    "optimizer",
    "loss_type",
}


def distillation_entry_point_key(recurrent: bool) -> str:
    """The registry key of a task's rsl_rl distillation agent (its recurrent one with ``recurrent``)."""
    return RSL_RL_DISTILLATION_RECURRENT_ENTRY_POINT if recurrent else RSL_RL_DISTILLATION_ENTRY_POINT


def port_rsl_rl_distillation_cfg(rsl_cfg) -> TorchRLDistillationRunnerCfg:
    """The torchrl distillation config with the hyperparameters of an rsl_rl ``RslRlDistillationRunnerCfg``.

    The teacher's network is ported, not its distribution: it acts deterministically, and the parameters of its
    noise come with its checkpoint.

    Raises:
        UnsupportedAgentError: the rsl_rl agent uses a feature the torchrl runner does not have.
    """
    rsl_cfg = _migrated(rsl_cfg)
    student, teacher, algorithm = rsl_cfg.student, rsl_cfg.teacher, rsl_cfg.algorithm
    if rsl_cfg.class_name != "DistillationRunner":
        raise UnsupportedAgentError(f"its rsl_rl distillation agent runs {rsl_cfg.class_name}")
    _check_models(student, teacher)
    if any(getattr(model, "cnn_cfg", None) is not None for model in (student, teacher)):
        raise UnsupportedAgentError("its distillation student or teacher reads images (a CNN model)")
    if algorithm.class_name != "Distillation":
        raise UnsupportedAgentError(f"its rsl_rl agent uses the custom algorithm {algorithm.class_name}")
    _refuse_unhandled(rsl_cfg, HANDLED_DISTILLATION_FIELDS, student, teacher)
    runner = _runner_fields(rsl_cfg, recurrent=_rnn(student) is not None)
    distribution = _distribution(student)
    policy = TorchRLActorCfg(
        **_actor_fields(student, distribution), **_noise_fields(distribution), **_rnn_fields(student, False)
    )
    teacher_cfg = TorchRLActorCfg(**_actor_fields(teacher, _distribution(teacher)), **_rnn_fields(teacher, False))
    distillation = TorchRLDistillationCfg(
        num_learning_epochs=algorithm.num_learning_epochs,
        learning_rate=algorithm.learning_rate,
        gradient_length=algorithm.gradient_length,
        max_grad_norm=algorithm.max_grad_norm,
        optimizer=algorithm.optimizer,
        loss_type=algorithm.loss_type,
    )
    return TorchRLDistillationRunnerCfg(**runner, policy=policy, teacher=teacher_cfg, algorithm=distillation)
