"""The observation and action sizes the models are built for (:class:`~isaaclab_torchrl.models.EnvInterface`):
read from the environment once, in a short-lived probe subprocess, and remembered in the user's cache folder.

The main process never simulates, yet it must know the network sizes before the collector workers start. A probe
process that builds the task with one environment tells it, at the cost of a second simulation start
(docs/benchmarks.md). The answer depends only on the task's config and code, so it is kept under a digest of
what decides it (:func:`interface_key`); the next run of the same task skips the probe. Two checks catch an entry
that is stale all the same (code that changed an observation's size where the digest does not look): each worker
compares the sizes of the environment it builds with the remembered ones
(:meth:`~isaaclab_torchrl.envs.IsaacLabEnvFactory.__call__`), and a checkpoint that does not fit the remembered
sizes makes the probe run again before the checkpoint is blamed (:func:`isaaclab_torchrl.training.start`). Either
way the stale entry is named and replaced or removed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import importlib.metadata
import importlib.util
import inspect
import json
import os
import re

import cloudpickle

from .envs import IsaacLabEnvFactory, env_interface
from .models import EnvInterface
from .symmetry import SymmetryError
from .workers import worker_context

CALLABLE = re.compile(r"^([A-Za-z_][\w.]*):[A-Za-z_][\w.]*$")
"""How Isaac Lab's ``class_to_dict`` writes a function or class of a config: ``module:qualified_name``."""
ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
"""Memory addresses in default object reprs, which differ from process to process."""
PACKAGES = ("isaaclab", "isaaclab_rl", "isaaclab_tasks", "isaaclab_newton", "isaaclab_physx", "newton", "warp-lang")
PACKAGES += ("mujoco-warp", "torchrl", "tensordict", "isaaclab_torchrl")
"""The installed packages whose versions are part of the digest: their code builds the observations."""
DISPLAY_ARGS = ("device", "visualizer", "livestream", "verbose", "info", "headless")
"""Launcher arguments that change no observation; every other one (``--enable_cameras``, ``--experience``, ...) is
part of the digest."""


def interface_cache_dir() -> str:
    """``isaaclab_torchrl/env_interfaces`` in the user's cache folder (``$XDG_CACHE_HOME`` or ``~/.cache``)."""
    cache_home = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache_home, "isaaclab_torchrl", "env_interfaces")


