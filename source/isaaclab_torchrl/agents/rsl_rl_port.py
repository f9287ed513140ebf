"""torchrl agents for every Isaac Lab task that has an rsl_rl agent: its rsl_rl config, ported field by field.

The port happens when a task's config is loaded, from the rsl_rl config that task registers, so the
hyperparameters stay those Isaac Lab tuned for it, release after release. A few tasks get a variant of their
port (see :data:`isaaclab_torchrl.agents.TASK_AGENTS`).

What rsl_rl can do and this runner cannot (custom model, distribution or algorithm classes) makes the port raise
:class:`UnsupportedAgentError` with the reason. Distillation agents port with the helpers here, in
:mod:`isaaclab_torchrl.agents.rsl_rl_distillation_port`.
"""

from __future__ import annotations

import contextlib
import copy
import io
from collections.abc import Callable

from .rsl_rl_extensions_port import port_rnd, port_symmetry
from .torchrl_cfg import TorchRLCNNCfg, TorchRLPolicyCfg, TorchRLPpoCfg, TorchRLRunnerCfg

RSL_RL_ENTRY_POINT = "rsl_rl_cfg_entry_point"
RSL_RL_RECURRENT_ENTRY_POINT = "rsl_rl_recurrent_cfg_entry_point"
RSL_RL_SYMMETRY_ENTRY_POINT = "rsl_rl_with_symmetry_cfg_entry_point"
RECURRENT_VARIANT = {"rnn_type": "lstm", "rnn_hidden_size": 256, "rnn_num_layers": 1}
"""The recurrent layer added where rsl_rl has no recurrent config: that of rsl_rl's ANYmal-D recurrent agent."""
SUPPORTED_MODELS = ("MLPModel", "RNNModel", "CNNModel")
SPATIAL_SOFTMAX_MODEL = "SpatialSoftmaxCNNModel"
"""The class name of Isaac Lab's KukaAllegro camera tasks' model, ported as ``encoder="spatial_softmax"``."""
SUPPORTED_DISTRIBUTIONS = ("GaussianDistribution", "HeteroscedasticGaussianDistribution")
HANDLED_FIELDS = {
    # every field of rsl_rl's configs that the port reads, checks, or that does not apply here (the command line,
    # deprecated fields that Isaac Lab's migration moves, the trackers); any other field that a config sets away
    # from its default is refused, never dropped
    "runner": {
        "seed",
        "device",
        "num_steps_per_env",
        "init_at_random_ep_len",
        "max_iterations",
        "empirical_normalization",
        "obs_groups",
        "clip_actions",
        "check_for_nan",
        "save_interval",
        "experiment_name",
        "run_name",
        "logger",
        "neptune_project",
        "wandb_project",
        "resume",
        "load_run",
        "load_checkpoint",
        "class_name",
        "actor",
        "critic",
        "student",
        "teacher",
        "algorithm",
        "policy",
    },
    "algorithm": {
        "class_name",
        "num_learning_epochs",
        "num_mini_batches",
        "learning_rate",
        "schedule",
        "gamma",
        "lam",
        "entropy_coef",
        "desired_kl",
        "max_grad_norm",
        "optimizer",
        "value_loss_coef",
        "use_clipped_value_loss",
        "clip_param",
        "normalize_advantage_per_mini_batch",
        "share_cnn_encoders",
        "use_mixed_precision",
        "rnd_cfg",
        "symmetry_cfg",
    },
    "model": {
        "class_name",
        "hidden_dims",
        "activation",
        "obs_normalization",
        "distribution_cfg",
        "stochastic",
        "init_noise_std",
        "noise_std_type",
        "state_dependent_std",
        "rnn_type",
        "rnn_hidden_dim",
        "rnn_num_layers",
        "cnn_cfg",
        "init_temperature",
    },
    "distribution": {"class_name", "init_std", "std_type", "std_range", "learn_std"},
}


class UnsupportedAgentError(ValueError):
    """The task's rsl_rl agent uses something the torchrl runner does not have."""


def _needs_migration(rsl_cfg) -> bool:
    """Whether an rsl_rl config is in an older layout that Isaac Lab's ``handle_deprecated_rsl_rl_cfg`` migrates:
    the deprecated ``policy`` section, an actor or critic left missing, or a model's legacy ``stochastic`` output
    without a ``distribution_cfg``."""
    from dataclasses import MISSING

    def missing(value) -> bool:  # configs hold copies of the sentinel: its type tells it
        return isinstance(value, type(MISSING))

    if not missing(getattr(rsl_cfg, "policy", MISSING)):
        return True
    for name in ("student", "teacher") if hasattr(rsl_cfg, "student") else ("actor", "critic"):
        model = getattr(rsl_cfg, name, MISSING)
        legacy_output = getattr(model, "distribution_cfg", None) is None and getattr(model, "stochastic", 0) is True
        if missing(model) or legacy_output:
            return True
    return False


