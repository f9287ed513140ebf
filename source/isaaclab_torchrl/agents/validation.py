"""The one check of an agent config: every rule a training config must meet, tested before any simulator starts.

:func:`validate_agent_cfg` runs once, when the config is resolved (Hydra overrides and command-line arguments
applied, :func:`isaaclab_torchrl.training.resolve_configs`); what it leaves is what the runner, the learner, the
workers and ``--print_config`` see. :func:`validate_policy_cfg` checks the networks a checkpoint rebuilds.
"""

from __future__ import annotations

import importlib.util
import json
import netrc
import os

import torch

from .fields import mistyped_fields, unset_fields
from .torchrl_cfg import (
    ACTIVATIONS,
    CNN_ACTIVATIONS,
    CNN_GLOBAL_POOLS,
    CNN_NORMS,
    CNN_PADDINGS,
    DISTILLATION_LOSSES,
    IMAGE_ENCODERS,
    NOISE_STD_TYPES,
    OPTIMIZERS,
    RECURRENT_BACKENDS,
    RND_WEIGHT_SCHEDULES,
    RNN_TYPES,
    SCHEDULES,
    SPEEDS,
    TRACKER_CLIENTS,
    TRACKERS,
    TorchRLActorCfg,
    TorchRLCNNCfg,
    TorchRLDistillationRunnerCfg,
    TorchRLRunnerCfg,
    cnn_configs,
)


class ConfigError(ValueError):
    """A config value that cannot train; the message names the field and what it may be."""


def check_required_fields(agent_cfg: TorchRLRunnerCfg) -> None:
    """Rejects an agent config that leaves required fields unset (as rsl_rl's configs, these have no default), or
    gives a number, flag or name a value of another type."""
    unset = unset_fields(agent_cfg)
    if unset:
        raise ConfigError(
            f"The agent config {type(agent_cfg).__name__} leaves required fields unset: {', '.join(unset)}; set them "
            "in the config (a whole section such as agent.policy as a TorchRLPolicyCfg) or on the command line."
        )
    mistyped = mistyped_fields(agent_cfg)
    if mistyped:
        raise ConfigError(f"Values of the wrong type: {'; '.join(mistyped)}.")


def check_device(name: str, option: str) -> None:
    """Rejects a device that is not ``cpu`` or an existing ``cuda[:index]``."""
    try:
        device = torch.device(name)
    except RuntimeError:
        raise ConfigError(f"{option} {name!r} is not a device; use cpu or cuda:<index>.") from None
    if device.type == "cuda":
        count = torch.cuda.device_count()
        if (device.index or 0) >= count:
            raise ConfigError(f"{option} {name!r} does not exist: this machine has {count} CUDA device(s).")
    elif device.type != "cpu":
        raise ConfigError(f"{option} {name!r} is not supported; use cpu or cuda:<index>.")


def learner_device(agent_cfg: TorchRLRunnerCfg) -> str:
    """The device the learner runs on: ``agent.train_device``, else the simulation's ``agent.device``."""
    return str(agent_cfg.train_device or agent_cfg.device)


def _one_of(path: str, value, allowed: tuple) -> None:
    if value not in allowed:
        raise ConfigError(f"{path} must be one of {allowed}, got {value!r}.")


