"""Isaac Lab environments for torchrl collectors: a picklable factory that builds the simulation inside a
collector subprocess, and the torchrl wrapper the runner trains on."""

from __future__ import annotations

import contextlib
import os
from typing import Any

import torch
from isaaclab_rl.torchrl import IsaacLabTorchRLWrapper
from tensordict import TensorDict, TensorDictBase
from tensordict.utils import expand_as_right
from torchrl.data import Composite, Unbounded

from .autoreset import AutoResetEnv
from .models import EnvInterface

FINAL_OBS_KEY = "final_obs"
"""Sub-tensordict of ``"next"`` with the true next observation of the critic's input (see :class:`IsaacLabEnv`)."""
EPISODE_LOG_KEY = "episode_log"
"""Sub-tensordict of ``"next"`` with Isaac Lab's ``extras["log"]`` terms at the steps where episodes ended."""
EPISODE_SUMS = {"episode_reward": torch.float32, "step_count": torch.int64}
"""Each environment's running return and length since its episode started (the keys of torchrl's ``RewardSum`` and
``StepCounter``), as observations: the root value before a step, ``"next"`` the value after it."""


class IsaacLabEnv(IsaacLabTorchRLWrapper):
    """Isaac Lab's torchrl wrapper (observation groups as keys, true final observations on done steps) plus:

    * ``("next", "final_obs", <group>)`` repeats the next observation of each group the critic reads.
      ``compact_obs=True`` drops ``("next", <obs>)`` from the collected batches, but a time-out's final
      observation and the observation after the rollout's last step cannot be recovered from the root
      observations, and GAE needs both to bootstrap with V(s_T). The entry is declared in the reward spec,
      the spec of per-step outputs that are neither dropped by ``compact_obs`` nor carried to the next step
      by ``step_mdp``.
    * ``episode_reward`` and ``step_count`` (:data:`EPISODE_SUMS`) are the running return and length of each
      episode, as torchrl's ``RewardSum`` and ``StepCounter`` keep them, in two operations per step each: the step
      adds the reward and 1, and the native auto-reset zeroes them where an episode ended.
    * ``("next", "episode_log", <name>)`` carries Isaac Lab's ``extras["log"]`` terms (``Episode_Reward/*``,
      ``Episode_Termination/*``, ``Curriculum/*``, ...) out of the worker: each step's value repeated for every
      environment; it is fresh on the rows whose episode ended at that step (``done``), so the mean over those rows
      gives the per-episode mean (NaN where the task did not log the term).

    Args:
        env: The Isaac Lab environment.
        clip_actions: Action clipping range, or ``None``.
        obs_groups: The runner's ``obs_groups`` (see :func:`resolve_obs_groups`).
        random_episode_start: Start the first episodes at random points of their time limit.
    """

    def __init__(
        self, env, clip_actions: float | None, obs_groups: dict | None = None, random_episode_start: bool = False
    ):
        super().__init__(env, clip_actions=clip_actions)
        self.obs_groups = resolve_obs_groups(obs_groups, self.unwrapped.single_observation_space)
        self.next_obs_keys = list(dict.fromkeys(self.obs_groups["critic"] + self.obs_groups.get("rnd_state", [])))
        """The groups whose true next observation each step keeps (the critic's; RND's novelty of the state reached);
        none for a distillation run, which has no critic."""
        self.random_episode_start = random_episode_start
        self.finite_horizon = getattr(self.unwrapped.cfg, "is_finite_horizon", False)
        self._final_obs_seen = False
        # torchrl's native auto-reset (the flag its own IsaacLabWrapper(native_autoreset=True) sets): a step's done
        # environments are not reset again by a reset call (nor its host syncs), their next observations start the
        # new episodes, and the transforms and the episode-start flag are reset from the done mask
        self._torchrl_native_autoreset = True
        # the first reset tells the task's episode terms (Isaac Lab fills extras["log"] on resets) and obs dtypes
        obs, _ = self.env.reset()
        self._declare_observation_dtypes(obs)
        spec = self.observation_spec.clone()
        for key, dtype in EPISODE_SUMS.items():
            spec[key] = Unbounded((*self.batch_size, 1), dtype=dtype, device=self.device)
        self.observation_spec = spec
        self.log_names = sorted(self.unwrapped.extras.get("log", {}).keys())
        rewards = self.full_reward_spec.clone()
        if self.next_obs_keys:
            rewards[FINAL_OBS_KEY] = Composite(
                {key: self.observation_spec[key].clone() for key in self.next_obs_keys}, shape=self.batch_size
            )
        if self.log_names:
            rewards[EPISODE_LOG_KEY] = Composite(
                {name: Unbounded((*self.batch_size, 1), device=self.device) for name in self.log_names},
                shape=self.batch_size,
            )
        self.full_reward_spec = rewards

    def _declare_observation_dtypes(self, obs: dict) -> None:
        """Isaac Lab declares every group float32; a group the task gives in another dtype (uint8 camera images) is
        declared, and so collected and sent from the worker, in that dtype."""
        spec = self.observation_spec.clone()
        for key, value in obs.items():
            if key in spec.keys() and isinstance(value, torch.Tensor) and value.dtype != spec[key].dtype:
                spec[key] = Unbounded(spec[key].shape, dtype=value.dtype, device=self.device)
        self.observation_spec = spec

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Isaac Lab's wrapper's step (its clipping, its copies of the buffers Isaac Lab reuses, its finite-horizon
        rule), with the true final observations, the episodes' running sums and terms, built as one tensordict
        without validating each entry (all are the step's own tensors of the env's batch size and device)."""
        actions = tensordict.get("action")
        if self._clip_actions is not None:
            actions = torch.clamp(actions, -self._clip_actions, self._clip_actions)
        obs, reward, terminated, truncated, extras = self.env.step(actions)
        shape = (*self.batch_size, 1)
        # Isaac Lab reuses these buffers across steps
        reward, terminated, truncated = (value.reshape(shape).clone() for value in (reward, terminated, truncated))
        if self.finite_horizon:  # the time limit is terminal (the RSL-RL wrapper's convention)
            terminated |= truncated
            truncated.zero_()
        done = terminated | truncated
        out = {**obs, "reward": reward, "terminated": terminated, "truncated": truncated, "done": done}
        out |= {
            "episode_reward": tensordict.get("episode_reward") + reward,
            "step_count": tensordict.get("step_count") + 1,
        }
        if self.next_obs_keys:
            out[FINAL_OBS_KEY] = self._final_observations(obs, extras, done)
        if self.log_names:
            out[EPISODE_LOG_KEY] = self._episode_log()
        return TensorDict._new_unsafe(out, batch_size=self.batch_size, device=self.device)

    def _final_observations(self, obs: dict, extras: dict, done: torch.Tensor) -> TensorDict:
        """The true final observations of the groups the critic reads: Isaac Lab resets done environments inside its
        step, their next observations stay the new episodes' first ones (torchrl's native auto-reset carries them to
        the next step), and ``extras["final_obs"]``, refreshed on steps with resets, is read where done only."""
        final_obs, done = extras.get("final_obs", obs), done.reshape(self.batch_size)
        self._final_obs_seen |= final_obs is not obs
        if not self._final_obs_seen and bool(done.any()):  # until the first ones came (Isaac Lab syncs on resets)
            raise RuntimeError(
                "Episodes ended without Isaac Lab's extras['final_obs'], which the critic's bootstrap needs: the task "
                "replaces env.extras where it should update it."
            )
        final = {
            key: torch.where(expand_as_right(done, obs[key]), final_obs[key], obs[key]) for key in self.next_obs_keys
        }
        return TensorDict._new_unsafe(final, batch_size=self.batch_size, device=self.device)

    def _reset_on_native_autoreset(self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase):
        """The running sums start again where an episode ended (the reset mask: the step's ``done``)."""
        reset = tensordict.get("_reset")
        for key in EPISODE_SUMS:
            tensordict_reset.set(key, tensordict_reset.get(key).masked_fill(reset, 0))
        return tensordict_reset

    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs) -> TensorDictBase:
        out = super()._reset(tensordict, **kwargs)
        for key, dtype in EPISODE_SUMS.items():
            out[key] = torch.zeros((*self.batch_size, 1), dtype=dtype, device=self.device)
        full_reset = tensordict is None or tensordict.get("_reset", None) is None
        if full_reset and self.random_episode_start:
            # rsl_rl's init_at_random_ep_len: spread the first time-outs so episodes do not end in lockstep
            lengths = self.unwrapped.episode_length_buf
            lengths[:] = torch.randint_like(lengths, high=int(self.unwrapped.max_episode_length))
        return out

    def _episode_log(self) -> TensorDict:
        # extras["log"] is refreshed on the steps with resets and stale otherwise; each term's value is repeated for
        # every environment (views, no copy) and masked by done where it is read, so that no host sync asks whether
        # any environment was reset
        log, device = self.unwrapped.extras.get("log", {}), self.device
        values = torch.stack(
            [torch.as_tensor(log.get(name, torch.nan), dtype=torch.float32, device=device) for name in self.log_names]
        )
        terms = {name: values[index].expand(*self.batch_size, 1) for index, name in enumerate(self.log_names)}
        return TensorDict._new_unsafe(terms, batch_size=self.batch_size, device=device)