def _strings(value):
    """Every string inside nested dicts and lists."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _strings(item)


def interface_key(factory: IsaacLabEnvFactory) -> str:
    """SHA-256 of what decides the sizes: the task id, the observation groups, the environment config (without
    the env count, seed and device, which change no size), the launcher arguments but those of :data:`DISPLAY_ARGS`,
    the versions of :data:`PACKAGES`, and the source of every module the config names (the config's own, the
    observation and action terms', the env class's and its base classes') and of this package's env wrapper; with
    a symmetry function, its name and the source of its module and of :mod:`isaaclab_torchrl.symmetry`."""
    from isaaclab.utils.dict import class_to_dict

    config = class_to_dict(factory.env_cfg)
    config.get("scene", {}).pop("num_envs", None)
    config.pop("seed", None)
    config.get("sim", {}).pop("device", None)
    launcher = {key: value for key, value in factory.launcher_args.items() if not key.startswith(DISPLAY_ARGS)}
    parts = [
        factory.task,
        json.dumps(factory.obs_groups, sort_keys=True, default=repr),
        ADDRESS.sub("", json.dumps(config, sort_keys=True, default=repr)),
        json.dumps(launcher, sort_keys=True, default=repr),
        json.dumps(_versions(), sort_keys=True),
        _qualified_name(factory.symmetry_function),
    ]
    modules = {type(factory.env_cfg).__module__, __name__.rpartition(".")[0] + ".envs", *_env_class_modules(factory)}
    if factory.symmetry_function is not None:
        modules.update({factory.symmetry_function.__module__, __name__.rpartition(".")[0] + ".symmetry"})
    modules.update(match.group(1) for match in map(CALLABLE.match, _strings(config)) if match)
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part.encode() + b"\0")
    for module in sorted(modules):
        with contextlib.suppress(ImportError, ValueError, AttributeError):
            origin = importlib.util.find_spec(module).origin
            if origin and os.path.isfile(origin):
                with open(origin, "rb") as file:
                    digest.update(module.encode() + b"\0" + file.read() + b"\0")
    return digest.hexdigest()


def _qualified_name(function) -> str:
    """``module:qualified_name`` of the symmetry function, or nothing without one."""
    return "" if function is None else f"{function.__module__}:{function.__qualname__}"


def _versions() -> dict[str, str | None]:
    versions = {}
    for package in PACKAGES:
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            versions[package] = None
    return versions


def _env_class_modules(factory: IsaacLabEnvFactory) -> list[str]:
    """The modules of the task's env class and of its base classes (a task module may only declare
    ``AntEnv(LocomotionDirectEnv)``); none when the class cannot be imported here."""
    import gymnasium as gym
    from isaaclab.utils.string import string_to_callable

    try:
        entry_point = gym.spec(factory.task).entry_point
        env_class = string_to_callable(entry_point) if isinstance(entry_point, str) else entry_point
        return [cls.__module__ for cls in inspect.getmro(env_class)]
    except Exception:  # an entry point that does not import here: the workers' size check still holds
        return []


def _probe(pickled_factory: bytes, queue) -> None:
    try:
        factory = cloudpickle.loads(pickled_factory)
        env = factory()
        try:
            interface = env_interface(env, factory.symmetry_function)
        except SymmetryError as exc:
            queue.put(("symmetry", str(exc)))
            return
        queue.put(("ok", interface))
        # the parent ends this process once it has the answer: closing the simulation would only delay the workers
        env.close()
    except BaseException as exc:  # reported to the parent, which raises it
        import traceback

        queue.put(("error", f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"))


def probe_env_interface(factory: IsaacLabEnvFactory, timeout: float = 600.0) -> EnvInterface:
    """Creates the environment once in a short-lived subprocess (with one env) and returns its sizes.

    Raises:
        SymmetryError: the agent's symmetry function is not of the form :mod:`isaaclab_torchrl.symmetry` reads.
    """
    probe = IsaacLabEnvFactory(
        factory.task,
        factory.env_cfg,
        factory.launcher_args,
        num_envs=1,
        seed=factory.seed,
        obs_groups=factory.obs_groups,
        external_callback=factory.external_callback,
        symmetry_function=factory.symmetry_function,
    )
    ctx = worker_context()
    queue = ctx.Queue()
    # cloudpickle, as torchrl's collectors use for their env factories: task configs may hold lambdas
    process = ctx.Process(target=_probe, args=(cloudpickle.dumps(probe), queue), daemon=True)
    process.start()
    try:
        status, payload = queue.get(timeout=timeout)
    except Exception as exc:
        raise RuntimeError(f"The environment probe process gave no answer (exit code {process.exitcode}).") from exc
    finally:
        with contextlib.suppress(Exception):
            process.kill()  # nothing of its simulation is needed: no waiting for it to close
        process.join(timeout=30)
    if status == "symmetry":
        function = factory.symmetry_function
        raise SymmetryError(
            f"agent.algorithm.symmetry_cfg.data_augmentation_func {function.__module__}:{function.__qualname__} is not "
            f"a mirror this runner can apply (a column selection with signs per copy, the original first): {payload}."
        )
    if status != "ok":
        raise RuntimeError(f"Creating the environment {factory.task!r} failed in the probe process:\n{payload}")
    return payload


def read_env_interface(factories: list[IsaacLabEnvFactory], probe: bool = False) -> tuple[EnvInterface, bool]:
    """The sizes of the factories' environment, and whether they came from the cache (else from a probe).

    With ``probe``, the remembered entry is not read: the probe runs and replaces it. Every factory is told the
    sizes and the cache entry, so that its worker checks them (see the module's text).
    """
    path = os.path.join(interface_cache_dir(), interface_key(factories[0]) + ".json")
    interface, cached = None, False
    if not probe:
        with contextlib.suppress(OSError, ValueError, TypeError):
            with open(path) as file:
                fields = json.load(file)
            interface = EnvInterface.from_dict(fields)
            cached = True
    if interface is None:
        interface = probe_env_interface(factories[0])
        with contextlib.suppress(OSError):  # a cache that cannot be written only costs the next run a probe
            os.makedirs(os.path.dirname(path), exist_ok=True)
            partial = f"{path}.{os.getpid()}.tmp"
            with open(partial, "w") as file:
                json.dump(dataclasses.asdict(interface), file)
            os.replace(partial, path)
    for factory in factories:
        factory.expected_interface, factory.interface_cache_file = interface, path
    return interface, cached