def validate_policy_cfg(policy: TorchRLActorCfg, path: str = "agent.policy") -> None:
    """Rejects networks that :func:`isaaclab_torchrl.models.make_models` cannot build (``path``: where the config
    sits, for the messages)."""
    if policy.rnn_type is not None:
        _one_of(f"{path}.rnn_type", policy.rnn_type, (*RNN_TYPES, None))
        if policy.rnn_hidden_size < 1 or policy.rnn_num_layers < 1:
            raise ConfigError(f"{path}.rnn_hidden_size and rnn_num_layers must be >= 1.")
    _one_of(f"{path}.recurrent_backend", policy.recurrent_backend, RECURRENT_BACKENDS)
    _one_of(f"{path}.noise_std_type", policy.noise_std_type, NOISE_STD_TYPES)
    _one_of(f"{path}.activation", str(policy.activation).lower(), ACTIVATIONS)
    if policy.init_noise_std <= 0:
        raise ConfigError(f"{path}.init_noise_std must be > 0, got {policy.init_noise_std}.")
    low, high = (float(value) for value in policy.std_range)
    if not 0 <= low < high:
        raise ConfigError(f"{path}.std_range must be (min, max) with 0 <= min < max, got {policy.std_range}.")
    _check_cnns(policy, path)
    if policy.state_dependent_std and (not policy.learn_std or policy.actor_class_name is not None):
        raise ConfigError(
            f"{path}.state_dependent_std=true learns the std from the observation: it needs {path}.learn_std=true "
            "(rsl_rl's heteroscedastic distribution has no fixed std either) and the runner's MLP (its std head "
            "starts at init_noise_std), not actor_class_name."
        )
    for name in ("actor_class_name", "critic_class_name"):
        if (class_name := getattr(policy, name, None)) is not None:
            from isaaclab.utils.string import string_to_callable

            try:
                string_to_callable(class_name)
            except (ValueError, AttributeError, ImportError, TypeError) as exc:
                raise ConfigError(f"{path}.{name} {class_name!r} is not an importable 'module:Class': {exc}") from None


def _check_cnns(policy: TorchRLActorCfg, path: str) -> None:
    """Rejects image encoders that :mod:`isaaclab_torchrl.encoders` cannot build."""
    _one_of(f"{path}.encoder", policy.encoder, IMAGE_ENCODERS)
    if policy.init_temperature <= 0 or (getattr(policy, "share_cnn_encoders", False) and not policy.actor_cnn_cfg):
        raise ConfigError(f"{path}: init_temperature must be > 0; share_cnn_encoders=true needs actor_cnn_cfg.")
    for name in ("actor_cnn_cfg", "critic_cnn_cfg"):
        cnn_cfg = getattr(policy, name, None)
        single = cnn_cfg is None or isinstance(cnn_cfg, TorchRLCNNCfg) or "output_channels" in cnn_cfg
        try:
            configs = {} if cnn_cfg is None else cnn_configs(cnn_cfg, ["*"] if single else list(cnn_cfg))
        except TypeError as exc:
            raise ConfigError(f"{path}.{name} is not a CNN config (or a dict of one per image group): {exc}.") from None
        for group, cnn in configs.items():
            where = f"{path}.{name}" + ("" if single else f".{group}")
            layers = len(cnn.output_channels) if isinstance(cnn.output_channels, list | tuple) else 0
            for field in ("output_channels", "kernel_size", "stride", "dilation"):
                values = value if isinstance(value := getattr(cnn, field), list | tuple) else [value]
                if not layers or len(values) not in (1, layers) or any(int(v) < 1 for v in values):
                    raise ConfigError(f"{where}.{field} must be one or one per layer, each >= 1, got {value}.")
            for field, allowed in (("padding", CNN_PADDINGS), ("norm", CNN_NORMS), ("global_pool", CNN_GLOBAL_POOLS)):
                for item in value if isinstance(value := getattr(cnn, field), list | tuple) else [value]:
                    _one_of(f"{where}.{field}", item, allowed)
            _one_of(f"{where}.activation", str(cnn.activation).lower(), CNN_ACTIVATIONS)
            pooled = policy.encoder == "spatial_softmax" and name == "actor_cnn_cfg" and cnn.global_pool != "none"
            if not cnn.flatten or pooled:
                raise ConfigError(
                    f"{where}: flatten=false, or a global_pool with encoder='spatial_softmax', cannot be built."
                )