def resolve_obs_groups(obs_groups: dict | None, space) -> dict[str, list[str]]:
    """The observation groups the actor and the critic read, checked against the task's observation space.

    Like rsl_rl: without an ``"actor"`` entry the actor reads ``policy``; without a ``"critic"`` entry the critic
    reads ``critic`` when the task defines it (asymmetric actor-critic), else the actor's groups. With an
    ``"rnd_state"`` entry (random network distillation), an empty one means the task's ``rnd_state`` group, else
    ``policy``. With a ``"teacher"`` entry (a distillation run) the actor is the student, which reads
    ``"student"``, the teacher reads ``"teacher"`` (empty: the task's group of that name, else ``policy``), and there
    is no critic.

    Raises:
        ValueError: a group the task does not have, or one that is neither a flat vector nor an image (``[C, H, W]``
            per environment, which a CNN reads), such as a nested group.
    """
    import gymnasium as gym

    obs_groups = dict(obs_groups or {})
    groups = space.spaces

    def named_or_policy(name: str) -> list[str]:
        return list(obs_groups.get(name) or ([name] if name in groups else ["policy"]))

    if "teacher" in obs_groups:
        resolved = {"actor": named_or_policy("student"), "critic": [], "teacher": named_or_policy("teacher")}
    else:
        actor = list(obs_groups.get("actor") or ["policy"])
        resolved = {
            "actor": actor,
            "critic": list(obs_groups.get("critic") or (["critic"] if "critic" in groups else actor)),
        }
    if "rnd_state" in obs_groups:
        resolved["rnd_state"] = named_or_policy("rnd_state")
    names = {"actor": "student"} if "teacher" in obs_groups else {}
    for name, keys in resolved.items():
        for key in keys:
            if key not in groups:
                raise ValueError(
                    f"The {names.get(name, name)} reads observation group {key!r}, which the task does not have "
                    f"(groups: {sorted(groups)}); set agent.obs_groups."
                )
            group = groups[key]
            if not isinstance(group, gym.spaces.Box) or len(group.shape) not in (1, 3):
                raise ValueError(
                    f"Observation group {key!r} is {group}; the torchrl runner reads flat vector groups and images "
                    "([C, H, W] per environment) only (set concatenate_terms=True for the group)."
                )
    return resolved


