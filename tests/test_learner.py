"""The PPO learner alone, built without any environment: an update on a small synthetic batch in the collectors'
``compact_obs`` layout equals a plain PyTorch PPO on the same data and initial weights.

The plain PPO runs step-by-step networks, GAE bootstrapped with the final observations, normalised advantages, the
clipped surrogate and value losses, the entropy bonus, the analytic KL of rsl_rl's adaptive learning rate (adapted per
minibatch before its optimizer step), the actor's and the critic's gradients clipped separately and Adam, over
several epochs of one random split into minibatches drawn once per update (rsl_rl's generators). The tests check
that the value clipping acted and the adaptive learning rate moved, so that neither comparison holds vacuously; that
the observation normalisers learn from the batch only after the epochs (the batch was collected with the statistics
from before it); and the lag-corrected update (the proximal policy as the reference of the ratio, the clip and the
KL; advantages weighted by the truncated importance ratio between the proximal and the acting policy)."""

import copy
import math

import pytest
import torch
from tensordict import TensorDict

from isaaclab_torchrl.runners import PPO
from isaaclab_torchrl.runners.safety import NonFiniteError
from ppo_reference import (
    ACT,
    BACKENDS,
    HIDDEN,
    INTERFACE,
    LR,
    LR_MAX,
    OBS,
    ONE_STEP,
    SEVERAL_STEPS,
    N,
    PlainNetwork,
    T,
    _assert_update_equals,
    _batch,
    _cfg,
    _check_margins,
    _learner_parameters,
    _noise_scale,
    _reference_update,
    _update,
)

pytestmark = pytest.mark.fast


# the GPU's graphed update runs the fused backend, eager updates pad; on the CPU both must agree
@pytest.mark.parametrize(("rnn_type", "backend"), BACKENDS)
def test_one_update_equals_a_plain_pytorch_ppo_step(rnn_type, backend):
    torch.manual_seed(0)
    cfg = _cfg(rnn_type, **ONE_STEP)
    cfg.policy.recurrent_backend = backend
    learner = PPO(cfg, INTERFACE, "cpu")
    batch = _batch(rnn_type)
    reference = _reference_update(learner, batch)
    initial = [p.detach().clone() for p in _learner_parameters(learner)]

    stats = _update(learner, batch)

    _assert_update_equals(learner, initial, stats, reference)


def _acted_near_the_learner(learner: PPO, batch: TensorDict) -> TensorDict:
    """``batch`` as collected by a policy a little off the learner's (its mean moved by 0.01): the KL of the
    adaptive schedule starts small, above zero."""
    generator = torch.Generator().manual_seed(5)
    with torch.no_grad():
        loc = PlainNetwork(learner.actor, "actor_rnn")(batch) + 0.01 * torch.randn(N, T, ACT, generator=generator)
        scale = _noise_scale(learner.actor).clamp_min(1e-6).expand(N, T, ACT).clone()
        action = loc + scale * torch.randn(N, T, ACT, generator=generator)
        log_prob = torch.distributions.Normal(loc, scale).log_prob(action).sum(-1)
    batch = batch.clone()
    batch.update({"loc": loc, "scale": scale, "action": action, "action_log_prob": log_prob})
    return batch