def _migrated(rsl_cfg):
    """A copy of an rsl_rl runner config with its presets resolved, in rsl_rl 5's layout."""
    from isaaclab_tasks.utils.hydra import resolve_presets

    rsl_cfg = resolve_presets(copy.deepcopy(rsl_cfg))
    if _needs_migration(rsl_cfg):
        # Isaac Lab's migration imports rsl_rl's runners, and with them its trackers' clients (seconds per process
        # start where neptune is installed, docs/benchmarks.md): only for configs that need it
        from isaaclab_rl.rsl_rl.utils import handle_deprecated_rsl_rl_cfg

        # rsl_rl >= 5 layout (actor/critic model configs with distribution configs); it prints migration notes
        with contextlib.redirect_stdout(io.StringIO()):
            handle_deprecated_rsl_rl_cfg(rsl_cfg, "5.0.0")
    return rsl_cfg


def _model_class(model) -> str:
    """A model's class name, a task's ``module:Class`` reduced to ``Class`` for the spatial-softmax model."""
    name = model.class_name
    return SPATIAL_SOFTMAX_MODEL if name.rpartition(":")[2] == SPATIAL_SOFTMAX_MODEL else name


def _check_models(*models) -> None:
    """Refuses models this runner cannot build: custom classes."""
    for model in models:
        if _model_class(model) not in (*SUPPORTED_MODELS, SPATIAL_SOFTMAX_MODEL):
            raise UnsupportedAgentError(
                f"its rsl_rl agent uses the custom model class {model.class_name}, which is built on rsl_rl's model "
                "interface; a network class of this runner's is set with agent.policy.actor_class_name (docs/tasks.md)"
            )


def _cnn_cfg(model):
    """A CNN model's ``cnn_cfg`` (one CNN config, or a dict of one per image group) as ours; ``None`` for others."""
    cnn_cfg = getattr(model, "cnn_cfg", None)
    if cnn_cfg is None:
        return None

    def port(cnn) -> TorchRLCNNCfg:
        cnn = cnn if isinstance(cnn, dict) else cnn.to_dict()
        if not cnn.get("flatten", True) and _model_class(model) == "CNNModel":
            raise UnsupportedAgentError("its CNN does not flatten its output (rsl_rl's CNNModel refuses it too)")
        return TorchRLCNNCfg(**{k: list(v) if isinstance(v, tuple) else v for k, v in cnn.items()})

    groups = cnn_cfg if isinstance(cnn_cfg, dict) else {}
    if groups and all(isinstance(value, dict) or hasattr(value, "output_channels") for value in groups.values()):
        return {name: port(cnn) for name, cnn in groups.items()}
    return port(cnn_cfg)


def _cnn_fields(actor, critic, algorithm) -> dict:
    """The image encoders of actor and critic, as our fields."""
    if _model_class(critic) == SPATIAL_SOFTMAX_MODEL:
        raise UnsupportedAgentError("its critic uses the spatial-softmax CNN model (here: the actor's option only)")
    fields = dict(actor_cnn_cfg=_cnn_cfg(actor), critic_cnn_cfg=_cnn_cfg(critic))
    fields["share_cnn_encoders"] = bool(getattr(algorithm, "share_cnn_encoders", False))
    if _model_class(actor) == SPATIAL_SOFTMAX_MODEL:
        fields.update(encoder="spatial_softmax", init_temperature=float(actor.init_temperature))
    return fields


def _refuse_unhandled(rsl_cfg, algorithm_fields: set[str], *models) -> None:
    """Refuses the runner's, the algorithm's and the models' fields that the port does not handle."""
    _refuse_unhandled_fields(rsl_cfg, HANDLED_FIELDS["runner"])
    _refuse_unhandled_fields(rsl_cfg.algorithm, algorithm_fields)
    for model in models:
        _refuse_unhandled_fields(model, HANDLED_FIELDS["model"])


def _distribution(model):
    """A stochastic model's Gaussian distribution config, checked."""
    distribution = model.distribution_cfg
    if distribution is not None:
        _refuse_unhandled_fields(distribution, HANDLED_FIELDS["distribution"])
    if distribution is None or distribution.class_name not in SUPPORTED_DISTRIBUTIONS:
        name = None if distribution is None else distribution.class_name
        raise UnsupportedAgentError(f"its rsl_rl actor uses the action distribution {name}")
    return distribution


