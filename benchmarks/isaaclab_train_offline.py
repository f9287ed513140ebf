"""``isaaclab train`` (rsl_rl, Isaac Lab's torchrl backend, ...) with this project's offline actuator stand-in.

    python benchmarks/isaaclab_train_offline.py --rl_library rsl_rl --task Isaac-Velocity-Flat-AnymalD ...

With the vendored asset root, ANYmal's actuator network is missing; this project's runner then uses the
DC-motor model (:func:`isaaclab_torchrl.offline_assets.use_available_actuators`). This wrapper makes the env configs of
Isaac Lab's own trainers do the same, so that benchmarks compare the same robot. Other tasks are unchanged.
"""

import importlib
import sys

import gymnasium as gym
import isaaclab_tasks  # noqa: F401  (registers the tasks)
from isaaclab_rl.entrypoints.dispatch import run_train_cli

from isaaclab_torchrl.offline_assets import use_available_actuators


def with_available_actuators(entry_point: str):
    """An env-config entry point: the config of ``entry_point`` (``module:Class``) with available actuators."""

    def env_cfg():
        module, name = entry_point.split(":")
        cfg = getattr(importlib.import_module(module), name)()
        use_available_actuators(cfg)
        return cfg

    return env_cfg


def main(argv: list[str]) -> int | None:
    """``isaaclab train`` with ANYmal's velocity tasks on the available actuators."""
    for spec in gym.registry.values():
        entry_point = spec.kwargs.get("env_cfg_entry_point")
        if isinstance(entry_point, str) and ".velocity." in entry_point and "anymal" in entry_point:
            spec.kwargs["env_cfg_entry_point"] = with_available_actuators(entry_point)
    return run_train_cli(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