def _check_symmetry(agent_cfg: TorchRLRunnerCfg) -> None:
    """Resolves the symmetry function (a ``"module:name"`` string from a config file or the command line) and rejects
    what rsl_rl's symmetry extension rejects."""
    symmetry = agent_cfg.algorithm.symmetry_cfg
    function = symmetry.data_augmentation_func
    if isinstance(function, str):
        from isaaclab.utils.string import string_to_callable

        try:
            symmetry.data_augmentation_func = function = string_to_callable(function)
        except (ValueError, AttributeError, ImportError) as exc:
            raise ConfigError(
                f"agent.algorithm.symmetry_cfg.data_augmentation_func {function!r} is not an importable "
                f"'module:function': {exc}"
            ) from None
    if not callable(function):
        raise ConfigError(f"agent.algorithm.symmetry_cfg.data_augmentation_func must be a function, got {function!r}.")
    if agent_cfg.policy.rnn_type is not None:
        raise ConfigError(
            "agent.algorithm.symmetry_cfg: symmetry augmentation needs an MLP policy, as in rsl_rl; with a recurrent "
            "one the recurrent state stored for a mirrored trajectory would be the original's, which is not its "
            "mirror. Use --agent torchrl_symmetry (an MLP) or set agent.algorithm.symmetry_cfg=null."
        )
    if symmetry.mirror_loss_coeff < 0:
        raise ConfigError(
            f"agent.algorithm.symmetry_cfg.mirror_loss_coeff must be >= 0, got {symmetry.mirror_loss_coeff}."
        )


def _check_rnd(rnd) -> None:
    """Rejects an RND config that rsl_rl's RND module could not run."""
    if rnd.learning_rate <= 0 or rnd.num_outputs < 1:
        raise ConfigError("agent.algorithm.rnd_cfg.learning_rate must be > 0 and num_outputs >= 1.")
    for name in ("predictor_hidden_dims", "target_hidden_dims"):
        if any(size != -1 and size < 1 for size in getattr(rnd, name)):
            raise ConfigError(f"agent.algorithm.rnd_cfg.{name} holds sizes >= 1, or -1 (the input's size).")
    schedule = rnd.weight_schedule
    if schedule is None:
        return
    _one_of("agent.algorithm.rnd_cfg.weight_schedule.mode", schedule.mode, RND_WEIGHT_SCHEDULES)
    needed = {"constant": (), "step": ("final_step", "final_value")}.get(schedule.mode)
    needed = ("initial_step", "final_step", "final_value") if needed is None else needed
    unset = [name for name in needed if getattr(schedule, name) is None]
    if unset:
        raise ConfigError(f"agent.algorithm.rnd_cfg.weight_schedule ({schedule.mode}) needs {', '.join(unset)}.")
    if schedule.mode == "linear" and schedule.final_step <= schedule.initial_step:
        raise ConfigError("agent.algorithm.rnd_cfg.weight_schedule: final_step must be after initial_step.")


TEACHER_NETWORK_FIELDS = ("rnn_type", "rnn_hidden_size", "rnn_num_layers", "actor_hidden_dims", "activation")
TEACHER_NETWORK_FIELDS += ("state_dependent_std", "actor_obs_normalization")
"""What makes a teacher's deterministic action: these fields of ``agent.teacher`` must be its checkpoint's."""


def _check_distillation(agent_cfg: TorchRLDistillationRunnerCfg) -> None:
    """Rejects a distillation config that rsl_rl's ``Distillation`` could not run."""
    algo = agent_cfg.algorithm
    validate_policy_cfg(agent_cfg.teacher, "agent.teacher")
    if algo.gradient_length < 1:
        raise ConfigError(f"agent.algorithm.gradient_length must be >= 1, got {algo.gradient_length}.")
    _one_of("agent.algorithm.loss_type", algo.loss_type, DISTILLATION_LOSSES)
    _one_of("agent.algorithm.optimizer", algo.optimizer, OPTIMIZERS)
    if algo.max_grad_norm is not None and algo.max_grad_norm <= 0:
        raise ConfigError(f"agent.algorithm.max_grad_norm must be > 0 or null, got {algo.max_grad_norm}.")
    unknown_sets = sorted(set(agent_cfg.obs_groups or {}) - {"student", "teacher"})
    if unknown_sets:
        raise ConfigError(f"agent.obs_groups has entries {unknown_sets}; only 'student' and 'teacher' are read.")
    if agent_cfg.compile or agent_cfg.cudagraphs:
        raise ConfigError("agent.compile and agent.cudagraphs apply to PPO's update; distillation's runs eagerly.")


