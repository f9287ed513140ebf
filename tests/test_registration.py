"""Importing isaaclab_torchrl registers its agents beside, never instead of, the existing entry points."""

import glob
import os
import subprocess
import sys

import gymnasium as gym
from isaaclab_tasks.utils.parse_cfg import load_cfg_from_registry

import isaaclab_torchrl  # noqa: F401
from helpers import REPO, scalars, script_env
from isaaclab_torchrl.agents import ENTRY_POINT, LSTM_ENTRY_POINT, TorchRLRunnerCfg, agent_entry_point, register_agents


def test_cartpole_tasks_have_mlp_and_lstm_agents():
    for task in ("Isaac-Cartpole-Direct", "Isaac-Cartpole"):
        mlp = load_cfg_from_registry(task, agent_entry_point("torchrl"))
        lstm = load_cfg_from_registry(task, agent_entry_point("torchrl_lstm"))
        assert isinstance(mlp, TorchRLRunnerCfg) and mlp.policy.rnn_type is None
        assert isinstance(lstm, TorchRLRunnerCfg) and lstm.policy.rnn_type == "lstm"
        # hyperparameters ported from the task's rsl_rl config
        rsl = load_cfg_from_registry(task, "rsl_rl_cfg_entry_point")
        assert mlp.num_steps_per_env == rsl.num_steps_per_env
        assert mlp.algorithm.learning_rate == rsl.algorithm.learning_rate
        assert mlp.policy.actor_hidden_dims == rsl.actor.hidden_dims


def test_agents_are_the_rsl_rl_ports_and_the_cartpole_lstm_differs_only_where_written():
    for task in ("Isaac-Cartpole-Direct", "Isaac-Velocity-Flat-AnymalD"):
        rsl = load_cfg_from_registry(task, "rsl_rl_cfg_entry_point")
        mlp = load_cfg_from_registry(task, agent_entry_point("torchrl"))
        assert mlp.policy.noise_std_type == rsl.actor.distribution_cfg.std_type == "scalar", task
        assert mlp.experiment_name == rsl.experiment_name
    # ANYmal's recurrent agent is rsl_rl's own recurrent config, ported, in a folder of its own
    rsl = load_cfg_from_registry("Isaac-Velocity-Flat-AnymalD", "rsl_rl_recurrent_cfg_entry_point")
    lstm = load_cfg_from_registry("Isaac-Velocity-Flat-AnymalD", agent_entry_point("torchrl_lstm"))
    assert (lstm.policy.rnn_type, lstm.policy.rnn_hidden_size) == (rsl.actor.rnn_type.lower(), rsl.actor.rnn_hidden_dim)
    assert lstm.experiment_name == f"{rsl.experiment_name}_lstm"
    # Cartpole's: the MLP agent plus an LSTM of 32 units, nothing else changed
    mlp = load_cfg_from_registry("Isaac-Cartpole-Direct", agent_entry_point("torchrl")).to_dict()
    lstm = load_cfg_from_registry("Isaac-Cartpole-Direct", agent_entry_point("torchrl_lstm")).to_dict()
    assert (lstm["policy"].pop("rnn_type"), lstm["policy"].pop("rnn_hidden_size")) == ("lstm", 32)
    assert lstm.pop("experiment_name") == mlp.pop("experiment_name") + "_lstm"
    for name in ("rnn_type", "rnn_hidden_size"):
        mlp["policy"].pop(name)
    assert lstm == mlp


def test_isaaclab_builtin_torchrl_entry_point_is_untouched():
    from isaaclab_rl.torchrl import TorchRlPpoCfg

    for task in ("Isaac-Cartpole-Direct", "Isaac-Cartpole"):
        assert isinstance(load_cfg_from_registry(task, "torchrl_cfg_entry_point"), TorchRlPpoCfg)


def test_explicit_entry_point_and_third_party_task_are_honoured():
    assert agent_entry_point(LSTM_ENTRY_POINT) == LSTM_ENTRY_POINT
    gym.register(
        id="ThirdParty-Cartpole-v0",
        entry_point="isaaclab_tasks.core.cartpole.cartpole_direct_env:CartpoleEnv",
        kwargs={ENTRY_POINT: "my_package.agents:MyCfg"},
    )
    register_agents()
    assert gym.registry["ThirdParty-Cartpole-v0"].kwargs[ENTRY_POINT] == "my_package.agents:MyCfg"