@pytest.mark.parametrize(
    ("acting", "learning_rate", "rnn_type", "backend"),
    # a stale acting policy: KLs above twice the desired one, the rate shrinks from its maximum; an acting policy
    # near the learner's: KLs below half the desired one, the rate grows (the fused backend once: it is slow here)
    [("stale", LR_MAX, *backend) for backend in BACKENDS] + [("near", 5e-3, *backend) for backend in BACKENDS[:2]],
)
def test_epochs_reuse_one_minibatch_split_with_the_adaptive_learning_rate_and_value_clipping(
    rnn_type, backend, acting, learning_rate
):
    """Several epochs of two minibatches: one random split per update, which every epoch goes through again (a new
    split per epoch gives other parameters); rsl_rl's adaptive rule on each minibatch's KL before its step; the value
    loss clipped where the value moved past the clip range from the stored one."""
    torch.manual_seed(0)
    cfg = _cfg(rnn_type, **SEVERAL_STEPS, learning_rate=learning_rate)
    cfg.policy.recurrent_backend = backend
    learner = PPO(cfg, INTERFACE, "cpu")
    batch = _batch(rnn_type) if acting == "stale" else _acted_near_the_learner(learner, _batch(rnn_type))
    reference = _reference_update(learner, batch)
    _check_margins(reference, learning_rate, cfg.algorithm.desired_kl)
    assert reference.value_clipped > 0, "the value clipping must act, or this test cannot see it"
    rates = [learning_rate, *reference.learning_rates]
    changes = [math.copysign(1, b - a) for a, b in zip(rates, rates[1:], strict=False) if b != a]
    assert changes and set(changes) == {-1.0 if acting == "stale" else 1.0}, rates
    initial = [p.detach().clone() for p in _learner_parameters(learner)]

    stats = _update(learner, batch)

    _assert_update_equals(learner, initial, stats, reference)