def check_teacher_checkpoint(agent_cfg: TorchRLDistillationRunnerCfg, checkpoint: dict, path: str) -> None:
    """Rejects a checkpoint of this runner whose teacher (a PPO checkpoint's actor, a distillation checkpoint's
    teacher) is not the network of ``agent.teacher``, naming the fields that differ. An rsl_rl checkpoint has no
    config to compare: the shapes of its weights are checked when they are copied."""
    import yaml

    if "config" not in checkpoint:
        return
    trained = yaml.safe_load(checkpoint["config"])
    network = trained.get("teacher") if "teacher" in checkpoint else trained.get("policy")
    differ = [name for name in TEACHER_NETWORK_FIELDS if (network or {}).get(name) != getattr(agent_cfg.teacher, name)]
    if differ:
        found = ", ".join(f"{name}={(network or {}).get(name)!r}" for name in differ)
        raise ConfigError(
            f"The teacher of checkpoint {path} has {found}, which agent.teacher does not: set agent.teacher.<field> "
            "to the checkpoint's (its run's params/agent.yaml)."
        )


def _check_ppo(agent_cfg: TorchRLRunnerCfg, num_envs: int) -> None:
    """Rejects a PPO config (with its extensions) that rsl_rl's ``PPO`` could not run."""
    algo, obs_groups = agent_cfg.algorithm, agent_cfg.obs_groups or {}
    if algo.desired_kl is not None and algo.desired_kl <= 0:
        raise ConfigError(f"agent.algorithm.desired_kl must be > 0 or null, got {algo.desired_kl}.")
    _one_of("agent.algorithm.schedule", algo.schedule, SCHEDULES)
    if algo.symmetry_cfg is not None:
        _check_symmetry(agent_cfg)
    if algo.rnd_cfg is not None:
        _check_rnd(algo.rnd_cfg)
    unknown_sets = sorted(set(obs_groups) - {"actor", "critic", "rnd_state"})
    if unknown_sets:
        raise ConfigError(
            f"agent.obs_groups has entries {unknown_sets}; only 'actor', 'critic' and 'rnd_state' are read."
        )
    # a recurrent policy's minibatches hold whole environments' rollouts, an MLP's single steps (as rsl_rl's)
    recurrent = agent_cfg.policy.rnn_type is not None
    parts = num_envs if recurrent else num_envs * agent_cfg.num_steps_per_env
    if not 1 <= algo.num_mini_batches <= parts:
        what = "trajectory slices (environments)" if recurrent else "steps"
        raise ConfigError(
            f"agent.algorithm.num_mini_batches ({algo.num_mini_batches}) must be between 1 and the {parts} {what} of a "
            "batch."
        )
    if algo.max_grad_norm <= 0:
        raise ConfigError(f"agent.algorithm.max_grad_norm must be > 0, got {algo.max_grad_norm}.")
    for name in ("gamma", "lam"):
        if not 0 <= getattr(algo, name) <= 1:
            raise ConfigError(f"agent.algorithm.{name} must be between 0 and 1, got {getattr(algo, name)}.")
    if agent_cfg.clip_actions is not None and agent_cfg.clip_actions <= 0:
        raise ConfigError(f"agent.clip_actions must be > 0 or null, got {agent_cfg.clip_actions}.")