def test_isaaclab_builtin_torchrl_backend_still_trains(tmp_path):
    """Isaac Lab's own `isaaclab train --rl_library torchrl`, in a process that imported our extension."""
    code = (
        "import sys, isaaclab_torchrl\n"
        "from isaaclab_rl.entrypoints.dispatch import run_train_cli\n"
        "sys.exit(run_train_cli(sys.argv[1:]))\n"
    )
    process = subprocess.run(
        [
            sys.executable,
            "-c",
            code,
            "--rl_library",
            "torchrl",
            "--task",
            "Isaac-Cartpole-Direct",
            "--num_envs",
            "16",
            "--device",
            "cpu",
            "--viz",
            "none",
            "--max_iterations",
            "1",
            "physics=newton_mjwarp",
        ],
        cwd=tmp_path,
        env=script_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert process.returncode == 0, process.stderr[-4000:]
    # Isaac Lab creates the run folder before training: what shows that it trained is what it wrote after
    written = glob.glob(os.path.join(tmp_path, "logs", "torchrl", "cartpole_direct", "*", "**", "*"), recursive=True)
    checkpoints = [path for path in written if path.endswith(".pt")]
    logged = [scalars(os.path.dirname(path)) for path in written if "tfevents" in os.path.basename(path)]
    assert checkpoints or any(logged), written


def _rsl_rl_tasks() -> list[str]:
    return sorted(task for task, spec in gym.registry.items() if "rsl_rl_cfg_entry_point" in spec.kwargs)


def _documented_unsupported_tasks() -> set[str]:
    """The tasks of the refused-task table in docs/tasks.md."""
    with open(os.path.join(REPO, "docs", "tasks.md"), encoding="utf-8") as file:
        section = file.read().split("## Tasks the torchrl runner cannot train", 1)[1].split("\n## ", 1)[0]
    return {line.split("`")[1] for line in section.splitlines() if line.startswith("| `")}


PORTED_FIELDS = {
    # our field: the rsl_rl field it is ported from (rsl_rl 5's layout)
    "seed": "seed",
    "num_steps_per_env": "num_steps_per_env",
    "max_iterations": "max_iterations",
    "save_interval": "save_interval",
    "run_name": "run_name",
    "logger": "logger",
    "wandb_project": "wandb_project",
    "neptune_project": "neptune_project",
    "clip_actions": "clip_actions",
    "check_for_nan": "check_for_nan",
    "init_at_random_ep_len": "init_at_random_ep_len",
    "algorithm.num_learning_epochs": "algorithm.num_learning_epochs",
    "algorithm.num_mini_batches": "algorithm.num_mini_batches",
    "algorithm.clip_param": "algorithm.clip_param",
    "algorithm.use_clipped_value_loss": "algorithm.use_clipped_value_loss",
    "algorithm.entropy_coef": "algorithm.entropy_coef",
    "algorithm.value_loss_coef": "algorithm.value_loss_coef",
    "algorithm.learning_rate": "algorithm.learning_rate",
    "algorithm.schedule": "algorithm.schedule",
    "algorithm.desired_kl": "algorithm.desired_kl",
    "algorithm.max_grad_norm": "algorithm.max_grad_norm",
    "algorithm.gamma": "algorithm.gamma",
    "algorithm.lam": "algorithm.lam",
    "algorithm.use_mixed_precision": "algorithm.use_mixed_precision",
    "policy.actor_hidden_dims": "actor.hidden_dims",
    "policy.critic_hidden_dims": "critic.hidden_dims",
    "policy.activation": "actor.activation",
    "policy.init_noise_std": "actor.distribution_cfg.init_std",
    "policy.noise_std_type": "actor.distribution_cfg.std_type",
    "policy.std_range": "actor.distribution_cfg.std_range",
    "policy.actor_obs_normalization": "actor.obs_normalization",
    "policy.critic_obs_normalization": "critic.obs_normalization",
}


def _field(cfg, path: str):
    for name in path.split("."):
        cfg = getattr(cfg, name)
    return list(cfg) if isinstance(cfg, list | tuple) else cfg


def _rsl_rl_cfg(task: str, key: str):
    """The task's rsl_rl config in rsl_rl 5's layout (as the port reads it)."""
    import contextlib
    import copy
    import io

    from isaaclab_rl.rsl_rl.utils import handle_deprecated_rsl_rl_cfg
    from isaaclab_tasks.utils.hydra import resolve_presets

    # a copy: the migration edits the model configs, which a task's module may share between its configs
    rsl = copy.deepcopy(resolve_presets(load_cfg_from_registry(task, key)))
    with contextlib.redirect_stdout(io.StringIO()):
        handle_deprecated_rsl_rl_cfg(rsl, "5.0.0")
    return rsl


def test_every_task_with_an_rsl_rl_agent_resolves_a_torchrl_agent_or_is_listed_as_unsupported():
    """Walks the gym registry: `--agent torchrl` and `--agent torchrl_lstm` (and `--agent torchrl_symmetry` where
    the task has an rsl_rl agent with symmetry) resolve to valid configs whose hyperparameters are the rsl_rl ones
    (every ported field), or the task is refused with a reason and listed in docs/tasks.md."""
    import argparse

    from isaaclab_torchrl.agents.validation import validate_agent_cfg
    from isaaclab_torchrl.cli import UsageError, resolve_task

    supported, unsupported, state_dependent, symmetric = [], {}, 0, []
    symmetry_key = "rsl_rl_with_symmetry_cfg_entry_point"
    for task in _rsl_rl_tasks():
        agents = ("torchrl", "torchrl_lstm", "torchrl_symmetry")
        for agent in agents if symmetry_key in gym.spec(task).kwargs else agents[:2]:
            args = argparse.Namespace(task=task, agent=agent, device="cpu", num_envs=4096, seed=None)
            try:
                env_cfg, cfg = resolve_task(args, [])
            except UsageError as exc:
                unsupported[task] = str(exc)
                continue
            validate_agent_cfg(cfg, env_cfg.scene.num_envs)
            assert isinstance(cfg, TorchRLRunnerCfg)
            if agent == "torchrl_lstm":
                assert cfg.policy.rnn_type in ("lstm", "gru"), task
            recurrent_key = "rsl_rl_recurrent_cfg_entry_point"
            key = recurrent_key if agent == "torchrl_lstm" and recurrent_key in gym.spec(task).kwargs else None
            key = symmetry_key if agent == "torchrl_symmetry" else key
            rsl = _rsl_rl_cfg(task, key or "rsl_rl_cfg_entry_point")
            for ours, theirs in PORTED_FIELDS.items():
                assert _field(cfg, ours) == _field(rsl, theirs), (task, agent, ours, theirs)
            assert (cfg.algorithm.symmetry_cfg is None) is (rsl.algorithm.symmetry_cfg is None), (task, agent)
            if cfg.algorithm.symmetry_cfg is not None:
                symmetric.append(task)
                for name in ("use_data_augmentation", "use_mirror_loss", "data_augmentation_func", "mirror_loss_coeff"):
                    ours, theirs = (getattr(c.algorithm.symmetry_cfg, name) for c in (cfg, rsl))
                    assert ours == theirs, (task, name)
            heteroscedastic = rsl.actor.distribution_cfg.class_name == "HeteroscedasticGaussianDistribution"
            assert cfg.policy.state_dependent_std is heteroscedastic, (task, agent)
            state_dependent += heteroscedastic
            assert cfg.algorithm.normalize_advantage is not rsl.algorithm.normalize_advantage_per_mini_batch, task
            supported.append(task)
        assert (task in unsupported) != (task in supported), task
    for reason in unsupported.values():
        assert "not supported" in reason, reason
    assert set(unsupported) == _documented_unsupported_tasks()
    assert len(set(supported)) + len(unsupported) == len(_rsl_rl_tasks()) == 89
    assert state_dependent == 2 * 7  # the seven tasks with rsl_rl's heteroscedastic noise, both agent keys
    # Cartpole, ANYmal-D flat and rough, ANYmal-B and -C flat and rough (docs/tasks.md)
    assert len(symmetric) == 7, symmetric


def test_configs_in_rsl_rl_5s_layout_skip_isaaclabs_migration_and_port_the_same():
    """The port runs Isaac Lab's config migration (which imports rsl_rl's runners and trackers) only for configs in
    an older layout; for every other one the migration would change nothing that is ported."""
    import contextlib
    import copy
    import io

    from isaaclab_rl.rsl_rl.utils import handle_deprecated_rsl_rl_cfg
    from isaaclab_tasks.utils.hydra import resolve_presets

    from isaaclab_torchrl.agents.rsl_rl_port import UnsupportedAgentError, _needs_migration, port_rsl_rl_cfg

    def port(cfg):
        try:
            return port_rsl_rl_cfg(cfg).to_dict()
        except UnsupportedAgentError as exc:
            return str(exc)

    skipped = migrated = 0
    for task in sorted(gym.registry):
        for key in ("rsl_rl_cfg_entry_point", "rsl_rl_recurrent_cfg_entry_point"):
            if key not in gym.spec(task).kwargs:
                continue
            with contextlib.redirect_stdout(io.StringIO()):
                rsl = load_cfg_from_registry(task, key)
                if _needs_migration(rsl):
                    migrated += 1
                    continue
                skipped += 1
                always_migrated = resolve_presets(copy.deepcopy(rsl))
                handle_deprecated_rsl_rl_cfg(always_migrated, "5.0.0")
                assert port(rsl) == port(always_migrated), (task, key)
    assert skipped > 60 and migrated > 0, (skipped, migrated)


def test_an_rsl_rl_field_the_port_does_not_honour_is_refused_by_name():
    import pytest

    from isaaclab_torchrl.agents import UnsupportedAgentError
    from isaaclab_torchrl.agents.rsl_rl_port import port_rsl_rl_cfg

    rsl = load_cfg_from_registry("Isaac-Cartpole-Direct", "rsl_rl_cfg_entry_point")
    port_rsl_rl_cfg(rsl)
    rsl.torch_compile_mode = "max-autotune-no-cudagraphs"
    with pytest.raises(UnsupportedAgentError, match=r"sets \w+\.torch_compile_mode="):
        port_rsl_rl_cfg(rsl)
    rsl = load_cfg_from_registry("Isaac-Cartpole-Direct", "rsl_rl_cfg_entry_point")
    rsl.critic.activation = "tanh"
    with pytest.raises(UnsupportedAgentError, match="critic's activation tanh differs"):
        port_rsl_rl_cfg(rsl)


DISTILLATION_FIELDS = {
    # our field: the rsl_rl field it is ported from (RslRlDistillationRunnerCfg)
    **{ours: theirs for ours, theirs in PORTED_FIELDS.items() if not ours.startswith(("algorithm.", "policy."))},
    "obs_groups": "obs_groups",
    "algorithm.num_learning_epochs": "algorithm.num_learning_epochs",
    "algorithm.learning_rate": "algorithm.learning_rate",
    "algorithm.gradient_length": "algorithm.gradient_length",
    "algorithm.max_grad_norm": "algorithm.max_grad_norm",
    "algorithm.optimizer": "algorithm.optimizer",
    "algorithm.loss_type": "algorithm.loss_type",
    "policy.actor_hidden_dims": "student.hidden_dims",
    "policy.activation": "student.activation",
    "policy.actor_obs_normalization": "student.obs_normalization",
    "policy.init_noise_std": "student.distribution_cfg.init_std",
    "policy.noise_std_type": "student.distribution_cfg.std_type",
    "policy.std_range": "student.distribution_cfg.std_range",
    "teacher.actor_hidden_dims": "teacher.hidden_dims",
    "teacher.activation": "teacher.activation",
    "teacher.actor_obs_normalization": "teacher.obs_normalization",
}


def test_distillation_agents_are_rsl_rls_ported_field_by_field():
    """Walks the gym registry: every task with an rsl_rl distillation agent (and recurrent one) resolves
    `--agent torchrl_distillation` (`torchrl_distillation_lstm`) to a valid config whose fields are rsl_rl's."""
    import argparse

    from isaaclab_torchrl.agents import TorchRLDistillationRunnerCfg
    from isaaclab_torchrl.agents.validation import validate_agent_cfg
    from isaaclab_torchrl.cli import resolve_task

    agents = {"torchrl_distillation": "rsl_rl_distillation_cfg_entry_point"}
    agents["torchrl_distillation_lstm"] = "rsl_rl_distillation_recurrent_cfg_entry_point"
    ported = []
    for task in sorted(gym.registry):
        for agent, key in agents.items():
            if key not in gym.spec(task).kwargs:
                continue
            args = argparse.Namespace(task=task, agent=agent, device="cpu", num_envs=4096, seed=None)
            env_cfg, cfg = resolve_task(args, [])
            validate_agent_cfg(cfg, env_cfg.scene.num_envs)
            assert isinstance(cfg, TorchRLDistillationRunnerCfg), (task, agent)
            rsl = _rsl_rl_cfg(task, key)
            for ours, theirs in DISTILLATION_FIELDS.items():
                assert _field(cfg, ours) == _field(rsl, theirs), (task, agent, ours, theirs)
            for name in ("student", "teacher"):
                model, ours = getattr(rsl, name), getattr(cfg, "policy" if name == "student" else name)
                rnn = (
                    (model.rnn_type, model.rnn_hidden_dim, model.rnn_num_layers) if hasattr(model, "rnn_type") else None
                )
                assert (rnn and (ours.rnn_type, ours.rnn_hidden_size, ours.rnn_num_layers)) == rnn, (task, agent, name)
            suffix = "_lstm" if key.endswith("recurrent_cfg_entry_point") else ""
            assert cfg.experiment_name == rsl.experiment_name + suffix, (task, agent)
            ported.append((task, agent))
    # ANYmal-D flat's two (docs/tasks.md)
    assert ported == [
        ("Isaac-Velocity-Flat-AnymalD", "torchrl_distillation"),
        ("Isaac-Velocity-Flat-AnymalD", "torchrl_distillation_lstm"),
    ]