class IsaacLabEnvFactory:
    """Builds one Isaac Lab environment, wrapped for torchrl, inside the calling process.

    It is what the collectors' ``create_env_fn`` receives: it pickles into the collector subprocesses, starts the
    simulation runtime there (nothing for kitless Newton; Kit when the config needs it) and keeps it alive.

    Args:
        task: Gym id of the task.
        env_cfg: The resolved environment config (Hydra overrides and presets applied).
        launcher_args: Isaac Lab launcher arguments (``--viz``, ``--device``, ...), as a dict.
        num_envs: Environments simulated by this factory's environment.
        seed: Seed of this environment.
        clip_actions: Action clipping range, or ``None``.
        obs_groups: The runner's ``obs_groups`` (see :func:`resolve_obs_groups`).
        random_episode_start: Start the first episodes at random points of their time limit.
        external_callback: ``--external_callback``: the callable that registers the task, run in the worker too.
        symmetry_function: The agent's symmetry augmentation function, whose form the probe reads.
    """

    def __init__(
        self,
        task: str,
        env_cfg: Any,
        launcher_args: dict,
        num_envs: int,
        seed: int,
        clip_actions=None,
        obs_groups: dict | None = None,
        random_episode_start: bool = False,
        external_callback: str | None = None,
        symmetry_function=None,
    ):
        self.task, self.env_cfg, self.launcher_args = task, env_cfg, launcher_args
        self.num_envs, self.seed, self.clip_actions = num_envs, seed, clip_actions
        self.obs_groups, self.random_episode_start = obs_groups, random_episode_start
        self.external_callback, self.symmetry_function = external_callback, symmetry_function
        self.expected_interface: EnvInterface | None = None
        """The sizes the worker's policy is built for, checked against the env (set by ``read_env_interface``)."""
        self.interface_cache_file: str | None = None
        """Where :attr:`expected_interface` was remembered; removed if the environment disagrees."""

    def __call__(self) -> AutoResetEnv:
        import gymnasium as gym
        import isaaclab_tasks  # noqa: F401  (registers the tasks in this process)
        from isaaclab.app import launch_simulation
        from isaaclab.cli import load_external_tasks
        from isaaclab.envs import DirectMARLEnvCfg, multi_agent_to_single_agent
        from isaaclab.utils.string import string_to_callable
        from isaaclab_rl.entrypoints.common import request_warp_determinism

        from .offline_assets import use_offline_assets

        load_external_tasks()  # the tasks of installed packages, as `isaaclab train` finds them
        if self.external_callback:
            string_to_callable(self.external_callback, separator=".")()
        env_cfg = self.env_cfg
        use_offline_assets(env_cfg)
        env_cfg.scene.num_envs = self.num_envs
        env_cfg.seed = self.seed
        # Isaac Lab then returns the true final observation of done environments in extras["final_obs"]
        env_cfg.compute_final_obs = True
        if getattr(env_cfg.sim.physics, "deterministic", False):  # --deterministic: Warp's too, before the build
            request_warp_determinism(env_cfg.sim.physics)
        simulation = launch_simulation(env_cfg, dict(self.launcher_args))
        simulation.__enter__()
        env = gym.make(self.task, cfg=env_cfg)
        if isinstance(env_cfg, DirectMARLEnvCfg):
            # as Isaac Lab's rsl_rl workflow trains a multi-agent task: one agent, the agents' observations
            # concatenated, their actions split, their rewards summed, an episode ending when all agents' end
            env = multi_agent_to_single_agent(env)
        wrapped = IsaacLabEnv(
            env,
            clip_actions=self.clip_actions,
            obs_groups=self.obs_groups,
            random_episode_start=self.random_episode_start,
        )
        # the runtime closes when the environment is garbage-collected with it
        wrapped._simulation = simulation
        env = AutoResetEnv(wrapped)
        actual = env_interface(env) if self.expected_interface is not None else None
        if actual is not None and actual != self.expected_interface:
            if self.interface_cache_file:
                with contextlib.suppress(OSError):
                    os.remove(self.interface_cache_file)
            raise RuntimeError(
                f"The environment's sizes ({actual}) differ from the ones remembered for this task from an earlier "
                f"run ({self.expected_interface}): the task's code changed them. The remembered sizes are removed; "
                "start the training again."
            )
        return env