def _rnn_fields(model, recurrent: bool) -> dict:
    """The recurrent layer of a model (or :data:`RECURRENT_VARIANT` with ``recurrent``), as our fields."""
    if getattr(model, "rnn_type", None):
        rnn_type, hidden_size, num_layers = _rnn(model)
        return {"rnn_type": rnn_type, "rnn_hidden_size": hidden_size, "rnn_num_layers": num_layers}
    return dict(RECURRENT_VARIANT) if recurrent else {}


def _actor_fields(model, distribution) -> dict:
    """An actor model's network and, with its ``distribution``, its noise, as our fields."""
    fields = dict(actor_hidden_dims=list(model.hidden_dims), activation=model.activation)
    fields["actor_obs_normalization"] = model.obs_normalization
    fields["state_dependent_std"] = distribution.class_name == "HeteroscedasticGaussianDistribution"
    return fields


def _noise_fields(distribution) -> dict:
    return dict(
        init_noise_std=distribution.init_std,
        noise_std_type=distribution.std_type,
        std_range=list(distribution.std_range),
        learn_std=getattr(distribution, "learn_std", True),
    )


def _runner_fields(rsl_cfg, recurrent: bool) -> dict:
    """The runner's fields shared by every kind of run (PPO's and distillation's)."""
    obs_groups = rsl_cfg.obs_groups if isinstance(rsl_cfg.obs_groups, dict) else None
    experiment_name = rsl_cfg.experiment_name
    if recurrent and not experiment_name.endswith("_lstm"):
        # its own folder, so that play.py never picks up the MLP agent's checkpoints for it
        experiment_name += "_lstm"
    return dict(
        seed=rsl_cfg.seed,
        num_steps_per_env=rsl_cfg.num_steps_per_env,
        max_iterations=rsl_cfg.max_iterations,
        save_interval=rsl_cfg.save_interval,
        experiment_name=experiment_name,
        run_name=rsl_cfg.run_name,
        logger=rsl_cfg.logger,
        wandb_project=rsl_cfg.wandb_project,
        neptune_project=rsl_cfg.neptune_project,
        obs_groups={key: list(value) for key, value in obs_groups.items()} if obs_groups else None,
        clip_actions=rsl_cfg.clip_actions,
        check_for_nan=rsl_cfg.check_for_nan,
        init_at_random_ep_len=rsl_cfg.init_at_random_ep_len,
    )


def port_rsl_rl_cfg(rsl_cfg, recurrent: bool = False) -> TorchRLRunnerCfg:
    """The torchrl runner config with the hyperparameters of an rsl_rl ``RslRlOnPolicyRunnerCfg``.

    Args:
        rsl_cfg: The rsl_rl runner config (left as it is: a registry may hold it as an instance).
        recurrent: Give the networks the recurrent layer of :data:`RECURRENT_VARIANT` when they have none.

    Raises:
        UnsupportedAgentError: the rsl_rl agent uses a feature the torchrl runner does not have.
    """
    rsl_cfg = _migrated(rsl_cfg)
    actor, critic, algorithm = rsl_cfg.actor, rsl_cfg.critic, rsl_cfg.algorithm
    if rsl_cfg.class_name != "OnPolicyRunner":
        raise UnsupportedAgentError(f"its rsl_rl agent runs {rsl_cfg.class_name}, not PPO's OnPolicyRunner")
    _check_models(actor, critic)
    if algorithm.class_name != "PPO":
        raise UnsupportedAgentError(f"its rsl_rl agent uses the custom algorithm {algorithm.class_name}")
    if algorithm.optimizer != "adam":
        raise UnsupportedAgentError(f"its rsl_rl agent uses the {algorithm.optimizer} optimizer (only adam here)")
    if algorithm.normalize_advantage_per_mini_batch:
        raise UnsupportedAgentError("its rsl_rl agent normalises advantages per minibatch (here: per batch)")
    _refuse_unhandled(rsl_cfg, HANDLED_FIELDS["algorithm"], actor, critic)
    if critic.activation != actor.activation:
        raise UnsupportedAgentError(f"its critic's activation {critic.activation} differs from its actor's")
    if _rnn(critic) != _rnn(actor):
        raise UnsupportedAgentError(f"its critic's recurrent layer {_rnn(critic)} differs from its actor's")
    if critic.distribution_cfg is not None:
        raise UnsupportedAgentError("its critic has an output distribution")
    distribution = _distribution(actor)
    policy = TorchRLPolicyCfg(
        **_actor_fields(actor, distribution),
        **_noise_fields(distribution),
        **_rnn_fields(actor, recurrent),
        **_cnn_fields(actor, critic, algorithm),
        critic_hidden_dims=list(critic.hidden_dims),
        critic_obs_normalization=critic.obs_normalization,
    )
    ppo = TorchRLPpoCfg(
        num_learning_epochs=algorithm.num_learning_epochs,
        num_mini_batches=algorithm.num_mini_batches,
        clip_param=algorithm.clip_param,
        use_clipped_value_loss=algorithm.use_clipped_value_loss,
        entropy_coef=algorithm.entropy_coef,
        value_loss_coef=algorithm.value_loss_coef,
        learning_rate=algorithm.learning_rate,
        schedule=algorithm.schedule,
        desired_kl=algorithm.desired_kl,
        max_grad_norm=algorithm.max_grad_norm,
        gamma=algorithm.gamma,
        lam=algorithm.lam,
        use_mixed_precision=getattr(algorithm, "use_mixed_precision", False),
        symmetry_cfg=port_symmetry(algorithm.symmetry_cfg),
        rnd_cfg=port_rnd(algorithm.rnd_cfg),
    )
    return TorchRLRunnerCfg(**_runner_fields(rsl_cfg, recurrent), policy=policy, algorithm=ppo)


