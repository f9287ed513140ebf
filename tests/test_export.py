"""Exported TorchScript and ONNX policies act like the runner's deterministic policy, across a state reset."""

import numpy as np
import onnxruntime
import pytest
import torch
from tensordict import TensorDict
from torchrl.envs.utils import ExplorationType, set_exploration_type

from isaaclab_torchrl.agents import TorchRLCNNCfg, TorchRLPolicyCfg
from isaaclab_torchrl.export import export_policy
from isaaclab_torchrl.models import EnvInterface, make_models, observation_normalizers

pytestmark = pytest.mark.fast

OBS, ACT, ENVS, STEPS, RESET_AT = 5, 3, 4, 7, 4


def _policy_actions(actor, rnn_type, observations):
    """Runs the actor as the collectors do: step by step, recurrent state carried, zeroed at RESET_AT."""
    state_keys = {"lstm": ["actor_rnn_h", "actor_rnn_c"], "gru": ["actor_rnn_h"]}.get(rnn_type, [])
    td = TensorDict({"policy": observations[0]}, [ENVS])
    for key in state_keys:
        td[key] = torch.zeros(ENVS, 1, 16)
    actions = []
    with torch.no_grad(), set_exploration_type(ExplorationType.DETERMINISTIC):
        for step in range(STEPS):
            td["policy"] = observations[step]
            td["is_init"] = torch.full((ENVS, 1), step in (0, RESET_AT))
            if step == RESET_AT:
                for key in state_keys:
                    td[key] = torch.zeros_like(td[key])
            out = actor(td)
            actions.append(out["action"].clone())
            td = TensorDict({key: out["next", key] for key in state_keys}, [ENVS])
    return torch.stack(actions)


@pytest.mark.parametrize(
    ("rnn_type", "normalize", "state_dependent_std"),
    [(None, False, False), (None, True, False), ("lstm", True, False), ("gru", True, False), ("lstm", True, True)],
)
def test_exported_policies_match_the_actor(tmp_path, rnn_type, normalize, state_dependent_std):
    torch.manual_seed(0)
    cfg = TorchRLPolicyCfg(
        rnn_type=rnn_type,
        rnn_hidden_size=16,
        actor_hidden_dims=[8, 8],
        critic_hidden_dims=[8],
        actor_obs_normalization=normalize,
        state_dependent_std=state_dependent_std,  # the MLP outputs the std too: the export keeps the mean only
    )
    actor, _ = make_models(cfg, EnvInterface(("policy",), OBS, ("policy",), OBS, ACT), "cpu")
    observations = 3.0 + 2.0 * torch.randn(STEPS, ENVS, OBS)
    for normalizer in observation_normalizers(actor):
        # statistics far from the initial (0, 1), so that an export without them would act differently
        normalizer.update(3.0 + 2.0 * torch.randn(1000, OBS))
    assert len(observation_normalizers(actor)) == int(normalize)
    expected = _policy_actions(actor, rnn_type, observations)

    torchscript_path, onnx_path = export_policy(actor, OBS, str(tmp_path), num_envs=ENVS)

    scripted = torch.jit.load(torchscript_path)
    session = onnxruntime.InferenceSession(onnx_path)
    input_names = [i.name for i in session.get_inputs()]
    state = {
        name: np.zeros(i.shape, dtype=np.float32)
        for name, i in zip(input_names, session.get_inputs(), strict=True)
        if name != "obs"
    }
    assert input_names == {None: ["obs"], "lstm": ["obs", "h_in", "c_in"], "gru": ["obs", "h_in"]}[rnn_type]
    for step in range(STEPS):
        if step == RESET_AT:
            scripted.reset()
            state = {name: np.zeros_like(value) for name, value in state.items()}
        with torch.no_grad():
            torch.testing.assert_close(scripted(observations[step]), expected[step], atol=1e-5, rtol=1e-5)
        outputs = session.run(None, {"obs": observations[step].numpy(), **state})
        np.testing.assert_allclose(outputs[0], expected[step].numpy(), atol=1e-5, rtol=1e-5)
        state = dict(zip(state, outputs[1:], strict=True))


@pytest.mark.parametrize(
    ("encoder", "flat", "rnn_type"), [("cnn", False, None), ("cnn", True, "gru"), ("spatial_softmax", True, "lstm")]
)
def test_exported_cnn_policies_take_uint8_images_and_match_the_actor(tmp_path, encoder, flat, rnn_type):
    """A CNN actor's exports take the image groups as the environment gives them (uint8) beside the flat ``obs``
    (ONNX: one input per image group, no ``obs`` for an actor of images only) and act as the actor does."""
    torch.manual_seed(0)
    cnn = TorchRLCNNCfg(output_channels=[4, 8], kernel_size=[5, 3], stride=2, activation="relu", padding="zeros")
    cfg = TorchRLPolicyCfg(
        rnn_type=rnn_type,
        rnn_hidden_size=16,
        actor_hidden_dims=[8],
        critic_hidden_dims=[8],
        actor_obs_normalization=True,
        actor_cnn_cfg=cnn,
        critic_cnn_cfg=cnn,
        encoder=encoder,
    )
    keys = ("policy", "camera") if flat else ("camera",)
    images = (("camera", (3, 20, 24), "uint8"),)
    interface = EnvInterface(keys, OBS if flat else 0, keys, OBS if flat else 0, ACT, images=images)
    actor, _ = make_models(cfg, interface, "cpu")
    for normalizer in observation_normalizers(actor):
        normalizer.update(3.0 + 2.0 * torch.randn(1000, OBS))
    state_keys = {"lstm": ["actor_rnn_h", "actor_rnn_c"], "gru": ["actor_rnn_h"]}.get(rnn_type, [])
    td = TensorDict({key: torch.zeros(ENVS, 1, 16) for key in state_keys}, [ENVS])
    observations = 3.0 + 2.0 * torch.randn(STEPS, ENVS, OBS)
    frames = torch.randint(0, 256, (STEPS, ENVS, 3, 20, 24), dtype=torch.uint8)

    torchscript_path, onnx_path = export_policy(actor, interface.actor_obs_dim, str(tmp_path), ENVS, images)

    scripted = torch.jit.load(torchscript_path)
    session = onnxruntime.InferenceSession(onnx_path)
    input_names = [i.name for i in session.get_inputs()]
    assert input_names[: 1 + flat] == (["obs", "camera"] if flat else ["camera"])
    state = {name: np.zeros(i.shape, np.float32) for name, i in zip(input_names, session.get_inputs(), strict=True)}
    state = {name: value for name, value in state.items() if name.endswith("_in")}
    for step in range(STEPS):
        td.update({"policy": observations[step], "camera": frames[step], "is_init": torch.full((ENVS, 1), step == 0)})
        with torch.no_grad(), set_exploration_type(ExplorationType.DETERMINISTIC):
            out = actor(td)
        expected = out["action"]
        td = TensorDict({key: out["next", key] for key in state_keys}, [ENVS])
        with torch.no_grad():
            flat_obs = observations[step] if flat else torch.zeros(ENVS, 0)
            torch.testing.assert_close(scripted(flat_obs, [frames[step]]), expected, atol=1e-5, rtol=1e-5)
        feeds = {"camera": frames[step].numpy(), **state, **({"obs": observations[step].numpy()} if flat else {})}
        outputs = session.run(None, feeds)
        np.testing.assert_allclose(outputs[0], expected.numpy(), atol=1e-5, rtol=1e-5)
        state = dict(zip(state, outputs[1:], strict=True))
