"""The learner's update equals rsl_rl's (5.5.x, installed) on the same rollout: rsl_rl's own PPO acts step by step
in a scripted environment (episodes terminating at chosen steps, a rollout after a first one so that the recurrent
states it starts from are not zero), stores its rollout and updates; the learner, from the same weights, updates on
that rollout in the collectors' ``compact_obs`` layout. One minibatch (rsl_rl's recurrent split takes contiguous
blocks of environments, this learner a random split), several epochs, the adaptive learning rate, value clipping and
the gradient clipping per network all act. No time-outs: there rsl_rl bootstraps with V of the observation before
the reset, the learner with V of the true final observation (``docs/coming-from-rsl_rl.md``)."""

import pytest
import torch
from rsl_rl.algorithms import PPO as RslRlPPO
from rsl_rl.models import MLPModel, RNNModel
from rsl_rl.storage import RolloutStorage
from tensordict import TensorDict

from isaaclab_torchrl.agents import TorchRLPolicyCfg, TorchRLPpoCfg, TorchRLRunnerCfg
from isaaclab_torchrl.models import EnvInterface
from isaaclab_torchrl.runners import PPO
from ppo_reference import _learner_parameters

pytestmark = pytest.mark.fast

N, T, OBS, ACT, HIDDEN, MLP_DIMS = 6, 8, 5, 3, 7, [16, 16]
ALGORITHM = dict(
    num_learning_epochs=4,
    num_mini_batches=1,
    clip_param=0.1,
    gamma=0.97,
    lam=0.9,
    value_loss_coef=1.0,
    entropy_coef=0.01,
    learning_rate=3e-3,
    max_grad_norm=0.5,
    schedule="adaptive",
    desired_kl=0.002,
)
TERMINATIONS = {(2, 0), (3, 1), (5, 4), (7, 2), (7, 5)}
"""``(step, env)``: the steps where an episode terminates in the compared rollout (and one at the last step of the
first rollout, env 3)."""


def _rsl_rl_ppo(rnn_type) -> RslRlPPO:
    obs = TensorDict({"policy": torch.zeros(N, OBS)}, [N])
    groups = {"actor": ["policy"], "critic": ["policy"]}
    recurrent = dict(rnn_type=rnn_type, rnn_hidden_dim=HIDDEN, rnn_num_layers=1) if rnn_type else {}
    model = RNNModel if rnn_type else MLPModel
    distribution = {"class_name": "GaussianDistribution", "init_std": 0.8}
    actor = model(obs, groups, "actor", ACT, MLP_DIMS, "elu", False, distribution, **recurrent)
    critic = model(obs, groups, "critic", 1, MLP_DIMS, "elu", False, None, **recurrent)
    storage = RolloutStorage("rl", N, T, obs, [ACT], "cpu")
    return RslRlPPO(actor, critic, storage, device="cpu", **ALGORITHM)


def _learner(rnn_type, backend: str, rsl_rl: RslRlPPO) -> PPO:
    cfg = TorchRLRunnerCfg(
        device="cpu",
        num_steps_per_env=T,
        max_iterations=1,
        experiment_name="test",
        policy=TorchRLPolicyCfg(
            rnn_type=rnn_type,
            recurrent_backend=backend,
            rnn_hidden_size=HIDDEN,
            actor_hidden_dims=MLP_DIMS,
            critic_hidden_dims=MLP_DIMS,
            activation="elu",
            init_noise_std=0.8,
        ),
        algorithm=TorchRLPpoCfg(**ALGORITHM),
    )
    learner = PPO(cfg, EnvInterface(("policy",), OBS, ("policy",), OBS, ACT), "cpu")
    with torch.no_grad():  # rsl_rl's initial weights (the test's twin; the learner itself holds one copy)
        for ours, theirs in zip(_learner_parameters(learner), _rsl_rl_parameters(rsl_rl), strict=True):
            ours.copy_(theirs)
    return learner


def _rsl_rl_parameters(ppo: RslRlPPO) -> list[torch.Tensor]:
    """rsl_rl's parameters in the order of :func:`ppo_reference._learner_parameters`."""
    found = []
    for model in (ppo.actor, ppo.critic):
        if model.is_recurrent:
            found += list(model.rnn.rnn.parameters())
        found += list(model.mlp.parameters())
        if model is ppo.actor:
            found.append(model.distribution.std_param)
    return found


