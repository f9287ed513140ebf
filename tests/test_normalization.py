"""Observation normalisation: running statistics, their sync to collector workers, and their merge rule.

Pure logic of the models and of torchrl's collectors and weight sync, on a small torchrl env (Pendulum) in real
collector subprocesses; the export test checks that exported policies include the statistics.
"""

import copy
import functools

import pytest
import torch
from torchrl.collectors import MultiSyncCollector
from torchrl.envs import GymEnv
from torchrl.weight_update import MultiProcessWeightSyncScheme

from isaaclab_torchrl.agents import TorchRLPolicyCfg
from isaaclab_torchrl.models import (
    CollectionPolicyFactory,
    EnvInterface,
    ObservationNormalizer,
    make_collection_policy,
    make_models,
    observation_normalizers,
)

OBS = "observation"
INTERFACE = EnvInterface((OBS,), 3, (OBS,), 3, 1)
POLICY_CFG = TorchRLPolicyCfg(
    actor_hidden_dims=[16], critic_hidden_dims=[16], actor_obs_normalization=True, critic_obs_normalization=True
)


@pytest.mark.fast
def test_running_statistics_merge_batches_exactly():
    data = 5.0 + 3.0 * torch.randn(3000, 4, dtype=torch.float64).float()
    normalizer = ObservationNormalizer(4)
    normalizer.update(data[:1000])
    torch.testing.assert_close(normalizer.mean, data[:1000].mean(0))
    torch.testing.assert_close(normalizer.var, data[:1000].var(0, unbiased=False))
    normalizer.update(data[1000:].reshape(20, 100, 4))  # leading dims are flattened
    torch.testing.assert_close(normalizer.mean, data.mean(0), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(normalizer.var, data.var(0, unbiased=False), rtol=1e-4, atol=1e-4)
    assert int(normalizer.count) == 3000
    torch.testing.assert_close(normalizer(data).mean(0), torch.zeros(4), atol=1e-3, rtol=0)


def test_workers_act_with_the_learners_statistics_after_a_weight_sync():
    torch.manual_seed(0)
    actor, critic = make_models(POLICY_CFG, INTERFACE, "cpu")
    assert len(observation_normalizers(actor)) == len(observation_normalizers(critic)) == 1
    normalizer = observation_normalizers(actor)[0]
    collector = MultiSyncCollector(
        create_env_fn=[functools.partial(GymEnv, "Pendulum-v1")],
        policy=make_collection_policy(actor, critic, POLICY_CFG),
        policy_factory=CollectionPolicyFactory(POLICY_CFG, INTERFACE, "cpu"),
        weight_sync_schemes={"policy": MultiProcessWeightSyncScheme()},
        frames_per_batch=64,
        total_frames=-1,
        device="cpu",
        cat_results="stack",
    )
    try:
        # the workers build their own networks; the first sync gives them the learner's weights
        collector.update_policy_weights_()
        batches = iter(collector)
        first = next(batches)
        with torch.no_grad():
            torch.testing.assert_close(first["loc"], actor(first.select(OBS).clone())["loc"])

        initial_actor = copy.deepcopy(actor)
        normalizer.update(first[OBS])
        # the learner's statistics are those of the batch it learned from
        flat = first[OBS].reshape(-1, 3)
        torch.testing.assert_close(normalizer.mean, flat.mean(0))
        torch.testing.assert_close(normalizer.var, flat.var(0, unbiased=False))

        collector.update_policy_weights_()
        second = next(batches)
        with torch.no_grad():
            learner_loc = actor(second.select(OBS).clone())["loc"]
            stale_loc = initial_actor(second.select(OBS).clone())["loc"]
        torch.testing.assert_close(second["loc"], learner_loc)
        # the statistics moved far enough for actions under the initial ones to differ
        assert not torch.allclose(second["loc"], stale_loc, atol=1e-3)
    finally:
        collector.shutdown()


@pytest.mark.fast
@pytest.mark.parametrize("rnn_type", [None, "lstm"])
def test_normalizers_are_saved_with_the_networks(rnn_type):
    cfg = POLICY_CFG.replace(rnn_type=rnn_type, rnn_hidden_size=8)
    actor, critic = make_models(cfg, INTERFACE, "cpu")
    observation_normalizers(actor)[0].update(torch.randn(50, 3) + 2.0)
    restored, _ = make_models(cfg, INTERFACE, "cpu")
    restored.load_state_dict(actor.state_dict())
    torch.testing.assert_close(observation_normalizers(restored)[0].mean, observation_normalizers(actor)[0].mean)
    torch.testing.assert_close(observation_normalizers(restored)[0].var, observation_normalizers(actor)[0].var)