def check_tracker(logger: str) -> None:
    """Rejects an unknown tracker, a tracker whose client is not installed, or one without credentials."""
    if logger not in TRACKERS:
        raise ConfigError(f"agent.logger (--logger) {logger!r} is not one of {', '.join(TRACKERS)}.")
    if logger == "tensorboard":
        return
    client = TRACKER_CLIENTS[logger]
    if importlib.util.find_spec(client) is None:
        raise ConfigError(f"--logger {logger} needs the {client} client: pip install 'isaaclab-torchrl[{logger}]'.")
    if logger == "wandb" and os.environ.get("WANDB_MODE") not in ("offline", "disabled", "dryrun"):
        if not os.environ.get("WANDB_API_KEY") and not _wandb_login_stored():
            raise ConfigError(
                "--logger wandb: not logged in; run `wandb login` or set WANDB_API_KEY (or WANDB_MODE=offline)."
            )
    if logger == "neptune" and os.environ.get("NEPTUNE_MODE") not in ("offline", "debug"):
        if not os.environ.get("NEPTUNE_API_TOKEN"):
            raise ConfigError("--logger neptune: set NEPTUNE_API_TOKEN (or NEPTUNE_MODE=offline).")


def _wandb_login_stored() -> bool:
    """Whether ``wandb login`` stored a key (in ~/.netrc, its default place)."""
    try:
        hosts = netrc.netrc(os.environ.get("NETRC")).hosts
    except (OSError, netrc.NetrcParseError):
        return False
    return any("wandb" in host for host in hosts)


def resolve_speed_settings(agent_cfg: TorchRLRunnerCfg) -> TorchRLRunnerCfg:
    """Gives the speed settings left at ``None`` their values for the config's devices (``agent.speed``), in place.

    With ``speed="auto"``: on a CUDA learner the update is compiled and replayed as a CUDA graph (recurrent layers
    with the ``fused`` backend, which a graph can replay; elsewhere ``pad``); on a CUDA simulation device the
    workers' inference is graphed; on every device collection is asynchronous (lag-corrected PPO). Elsewhere, and
    with ``speed="off"``, everything stays plain (and synchronous). Values set by the user are kept.
    """
    _one_of("agent.speed", agent_cfg.speed, SPEEDS)
    fast = agent_cfg.speed == "auto"
    eager_update = isinstance(agent_cfg, TorchRLDistillationRunnerCfg)  # distillation's update is not compiled
    cuda_simulation = str(agent_cfg.device).startswith("cuda")
    cuda_learner = learner_device(agent_cfg).startswith("cuda")
    collector = agent_cfg.collector
    if agent_cfg.compile is None:
        agent_cfg.compile = fast and cuda_learner and agent_cfg.cudagraphs is not False and not eager_update
    if agent_cfg.cudagraphs is None:
        agent_cfg.cudagraphs = fast and cuda_learner and agent_cfg.compile
    if collector.cudagraph_policy is None:
        collector.cudagraph_policy = fast and cuda_simulation
    if agent_cfg.policy.recurrent_backend == "auto":
        # fixed shapes for the graph; eagerly, pad's cuDNN over split trajectories is faster (docs/benchmarks.md)
        agent_cfg.policy.recurrent_backend = "fused" if agent_cfg.cudagraphs else "pad"
    if collector.sync is None:
        # asynchronous collection learned as well as synchronous at equal env steps, and ran faster, on the GPU and
        # on a 2-core CPU (docs/benchmarks.md)
        collector.sync = not fast
    return agent_cfg