def symmetry_function(agent_cfg):
    """The agent's symmetry augmentation function, or ``None`` without symmetry."""
    symmetry = getattr(agent_cfg.algorithm, "symmetry_cfg", None)
    return None if symmetry is None else symmetry.data_augmentation_func


def env_obs_groups(agent_cfg) -> dict | None:
    """The agent's ``obs_groups`` as the env wrapper reads them (:func:`resolve_obs_groups`): with an ``rnd_state``
    entry (empty: the default) when it uses RND, with ``student`` and ``teacher`` entries for a distillation run.

    Args:
        agent_cfg: The agent config, or its dict (a checkpoint's ``config``).
    """
    cfg = agent_cfg if isinstance(agent_cfg, dict) else agent_cfg.to_dict()
    obs_groups = dict(cfg.get("obs_groups") or {})
    if "teacher" in cfg:
        return {"student": None, "teacher": None, **obs_groups}
    if (cfg.get("algorithm") or {}).get("rnd_cfg") is None:
        return cfg.get("obs_groups")
    obs_groups.setdefault("rnd_state", None)
    return obs_groups


def make_env_factories(
    task: str, env_cfgs: list, agent_cfg, launcher_args: dict, external_callback: str | None = None
) -> list[IsaacLabEnvFactory]:
    """One factory per collector worker: worker ``i`` simulates ``env_cfgs[i]`` with an equal share of the first
    config's environments and the seed ``agent_cfg.seed + i``, with the agent's action clipping, observation groups
    and random episode starts."""
    num_envs = env_cfgs[0].scene.num_envs // len(env_cfgs)
    return [
        IsaacLabEnvFactory(
            task,
            env_cfg,
            launcher_args,
            num_envs=num_envs,
            seed=agent_cfg.seed + index,
            clip_actions=agent_cfg.clip_actions,
            obs_groups=env_obs_groups(agent_cfg),
            random_episode_start=agent_cfg.init_at_random_ep_len,
            external_callback=external_callback,
            symmetry_function=symmetry_function(agent_cfg),
        )
        for index, env_cfg in enumerate(env_cfgs)
    ]


