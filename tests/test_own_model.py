"""A task author's own network class (``agent.policy.actor_class_name`` / ``critic_class_name``) replaces the MLPs,
trains, plays and exports, with the runner's normalisation, recurrent layer and noise around it."""

import os

import numpy as np
import onnxruntime
import pytest
import torch
from tensordict import TensorDict
from torch import nn
from torchrl.envs.utils import ExplorationType, set_exploration_type

from helpers import CPU_ARGS, assert_ok, run_dirs, run_script, tasks_env
from isaaclab_torchrl.agents import TorchRLPolicyCfg
from isaaclab_torchrl.export import export_policy
from isaaclab_torchrl.models import EnvInterface, make_models

OBS, ACT, ENVS = 5, 2, 3


class TwoLayers(nn.Module):
    """A network class of the test's own: ``Class(in_features, out_features, cfg)``."""

    def __init__(self, in_features: int, out_features: int, cfg):
        super().__init__()
        self.first = nn.Linear(in_features, 12)
        self.second = nn.Linear(12, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.second(torch.relu(self.first(x)))


@pytest.mark.fast
def test_own_classes_are_the_actors_and_critics_networks_and_export(tmp_path):
    torch.manual_seed(0)
    name = f"{__name__}:TwoLayers"
    cfg = TorchRLPolicyCfg(
        rnn_type="gru",
        rnn_hidden_size=8,
        actor_hidden_dims=[4],
        critic_hidden_dims=[4],
        actor_obs_normalization=True,
        actor_class_name=name,
        critic_class_name=name,
    )
    actor, critic = make_models(cfg, EnvInterface(("policy",), OBS, ("policy",), OBS, ACT), "cpu")
    # one copy of each network's weights, the class's own, in the actor and in the critic
    assert isinstance(actor.parts.mean, TwoLayers) and actor.parts.mean.second.out_features == ACT
    assert [type(m) for m in critic.modules()].count(TwoLayers) == 1
    assert not any(".0.weight" in key for key in critic.state_dict())  # no torchrl MLP left
    obs = 1.0 + torch.randn(ENVS, OBS)
    td = TensorDict({"policy": obs, "is_init": torch.ones(ENVS, 1, dtype=torch.bool)}, [ENVS])
    td["actor_rnn_h"] = torch.zeros(ENVS, 1, 8)
    with torch.no_grad(), set_exploration_type(ExplorationType.DETERMINISTIC):
        expected = actor(td)["action"]
        assert critic(td.clone().set("critic_rnn_h", torch.zeros(ENVS, 1, 8)))["state_value"].shape == (ENVS, 1)
    torchscript_path, onnx_path = export_policy(actor, OBS, str(tmp_path), num_envs=ENVS)
    with torch.no_grad():
        torch.testing.assert_close(torch.jit.load(torchscript_path)(obs), expected, atol=1e-5, rtol=1e-5)
    session = onnxruntime.InferenceSession(onnx_path)
    actions, _ = session.run(None, {"obs": obs.numpy(), "h_in": np.zeros((1, ENVS, 8), dtype=np.float32)})
    np.testing.assert_allclose(actions, expected.numpy(), atol=1e-5, rtol=1e-5)


def test_an_own_class_from_the_command_line_trains_plays_and_exports(workdir):
    args = ["--task", "Isaac-Cartpole-Direct", "--num_envs", "8", *CPU_ARGS]
    own = ["agent.policy.actor_class_name=own_model:GatedMLP", "agent.policy.critic_class_name=own_model:GatedMLP"]
    trained = run_script("train.py", [*args, "--max_iterations", "2", *own], cwd=workdir, extra_env=tasks_env())
    assert_ok(trained)
    (run_dir,) = run_dirs(workdir, "cartpole_direct")
    checkpoint = torch.load(os.path.join(run_dir, "model_2.pt"), map_location="cpu", weights_only=False)
    weights = [key for part in checkpoint.values() if isinstance(part, dict) for key in part]
    assert sum(".gate.weight" in key for key in weights) == 2, weights  # the actor's and the critic's
    # play rebuilds the class from the run's config and exports it
    played = run_script(
        "play.py", [*args, "--checkpoint", run_dir, "--max_steps", "5"], cwd=workdir, extra_env=tasks_env()
    )
    assert_ok(played)
    assert os.path.exists(os.path.join(run_dir, "exported", "policy.onnx"))