def validate_agent_cfg(agent_cfg: TorchRLRunnerCfg, num_envs: int) -> None:
    """Makes ``agent_cfg`` the config that trains, in place, before any simulator starts: the one place where it
    is resolved and checked. Required fields must be set; the speed settings left at ``None`` (and the recurrent
    backend ``auto``) get their values (:func:`resolve_speed_settings`); then every rule is checked.

    Args:
        agent_cfg: The resolved agent config (``agent_cfg.device`` is the simulation device).
        num_envs: The number of environments of the task, over all collector workers.

    Raises:
        ConfigError: naming the field and its allowed range.
    """
    check_required_fields(agent_cfg)
    collector, algo, policy = agent_cfg.collector, agent_cfg.algorithm, agent_cfg.policy
    resolve_speed_settings(agent_cfg)
    validate_policy_cfg(policy)
    check_tracker(agent_cfg.logger)
    if agent_cfg.train_device is not None:
        check_device(agent_cfg.train_device, "--train_device")
    if collector.storing_device is not None:
        check_device(collector.storing_device, "agent.collector.storing_device")
    if collector.num_collectors < 1:
        raise ConfigError(f"num_collectors must be >= 1, got {collector.num_collectors}.")
    whole = isinstance(num_envs, int) and not isinstance(num_envs, bool)
    if not whole or num_envs < 1 or num_envs % collector.num_collectors:
        raise ConfigError(
            f"num_envs ({num_envs}) must be a positive multiple of num_collectors ({collector.num_collectors})."
        )
    for name in ("first_batch_timeout_s", "batch_timeout_s", "shutdown_timeout_s"):
        if getattr(collector, name) <= 0:
            raise ConfigError(f"agent.collector.{name} must be > 0, got {getattr(collector, name)}.")
    counts = {"num_steps_per_env": agent_cfg.num_steps_per_env, "max_iterations": agent_cfg.max_iterations}
    counts |= {"save_interval": agent_cfg.save_interval, "eval_episodes": agent_cfg.eval_episodes}
    for name, value in (*counts.items(), ("algorithm.num_learning_epochs", algo.num_learning_epochs)):
        if value < 1:
            raise ConfigError(f"agent.{name} must be >= 1, got {value}.")
    if (agent_cfg.eval_interval or 0) < 0:
        raise ConfigError(f"agent.eval_interval must be >= 0 (0 or null: none), got {agent_cfg.eval_interval}.")
    agent_cfg.eval_interval = agent_cfg.eval_interval or None
    if algo.learning_rate <= 0:
        raise ConfigError(f"agent.algorithm.learning_rate must be > 0, got {algo.learning_rate}.")
    obs_groups = agent_cfg.obs_groups or {}
    distillation = isinstance(agent_cfg, TorchRLDistillationRunnerCfg)
    if not isinstance(obs_groups, dict) or not all(isinstance(v, list | tuple) for v in obs_groups.values()):
        example = {"student": ["policy"], "teacher": ["policy"]} if distillation else {"actor": ["policy"]}
        example = example if distillation else {**example, "critic": ["critic"]}
        raise ConfigError(
            f"agent.obs_groups must map {' and '.join(map(repr, example))} to lists of observation groups, got "
            f"{obs_groups!r}; on the command line: 'agent.obs_groups={json.dumps(example, separators=(',', ':'))}'."
        )
    if distillation:
        _check_distillation(agent_cfg)
    else:
        _check_ppo(agent_cfg, num_envs)
    if agent_cfg.cudagraphs:
        if not agent_cfg.compile:
            raise ConfigError(
                "agent.cudagraphs=true needs agent.compile=true: outside torch.compile, torchrl's PPO loss checks "
                "its entropy on the host, which a CUDA graph cannot capture."
            )
        if policy.rnn_type is not None and policy.recurrent_backend == "pad":
            raise ConfigError(
                "agent.cudagraphs=true cannot replay the 'pad' recurrent backend (it splits trajectories into "
                "data-dependent shapes); set agent.policy.recurrent_backend=auto (or fused) or "
                "agent.cudagraphs=false."
            )
        train_device = learner_device(agent_cfg)
        if not train_device.startswith("cuda"):
            raise ConfigError(f"agent.cudagraphs=true needs a CUDA learner, got the device {train_device!r}.")
    if collector.cudagraph_policy and not str(agent_cfg.device).startswith("cuda"):
        raise ConfigError(
            f"agent.collector.cudagraph_policy=true needs a CUDA simulation device, got {agent_cfg.device!r}."
        )
