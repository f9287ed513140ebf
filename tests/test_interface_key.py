"""The digest under which a task's sizes are remembered (``interfaces.interface_key``), input by input: what decides
the sizes changes it, what cannot change them does not. No simulator: the configs are only resolved."""

import gymnasium as gym
import pytest
from isaaclab_tasks.utils import resolve_task_config

import isaaclab_torchrl.interfaces as interfaces
from isaaclab_torchrl.envs import IsaacLabEnvFactory

pytestmark = pytest.mark.fast

TASK = "Isaac-Cartpole-Direct"
LAUNCHER = {"device": "cpu", "visualizer": ["none"], "experience": "", "kit_args": ""}


def _factory(task=TASK, launcher=None, obs_groups=None, **env_fields) -> IsaacLabEnvFactory:
    env_cfg, _ = resolve_task_config(task, "isaaclab_torchrl_cfg_entry_point", False, overrides=[])
    for name, value in env_fields.items():
        setattr(env_cfg, name, value)
    return IsaacLabEnvFactory(task, env_cfg, launcher or LAUNCHER, num_envs=16, seed=1, obs_groups=obs_groups)


@pytest.fixture(scope="module")
def key():
    import isaaclab_torchrl  # noqa: F401  (registers the torchrl agents)

    return interfaces.interface_key(_factory())


def test_the_same_config_gives_the_same_key(key):
    assert interfaces.interface_key(_factory()) == key


def test_env_count_seed_and_device_change_no_size(key):
    factory = _factory()
    factory.env_cfg.scene.num_envs = 4096
    factory.env_cfg.seed = 123
    factory.env_cfg.sim.device = "cuda:0"
    assert interfaces.interface_key(factory) == key


def test_the_env_config_counts(key):
    assert interfaces.interface_key(_factory(observation_space=5)) != key
    assert interfaces.interface_key(_factory(decimation=3)) != key


def test_the_observation_groups_count(key):
    assert interfaces.interface_key(_factory(obs_groups={"actor": ["policy"], "critic": ["policy"]})) != key


def test_launcher_arguments_count_but_display_ones(key):
    assert interfaces.interface_key(_factory(launcher={**LAUNCHER, "enable_cameras": True})) != key
    assert interfaces.interface_key(_factory(launcher={**LAUNCHER, "experience": "other.kit"})) != key
    assert interfaces.interface_key(_factory(launcher={**LAUNCHER, "visualizer": ["newton"]})) == key
    assert interfaces.interface_key(_factory(launcher={**LAUNCHER, "device": "cuda:0"})) == key


def test_package_versions_count(key, monkeypatch):
    versions = interfaces._versions()
    monkeypatch.setattr(interfaces, "_versions", lambda: {**versions, "isaaclab": "3.0.1"})
    assert interfaces.interface_key(_factory()) != key


def test_the_source_of_the_env_class_and_of_its_bases_counts(tmp_path, monkeypatch):
    """A task module that only declares ``KeyEnv(BaseEnv)``: editing the base class's module changes the key."""
    suffix = tmp_path.name.replace("-", "_")  # module names of this test alone
    base = tmp_path / f"key_test_base_{suffix}.py"
    base.write_text(
        "from isaaclab_tasks.core.cartpole.cartpole_direct_env import CartpoleEnv\n\nclass BaseEnv(CartpoleEnv):\n"
        "    pass\n"
    )
    (tmp_path / f"key_test_env_{suffix}.py").write_text(
        f"from key_test_base_{suffix} import BaseEnv\n\nclass KeyEnv(BaseEnv):\n    pass\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    task = "Isaac-Cartpole-Key-Test"
    entry_point = f"key_test_env_{suffix}:KeyEnv"
    gym.register(id=task, entry_point=entry_point, kwargs=dict(gym.spec(TASK).kwargs), disable_env_checker=True)
    try:
        before = interfaces.interface_key(_factory(task))
        base.write_text(base.read_text() + "\n\ndef _observations(env):  # an observation of another size\n    pass\n")
        assert interfaces.interface_key(_factory(task)) != before
    finally:
        del gym.registry[task]