@pytest.mark.parametrize("rnn_type", [None, "lstm"])
def test_normalizers_learn_the_batch_after_the_epochs_which_use_the_statistics_from_before_it(rnn_type):
    """The batch was collected, and its values for GAE computed, with the running statistics from before it: every
    minibatch's losses and gradients use those; after the update the normalisers hold them merged with the batch's
    observations (rsl_rl updates them after its epochs too)."""
    torch.manual_seed(0)
    cfg = _cfg(rnn_type, **SEVERAL_STEPS, learning_rate=LR_MAX)
    cfg.policy.actor_obs_normalization = cfg.policy.critic_obs_normalization = True
    learner = PPO(cfg, INTERFACE, "cpu")
    # earlier batches, far from this one: merging this one moves the statistics a lot
    earlier = 1.5 + 0.5 * torch.randn(40, OBS, generator=torch.Generator().manual_seed(7))
    assert len(learner.normalizers) == 2, "the actor's and the critic's"
    for normalizer, _ in learner.normalizers:
        normalizer.update(earlier)
    batch = _batch(rnn_type)
    reference = _reference_update(learner, batch)  # with frozen copies of the statistics from before the batch
    _check_margins(reference, LR_MAX, cfg.algorithm.desired_kl)
    initial = [p.detach().clone() for p in _learner_parameters(learner)]

    stats = _update(learner, batch)

    _assert_update_equals(learner, initial, stats, reference)
    seen = torch.cat([earlier, batch["policy"].reshape(-1, OBS)])
    for normalizer, _ in learner.normalizers:
        assert int(normalizer.count) == len(seen)
        torch.testing.assert_close(normalizer.mean, seen.mean(0), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(normalizer.var, seen.var(0, unbiased=False), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("rnn_type", [None, "lstm"])
def test_lag_corrected_update_clips_against_the_proximal_policy_and_weights_advantages_by_truncated_ratios(rnn_type):
    """Decoupled PPO: the learner's policy at the start of the update (the proximal one) is the reference of the
    ratio, the clip and the KL of every minibatch; the normalised advantages are multiplied by the importance weight
    min(exp(proximal - acting log-probability), 1). The batch's acting policy (its log-probabilities, loc and scale)
    is another one, so that both references differ and the weights are below 1 on some steps, truncated on others."""
    torch.manual_seed(0)
    # from the rate's maximum: the first minibatch's KL to the proximal policy (the same weights) is zero up to
    # rounding, where the schedule's "0 < kl" may grow the rate or not
    cfg = _cfg(rnn_type, **SEVERAL_STEPS, learning_rate=LR_MAX)
    learner = PPO(cfg, INTERFACE, "cpu", lag_corrected=True)
    batch = _batch(rnn_type)
    reference = _reference_update(learner, batch, lag_corrected=True)
    _check_margins(reference, LR_MAX, cfg.algorithm.desired_kl)
    weight = reference.importance_weights
    assert bool((weight < 0.9).any()) and bool((weight == 1.0).any()), weight
    initial = [p.detach().clone() for p in _learner_parameters(learner)]

    stats = _update(learner, batch)

    _assert_update_equals(learner, initial, stats, reference)
    assert stats["importance_weight"] == pytest.approx(float(weight.mean()), rel=1e-5)
    assert stats["truncated_fraction"] == pytest.approx(float((weight == 1.0).float().mean()), rel=1e-5)


@pytest.mark.parametrize("rnn_type", [None, "lstm"])
def test_rounding_between_the_proximal_and_the_acting_policy_is_not_truncation(rnn_type):
    """Without lag the acting log-probabilities are the proximal ones up to rounding (on a GPU the update's recurrent
    backend against the worker's step-by-step one): the weights are one and no sample counts as truncated."""
    torch.manual_seed(0)
    learner = PPO(_cfg(rnn_type, **ONE_STEP), INTERFACE, "cpu", lag_corrected=True)
    batch = _batch(rnn_type)
    proximal, _ = learner.proximal_log_probs_and_weights(batch.clone())
    batch["action_log_prob"] = proximal - 1e-5  # the acting policy's, rounded a little lower

    stats = _update(learner, batch)

    assert stats["importance_weight"] == pytest.approx(1.0)
    assert stats["truncated_fraction"] == 0.0


@pytest.mark.parametrize("rnn_type", [None, "lstm"])
def test_minibatches_are_steps_for_an_mlp_and_slices_for_a_recurrent_policy(rnn_type):
    """rsl_rl's two generators: an MLP's minibatches mix single steps of all slices; a recurrent policy's keep
    whole slices (its state runs along them), with the state stored at each slice's first step; every epoch covers
    the batch once."""
    cfg = _cfg(rnn_type, epochs=1, minibatches=2, schedule="fixed")
    learner = PPO(cfg, INTERFACE, "cpu")
    batch = TensorDict({"index": torch.arange(N * T).view(N, T)}, batch_size=(N, T))
    for key in learner.state_shapes:  # each step's state holds the step's index
        batch[key] = batch["index"].float()[..., None, None].expand(N, T, 1, HIDDEN)
    torch.manual_seed(0)
    minibatches = list(learner._minibatches(batch))
    assert len(minibatches) == 2
    seen = torch.cat([minibatch["index"].reshape(-1) for minibatch in minibatches])
    assert sorted(seen.tolist()) == list(range(N * T))
    if rnn_type is None:
        assert all(minibatch.batch_size == (N * T // 2,) for minibatch in minibatches)
        slices_per_minibatch = [len(set((minibatch["index"] // T).tolist())) for minibatch in minibatches]
        assert max(slices_per_minibatch) > N // 2, "steps of more slices than a split of whole slices would hold"
    else:
        assert all(minibatch.batch_size == (N // 2, T) for minibatch in minibatches)
        for minibatch in minibatches:
            assert torch.equal(minibatch["index"] % T, torch.arange(T).expand(N // 2, T)), "whole slices, in order"
            first = minibatch["index"][:, :1].float()[..., None, None].expand(N // 2, T, 1, HIDDEN)
            assert learner.state_shapes and all(torch.equal(minibatch[key], first) for key in learner.state_shapes)


@pytest.mark.parametrize("rnn_type", [None, "lstm"])
@pytest.mark.parametrize("where", ["everywhere", "one step"])
def test_a_non_finite_loss_stops_the_update_with_no_step_applied_from_its_minibatch_on(rnn_type, where):
    """A NaN in one minibatch's loss (here an action, which the batch's own check does not read): that step and every
    later one are skipped on the device, the error names the minibatch, and the networks, Adam's moments and the
    learning rate stay as the steps before it left them."""
    torch.manual_seed(0)
    learner = PPO(_cfg(rnn_type, **SEVERAL_STEPS), INTERFACE, "cpu")
    batch = _batch(rnn_type)
    if where == "everywhere":
        batch["action"][:] = float("nan")
    else:
        batch["action"][2, 4] = float("nan")
    initial = [p.detach().clone() for p in _learner_parameters(learner)]
    rates = [learner.learning_rate]  # then the learning rate and the parameters at each optimizer step
    after_steps = []

    def record(*_):
        rates.append(learner.learning_rate)
        after_steps.append([p.detach().clone() for p in _learner_parameters(learner)])

    learner.optimizer.register_step_post_hook(record)

    with pytest.raises(NonFiniteError, match=r"Non-finite \['surrogate'.*\] in minibatch (\d) \(epoch 1\)") as error:
        _update(learner, batch)

    applied = int(error.value.args[0].split("in minibatch ")[1][0]) - 1
    assert error.value.parameters_unchanged == (applied == 0)
    steps = {int(state["step"]) for state in learner.optimizer.state.values()}
    assert steps <= {applied}, f"{applied} steps before the NaN, Adam counted {steps}"
    assert len(rates) == 1 + 6 and set(rates[applied:]) == {rates[applied]}, rates
    last_applied = after_steps[applied - 1] if applied else initial
    for skipped in after_steps[applied:]:
        assert all(torch.equal(p, q) for p, q in zip(skipped, last_applied, strict=True))
    if where == "everywhere":
        assert applied == 0
        assert all(torch.equal(p, q) for p, q in zip(_learner_parameters(learner), initial, strict=True))
        assert learner.learning_rate == pytest.approx(LR)
    assert all(bool(torch.isfinite(p).all()) for p in _learner_parameters(learner))


def test_an_update_after_a_non_finite_one_applies_its_steps():
    """The guard's flag starts each update clear: after an update that met a NaN, a finite batch trains."""
    torch.manual_seed(0)
    learner = PPO(_cfg("lstm", **SEVERAL_STEPS), INTERFACE, "cpu")
    bad = _batch("lstm")
    bad["action"][:] = float("nan")
    with pytest.raises(NonFiniteError):
        _update(learner, bad)
    before = [p.detach().clone() for p in _learner_parameters(learner)]

    _update(learner, _batch("lstm"))

    assert {int(state["step"]) for state in learner.optimizer.state.values()} == {6}
    assert all(not torch.equal(p, q) for p, q in zip(_learner_parameters(learner), before, strict=True))


@pytest.mark.parametrize(
    "saved_with",
    [{"fused": False, "capturable": False}, {"fused": True, "capturable": True}],
    ids=["cpu_before_fused_adam", "gpu"],
)
def test_a_checkpoint_resumes_whatever_settings_its_optimizer_was_saved_with(saved_with):
    """A checkpoint's optimizer was not fused (CPU runs before fused Adam) or was capturable (a GPU run): resumed here,
    the update steps as the run it continues would have, with this learner's own settings."""
    torch.manual_seed(0)
    trained = PPO(_cfg("lstm", **SEVERAL_STEPS), INTERFACE, "cpu")
    _update(trained, _batch("lstm"))
    state = copy.deepcopy(trained.state_dict())  # as read from a file: no tensor shared with the trained learner
    state["optimizer"] = {
        **state["optimizer"],
        "param_groups": [{**g, **saved_with} for g in state["optimizer"]["param_groups"]],
    }
    resumed = PPO(_cfg("lstm", **SEVERAL_STEPS), INTERFACE, "cpu")
    resumed.load_state_dict(state)
    batch = _batch("lstm")

    for learner in (resumed, trained):
        torch.manual_seed(1)  # the same minibatch split
        _update(learner, batch.clone())

    assert all(g["fused"] and not g["capturable"] for g in resumed.optimizer.param_groups)
    for p, q in zip(_learner_parameters(resumed), _learner_parameters(trained), strict=True):
        torch.testing.assert_close(p, q)
