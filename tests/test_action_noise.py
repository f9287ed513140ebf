"""The Gaussian action noise as rsl_rl's ``GaussianDistribution``: its standard deviation clamped to ``std_range``
(floor 1e-6), fixed with ``learn_std=False``, and the adaptive learning rate left alone with ``desired_kl=None``;
and as its ``HeteroscedasticGaussianDistribution`` (``state_dependent_std``): the std an output of the actor's
MLP, starting at ``init_noise_std`` for every input, clamped, and learned."""

import pytest
import torch
from tensordict import TensorDict

from isaaclab_torchrl.action_noise import BoundedNormalScale, noise_std
from isaaclab_torchrl.agents import TorchRLPolicyCfg, TorchRLPpoCfg, TorchRLRunnerCfg
from isaaclab_torchrl.agents.validation import ConfigError, validate_policy_cfg
from isaaclab_torchrl.models import EnvInterface, make_models
from isaaclab_torchrl.runners import PPO

pytestmark = pytest.mark.fast

INTERFACE = EnvInterface(("policy",), 3, ("policy",), 3, 2)


def _noise(actor) -> BoundedNormalScale:
    return next(m for m in actor.modules() if isinstance(m, BoundedNormalScale))


def _policy(**fields) -> TorchRLPolicyCfg:
    return TorchRLPolicyCfg(actor_hidden_dims=[8], critic_hidden_dims=[8], **fields)


@pytest.mark.parametrize("noise_std_type", ["scalar", "log"])
def test_the_std_is_clamped_to_std_range(noise_std_type):
    actor = make_models(_policy(noise_std_type=noise_std_type, std_range=(0.2, 0.5)), INTERFACE, "cpu").actor
    noise = _noise(actor)
    with torch.no_grad():
        if noise_std_type == "log":
            noise.state_independent_scale.copy_(torch.log(torch.tensor([0.01, 3.0])))
        else:
            noise.state_independent_scale.copy_(torch.tensor([0.01, 3.0]))
    out = actor(TensorDict({"policy": torch.randn(4, 3)}, [4]))
    torch.testing.assert_close(out["scale"], torch.tensor([0.2, 0.5]).expand(4, 2))
    torch.testing.assert_close(noise_std(actor), torch.tensor([0.2, 0.5]))


def test_the_floor_is_1e_6_whatever_std_range_says():
    actor = make_models(_policy(noise_std_type="log", std_range=(0.0, 1.0)), INTERFACE, "cpu").actor
    with torch.no_grad():
        _noise(actor).state_independent_scale.fill_(-100.0)
    assert float(noise_std(actor).min()) == pytest.approx(1e-6)


def _learner(**fields) -> PPO:
    policy = {key: value for key, value in fields.items() if key in ("learn_std", "state_dependent_std")}
    algorithm = {key: value for key, value in fields.items() if key not in policy}
    cfg = TorchRLRunnerCfg(
        device="cpu",
        num_steps_per_env=4,
        max_iterations=1,
        experiment_name="test",
        policy=_policy(init_noise_std=0.7, **policy),
        algorithm=TorchRLPpoCfg(num_learning_epochs=2, num_mini_batches=2, learning_rate=1e-3, **algorithm),
    )
    torch.manual_seed(0)
    return PPO(cfg, INTERFACE, "cpu")


def _batch(learner: PPO) -> TensorDict:
    generator = torch.Generator().manual_seed(0)
    n, t = 6, 4
    with torch.no_grad():
        batch = learner.actor(TensorDict({"policy": torch.randn(n, t, 3, generator=generator)}, [n, t]))
    # actions far from the mean: a large KL after the first step, so that an adaptive rate would move
    batch["action"] = batch["loc"] + 3.0 * torch.randn(n, t, 2, generator=generator)
    batch["action_log_prob"] = learner.actor.get_dist(batch.clone()).log_prob(batch["action"]).detach()
    batch["is_init"] = torch.zeros(n, t, 1, dtype=torch.bool)
    done = torch.zeros(n, t, 1, dtype=torch.bool)
    batch["next"] = TensorDict(
        {
            "reward": torch.randn(n, t, 1, generator=generator),
            "done": done,
            "terminated": done,
            "truncated": done,
            "final_obs": {"policy": torch.randn(n, t, 3, generator=generator)},
        },
        [n, t],
    )
    return batch


def test_learn_std_false_keeps_the_std_and_trains_the_rest():
    learner = _learner(learn_std=False)
    assert all(p is not _noise(learner.actor).state_independent_scale for p in learner.parameters)
    before = [p.detach().clone() for p in learner.parameters]
    learner.update(_batch(learner))
    torch.testing.assert_close(noise_std(learner.actor), torch.full((2,), 0.7))
    assert any(not torch.equal(a, b) for a, b in zip(before, learner.parameters, strict=True))


def test_desired_kl_none_keeps_the_learning_rate_of_the_adaptive_schedule():
    fixed = _learner(schedule="adaptive", desired_kl=None)
    fixed.update(_batch(fixed))
    assert fixed.learning_rate == pytest.approx(1e-3)
    adaptive = _learner(schedule="adaptive", desired_kl=0.01)
    adaptive.update(_batch(adaptive))
    assert adaptive.learning_rate != pytest.approx(1e-3), "the same batch moves an adaptive rate"


@pytest.mark.parametrize("noise_std_type", ["scalar", "log"])
def test_a_state_dependent_std_starts_at_init_noise_std_depends_on_the_input_and_is_clamped(noise_std_type):
    policy = _policy(state_dependent_std=True, noise_std_type=noise_std_type, init_noise_std=0.7, std_range=(0.2, 2.0))
    actor = make_models(policy, INTERFACE, "cpu").actor
    obs = TensorDict({"policy": torch.randn(16, 3)}, [16])
    torch.testing.assert_close(actor(obs.clone())["scale"], torch.full((16, 2), 0.7))
    assert noise_std(actor) is None
    head = actor.parts.mean[-2]  # the MLP's last layer: the means' rows, then the std's
    with torch.no_grad():
        head.weight[2:].normal_(0.0, 10.0)
    scale = actor(obs.clone())["scale"]
    assert scale.std(0).min() > 0, "the std depends on the observation"
    assert float(scale.min()) == pytest.approx(0.2) and float(scale.max()) == pytest.approx(2.0)
    # the deterministic path is the mean: the first half of the MLP's output
    torch.testing.assert_close(actor.parts.mean(obs["policy"]), actor(obs.clone())["loc"])


def test_a_state_dependent_std_is_learned_and_logged_as_its_batch_mean():
    learner = _learner(state_dependent_std=True)
    head = learner.actor.parts.mean[-2]
    with torch.no_grad():  # a std other than init_noise_std, so that the logged value must come from the batch
        head.bias[2:].copy_(torch.tensor([0.5, 1.2]))
    before = head.weight[2:].detach().clone()
    batch = _batch(learner)
    assert float(batch["scale"].mean()) != pytest.approx(0.7)
    learner.update(batch.clone())
    assert not torch.equal(head.weight[2:], before), "the std head is trained"
    assert learner.noise_std() == pytest.approx(float(batch["scale"].mean()))


def test_a_state_dependent_std_needs_learn_std():
    with pytest.raises(ConfigError, match="learn_std"):
        validate_policy_cfg(_policy(state_dependent_std=True, learn_std=False))