def _rnn(model) -> tuple | None:
    rnn_type = getattr(model, "rnn_type", None)
    return (rnn_type.lower(), model.rnn_hidden_dim, model.rnn_num_layers) if rnn_type else None


def _refuse_unhandled_fields(cfg, handled: set[str]) -> None:
    """Raises for a field of ``cfg`` that the port does not handle and that is set away from its default."""
    import dataclasses

    for field in dataclasses.fields(cfg):
        if field.name in handled:
            continue
        default = field.default_factory() if field.default_factory is not dataclasses.MISSING else field.default
        if getattr(cfg, field.name) != default:
            raise UnsupportedAgentError(
                f"its rsl_rl config sets {type(cfg).__name__}.{field.name}={getattr(cfg, field.name)!r}, which the "
                "torchrl runner does not port"
            )


def ported_agent(
    task: str, recurrent: bool = False, symmetry: bool = False, distillation: bool = False, **policy_changes
) -> TorchRLRunnerCfg:
    """The torchrl agent of ``task``, ported from its rsl_rl agent (its recurrent one, when asked and it has one;
    with ``symmetry``, its agent with symmetry augmentation; with ``distillation``, its distillation agent, the
    recurrent one with ``recurrent``), with ``policy_changes`` applied to its ``policy`` section.

    Raises:
        UnsupportedAgentError: the task's rsl_rl agent uses a feature the torchrl runner does not have.
    """
    import gymnasium as gym
    from isaaclab_tasks.utils.parse_cfg import load_cfg_from_registry

    kwargs = gym.spec(task).kwargs
    key = RSL_RL_RECURRENT_ENTRY_POINT if recurrent and RSL_RL_RECURRENT_ENTRY_POINT in kwargs else RSL_RL_ENTRY_POINT
    if symmetry:
        key = RSL_RL_SYMMETRY_ENTRY_POINT
    if distillation:
        from .rsl_rl_distillation_port import distillation_entry_point_key, port_rsl_rl_distillation_cfg

        key = distillation_entry_point_key(recurrent)
    with contextlib.redirect_stdout(io.StringIO()):  # "[INFO]: Parsing configuration from: ..."
        rsl_cfg = load_cfg_from_registry(task, key)
    try:
        if distillation:
            cfg = port_rsl_rl_distillation_cfg(rsl_cfg)
        else:
            cfg = port_rsl_rl_cfg(rsl_cfg, recurrent=recurrent)
    except UnsupportedAgentError as exc:
        raise UnsupportedAgentError(f"Task {task!r} is not supported by the torchrl runner: {exc}.") from None
    cfg.policy = cfg.policy.replace(**policy_changes)
    return cfg


def ported_entry_point(
    task: str, recurrent: bool = False, symmetry: bool = False, distillation: bool = False, **policy_changes
) -> Callable[[], TorchRLRunnerCfg]:
    """A registry entry point (a function Isaac Lab's config loader calls) that ports ``task``'s rsl_rl agent."""

    def entry_point() -> TorchRLRunnerCfg:
        return ported_agent(task, recurrent, symmetry, distillation, **policy_changes)

    variant = ", distillation" if distillation else ""
    variant += ", recurrent" if recurrent else ", symmetry" if symmetry else ""
    entry_point.__qualname__ = f"ported_agent[{task}{variant}]"
    return entry_point
