"""Lag-corrected asynchronous PPO: the proximal log-probabilities and the truncated importance weights.

The batch is a rollout of the learner's own collection policy, stepped one step at a time with its recurrent state
carried and reset on new episodes, as a collector worker runs it. The proximal policy is evaluated over whole slices
in recurrent mode: with no lag it must give the collected log-probabilities back, with a changed policy the
step-by-step log-probabilities of that policy.
"""

import pytest
import torch
from tensordict import TensorDict
from torchrl.envs.utils import ExplorationType, set_exploration_type
from torchrl.modules import set_recurrent_mode

from isaaclab_torchrl.agents import TorchRLPolicyCfg, TorchRLPpoCfg, TorchRLRunnerCfg
from isaaclab_torchrl.models import EnvInterface
from isaaclab_torchrl.runners import PPO
from isaaclab_torchrl.runners.ppo import MAX_IMPORTANCE_WEIGHT

pytestmark = pytest.mark.fast

N, T, OBS, ACT = 5, 7, 3, 2


def _learner(rnn_type) -> PPO:
    cfg = TorchRLRunnerCfg(
        device="cpu",
        num_steps_per_env=T,
        max_iterations=1,
        experiment_name="test",
        policy=TorchRLPolicyCfg(rnn_type=rnn_type, rnn_hidden_size=6, actor_hidden_dims=[8], critic_hidden_dims=[8]),
        algorithm=TorchRLPpoCfg(num_learning_epochs=1, num_mini_batches=1, learning_rate=1e-3),
    )
    torch.manual_seed(0)
    return PPO(cfg, EnvInterface(("policy",), OBS, ("policy",), OBS, ACT), "cpu", lag_corrected=True)


def _rollout(learner: PPO, actions=None) -> TensorDict:
    """``[N, T]`` steps of ``policy``, one at a time, episodes ending at random; with ``actions``, those are the
    actions taken (their log-probabilities are the policy's)."""
    generator = torch.Generator().manual_seed(1)
    observations = torch.randn(N, T, OBS, generator=generator)
    is_init = torch.rand(N, T, 1, generator=generator) < 0.2
    is_init[:, 0] = True
    policy = learner.collection_policy
    td = TensorDict({"policy": observations[:, 0], "is_init": is_init[:, 0]}, [N])
    # sampled actions, as in the collectors (outside this, the actor takes its mean)
    with torch.no_grad(), set_recurrent_mode(False), set_exploration_type(ExplorationType.RANDOM):
        states = policy(td.clone()).get("next", TensorDict(batch_size=[N])).apply(torch.zeros_like)
        steps = []
        for t in range(T):
            td.update({"policy": observations[:, t], "is_init": is_init[:, t]})
            td.update(states.apply(lambda state, t=t: state.masked_fill(is_init[:, t, :, None], 0.0)))
            out = policy(td.clone())
            if actions is not None:
                out["action"] = actions[:, t]
                out["action_log_prob"] = learner.actor.get_dist(out.clone()).log_prob(actions[:, t])
            steps.append(out.exclude("next"))
            states = out.get("next", TensorDict(batch_size=[N]))
            td = TensorDict(batch_size=[N])
    return torch.stack(steps, dim=1)


@pytest.mark.parametrize("rnn_type", [None, "lstm"])
def test_without_lag_the_proximal_policy_is_the_acting_one(rnn_type):
    learner = _learner(rnn_type)
    batch = _rollout(learner)
    proximal, weight = learner.proximal_log_probs_and_weights(batch)
    torch.testing.assert_close(proximal, batch["action_log_prob"], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(weight, torch.ones_like(weight), atol=1e-5, rtol=0)


@pytest.mark.parametrize("rnn_type", [None, "lstm"])
def test_after_an_update_the_weights_are_the_truncated_ratio_to_the_acting_policy(rnn_type):
    learner = _learner(rnn_type)
    batch = _rollout(learner)
    with torch.no_grad():  # the learner moves on: a changed policy, its recurrent layer included
        for parameter in learner.actor.parameters():
            parameter.add_(0.1 * torch.randn_like(parameter))
    expected = _rollout(learner, actions=batch["action"])["action_log_prob"]

    proximal, weight = learner.proximal_log_probs_and_weights(batch)

    torch.testing.assert_close(proximal, expected, atol=1e-5, rtol=1e-5)
    ratio = torch.exp(expected - batch["action_log_prob"])
    torch.testing.assert_close(weight, ratio.clamp(max=MAX_IMPORTANCE_WEIGHT), atol=1e-5, rtol=1e-5)
    assert bool((ratio > MAX_IMPORTANCE_WEIGHT).any()) and bool((ratio < MAX_IMPORTANCE_WEIGHT).any()), ratio