def _rollout(
    ppo: RslRlPPO, generator: torch.Generator, obs: torch.Tensor, terminations: set
) -> tuple[torch.Tensor, torch.Tensor]:
    """``T`` steps of rsl_rl's runner loop in a scripted environment from the observations ``obs``; returns the dones
    ``[T, N]`` and the observations after the last step."""
    dones = torch.zeros(T, N)
    for step, env in terminations:
        dones[step, env] = 1.0
    for step in range(T):
        with torch.no_grad():
            ppo.act(TensorDict({"policy": obs}, [N]))
        obs = torch.randn(N, OBS, generator=generator)
        ppo.process_env_step(TensorDict({"policy": obs}, [N]), torch.randn(N, generator=generator), dones[step], {})
    return dones, obs


def _collected_batch(ppo: RslRlPPO, dones: torch.Tensor, first_is_init: torch.Tensor, last_obs) -> TensorDict:
    """rsl_rl's stored rollout as a collector of this package lays it out (``[N, T]``, ``compact_obs``)."""
    storage = ppo.storage
    obs = storage.observations["policy"]
    next_obs = torch.cat([obs[1:], last_obs[None]])
    is_init = torch.cat([first_is_init[None], dones[:-1].bool()])
    done = dones.bool()
    fields = {
        "policy": obs,
        "is_init": is_init[..., None],
        "action": storage.actions,
        "action_log_prob": storage.actions_log_prob.squeeze(-1),
        "loc": storage.distribution_params[0],
        "scale": storage.distribution_params[1],
        "next": {
            "reward": storage.rewards,
            "done": done[..., None],
            "terminated": done[..., None],
            "truncated": torch.zeros_like(done)[..., None],
            "final_obs": {"policy": next_obs},
        },
    }
    for name, states in (("actor", storage.saved_hidden_state_a), ("critic", storage.saved_hidden_state_c)):
        for key, state in zip("hc", states or (), strict=False):  # [T, layers, N, H] -> [T, N, layers, H]
            fields[f"{name}_rnn_{key}"] = state.transpose(1, 2)
    return TensorDict(fields, [T, N]).transpose(0, 1).contiguous()


# the fused backend is the GPU's (its actor's and critic's recurrences run paired); pad the CPU's
@pytest.mark.parametrize(("rnn_type", "backend"), [(None, "auto"), ("lstm", "pad"), ("lstm", "fused")])
def test_one_update_equals_rsl_rls_on_the_same_rollout(rnn_type, backend):
    torch.manual_seed(0)
    rsl_rl = _rsl_rl_ppo(rnn_type)
    learner = _learner(rnn_type, backend, rsl_rl)
    generator = torch.Generator().manual_seed(1)
    obs = torch.randn(N, OBS, generator=generator)
    # the first rollout's recurrent states carry into the compared one
    first, obs = _rollout(rsl_rl, generator, obs, {(T - 1, 3)})
    rsl_rl.storage.clear()
    dones, last_obs = _rollout(rsl_rl, generator, obs, TERMINATIONS)
    batch = _collected_batch(rsl_rl, dones, first[-1].bool(), last_obs)
    with torch.no_grad():
        rsl_rl.compute_returns(TensorDict({"policy": last_obs}, [N]))
    if rnn_type:
        assert batch["actor_rnn_h"][:, 0].abs().sum() > 0 and not batch["is_init"][:, 0].all()

    theirs = rsl_rl.update()
    ours = learner.update(batch)

    assert rsl_rl.learning_rate != ALGORITHM["learning_rate"], "the adaptive learning rate must act"
    assert learner.learning_rate == pytest.approx(rsl_rl.learning_rate, rel=1e-6)
    for index, (mine, expected) in enumerate(
        zip(_learner_parameters(learner), _rsl_rl_parameters(rsl_rl), strict=True)
    ):
        torch.testing.assert_close(mine.detach(), expected.detach(), atol=2e-5, rtol=2e-5, msg=f"parameter {index}")
    for key in ("surrogate", "value", "entropy"):
        assert ours[key] == pytest.approx(theirs[key], abs=1e-5, rel=1e-4), key