def env_interface(env, symmetry_function=None) -> EnvInterface:
    """Reads the observation groups of actor and critic, their sizes and the action size from a wrapped env, and
    with ``symmetry_function`` (the agent's augmentation function), the form of the task's symmetry.

    Raises:
        SymmetryError: the augmentation function is not of the form :mod:`isaaclab_torchrl.symmetry` reads.
    """
    obs_spec = env.observation_spec
    groups = env.base_env.obs_groups
    rnd_keys, teacher_keys = tuple(groups.get("rnd_state", ())), tuple(groups.get("teacher", ()))
    symmetry = None
    if symmetry_function is not None:
        from .symmetry import read_symmetry

        space = env.base_env.unwrapped.single_observation_space
        sizes = {name: int(box.shape[-1]) for name, box in space.spaces.items()}
        obs_keys = tuple(dict.fromkeys(groups["actor"] + groups["critic"]))
        symmetry = read_symmetry(
            symmetry_function, env.base_env.unwrapped, sizes, obs_keys, int(env.action_spec.shape[-1])
        )
    read = dict.fromkeys(groups["actor"] + groups["critic"] + list(rnd_keys) + list(teacher_keys))
    images = []
    for key in read:
        shape = obs_spec[key].shape[len(env.batch_size) :]
        if len(shape) == 3:
            images.append((key, tuple(int(n) for n in shape), str(obs_spec[key].dtype).removeprefix("torch.")))
    image_names = {name for name, _, _ in images}

    def flat_size(keys) -> int:
        return sum(int(obs_spec[key].shape[-1]) for key in keys if key not in image_names)

    return EnvInterface(
        actor_obs_keys=tuple(groups["actor"]),
        actor_obs_dim=flat_size(groups["actor"]),
        critic_obs_keys=tuple(groups["critic"]),
        critic_obs_dim=flat_size(groups["critic"]),
        action_dim=int(env.action_spec.shape[-1]),
        rnd_obs_keys=rnd_keys,
        rnd_obs_dim=flat_size(rnd_keys),
        teacher_obs_keys=teacher_keys,
        teacher_obs_dim=flat_size(teacher_keys),
        step_dt=float(env.base_env.unwrapped.step_dt),
        symmetry=symmetry,
        images=tuple(images),
    )
