"""Image observations: Isaac Lab's camera Cartpole renders kitless on the CPU (Newton's Warp renderer), its uint8
images stay uint8 in the collected batches, a CNN actor learns from them, plays and exports with image inputs; the
CNN configs of rsl_rl's image agents port, and shared encoders are one copy of the weights."""

import os

import onnxruntime
import pytest
import torch
from tensordict import TensorDict

from helpers import CPU_ARGS, SIMULATION_CPU_ARGS, assert_ok, run_dirs, run_script, scalars, tasks_env

TASK = ["--task", "camera_cartpole:Isaac-Cartpole-Camera-Uint8-Test"]


def test_the_camera_cartpole_trains_on_uint8_images_plays_and_exports(workdir):
    args = [*TASK, "--num_envs", "4", *CPU_ARGS]
    overrides = ["agent.num_steps_per_env=16", "agent.algorithm.num_mini_batches=2"]
    trained = run_script("train.py", [*args, "--max_iterations", "2", *overrides], cwd=workdir, extra_env=tasks_env())
    assert_ok(trained)
    # two stacked RGB frames of 32 x 32 pixels, one byte each, in the batch as the camera gives them
    assert "actor observes policy (0), critic critic (4); 1 actions; policy 6x32x32 uint8" in trained.stdout
    assert "batch bytes per env step: policy 6144 (uint8 6x32x32), " in trained.stdout
    (run_dir,) = run_dirs(workdir, "cartpole_camera")
    assert [step for step, _ in scalars(run_dir)["Loss/surrogate"]] == [1, 2]
    played = run_script(
        "play.py", [*args, "--checkpoint", run_dir, "--max_steps", "5"], cwd=workdir, extra_env=tasks_env()
    )
    assert_ok(played)
    session = onnxruntime.InferenceSession(os.path.join(run_dir, "exported", "policy.onnx"))
    (image,) = session.get_inputs()
    assert (image.name, image.type, image.shape) == ("policy", "tensor(uint8)", [1, 6, 32, 32])

    # LEAPP's export traces the camera's frames through the CNN, and its replay validates the pipeline
    leapp_args = [*TASK, "--checkpoint", run_dir, *SIMULATION_CPU_ARGS]
    leapp = run_script("export.py", leapp_args, cwd=workdir, extra_env=tasks_env())
    assert_ok(leapp)
    with open(os.path.join(run_dir, TASK[1].split(":")[-1], "log.txt")) as log:
        assert "passed validation (5 examples)" in log.read()


@pytest.mark.fast
def test_rsl_rls_cnn_agent_ports_and_shared_encoders_are_one_copy():
    import isaaclab_torchrl  # noqa: F401  (registers the ported agents)
    from isaaclab_torchrl.agents import ported_agent
    from isaaclab_torchrl.models import EnvInterface, make_models

    cfg = ported_agent("Isaac-Cartpole-Camera").policy
    cnn = cfg.actor_cnn_cfg
    assert (cnn.output_channels, cnn.kernel_size, cnn.stride, cnn.activation) == (
        [8, 16, 16],
        [5, 3, 3],
        [2, 2, 2],
        "relu",
    )
    assert (cfg.critic_cnn_cfg, cfg.share_cnn_encoders, cfg.encoder) == (None, False, "cnn")
    images = (("camera", (3, 24, 24), "uint8"),)
    interface = EnvInterface(("camera",), 0, ("state", "camera"), 4, 1, images=images)
    cfg.share_cnn_encoders = True
    actor, critic = make_models(cfg, interface, "cpu")
    actor_cnn = actor.parts.images.encoders
    assert any(module is actor_cnn for module in critic.modules())
    batch = TensorDict(camera=torch.randint(0, 256, (5, 3, 24, 24), dtype=torch.uint8), state=torch.randn(5, 4))
    batch.batch_size = [5]
    assert actor(batch.clone())["action"].shape == (5, 1)
    assert critic(batch.clone())["state_value"].shape == (5, 1)


@pytest.mark.fast
def test_the_direct_camera_cartpole_resolves_and_its_declared_spaces_build_the_networks():
    """Isaac-Cartpole-Camera-Direct declares its spaces in its config (the manager-based camera tasks' image shapes
    come from their scenes, which need their assets): its ported agent validates and builds on them."""
    import argparse

    import isaaclab_torchrl  # noqa: F401
    from isaaclab_torchrl.agents.validation import validate_agent_cfg
    from isaaclab_torchrl.cli import resolve_task
    from isaaclab_torchrl.models import EnvInterface, make_models

    args = argparse.Namespace(
        task="Isaac-Cartpole-Camera-Direct", agent="torchrl", device="cpu", num_envs=64, seed=None
    )
    env_cfg, cfg = resolve_task(args, [])
    validate_agent_cfg(cfg, env_cfg.scene.num_envs)
    camera = env_cfg.scene.tiled_camera
    shape = (env_cfg.observation_space[0] * env_cfg.frame_stack, camera.height, camera.width)  # frames stacked
    images = (("policy", shape, "float32"),)
    interface = EnvInterface(("policy",), 0, ("critic",), env_cfg.state_space, env_cfg.action_space, images=images)
    actor, critic = make_models(cfg.policy, interface, "cpu")
    batch = TensorDict(policy=torch.rand(2, *shape), critic=torch.randn(2, env_cfg.state_space), batch_size=[2])
    assert actor(batch.clone())["action"].shape == (2, 1)
    assert critic(batch.clone())["state_value"].shape == (2, 1)
