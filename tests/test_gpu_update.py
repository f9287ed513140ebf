"""On a GPU: the learner's update as the GPU runs it (compiled losses, the fused recurrent pass in Triton's kernels,
the gradient step replayed as a CUDA graph) equals the plain PyTorch PPO's on the CPU from the same weights."""

import copy
import types

import pytest
import torch

from isaaclab_torchrl.runners import PPO
from isaaclab_torchrl.runners.safety import NonFiniteError
from ppo_reference import INTERFACE, SEED, _batch, _cfg, _learner_parameters, _reference_update

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")


def _gpu_learner(rnn_type, compile_: bool, cudagraphs: bool, minibatches: int) -> PPO:
    """A learner on the GPU, its weights from seed 0, for three epochs of ``minibatches`` minibatches."""
    torch.manual_seed(0)
    cfg = _cfg(rnn_type, epochs=3, minibatches=minibatches, schedule="fixed")
    cfg.device = "cuda:0"
    cfg.compile, cfg.cudagraphs = compile_, cudagraphs
    if rnn_type:
        cfg.policy.recurrent_backend = "fused"
    return PPO(cfg, INTERFACE, "cuda:0")


@pytest.mark.parametrize(
    ("rnn_type", "compile_", "cudagraphs"),
    [("lstm", True, True), ("lstm", True, False), ("lstm", False, False), (None, True, True)],
)
def test_the_gpu_update_equals_the_plain_pytorch_one(rnn_type, compile_, cudagraphs):
    # three gradient steps of one minibatch: the first runs eagerly, the second captures the graph, the third replays
    learner = _gpu_learner(rnn_type, compile_, cudagraphs, minibatches=1)
    twin = types.SimpleNamespace(
        actor=copy.deepcopy(learner.actor).cpu(), critic=copy.deepcopy(learner.critic).cpu(), cfg=learner.cfg
    )
    batch = _batch(rnn_type)
    reference = _reference_update(twin, batch)
    initial = [p.detach().cpu().clone() for p in _learner_parameters(learner)]

    torch.manual_seed(SEED)
    stats = learner.update(batch.to("cuda:0"))

    updated = [p.detach().cpu() for p in _learner_parameters(learner)]
    for index, (before, after, expected) in enumerate(zip(initial, updated, reference.parameters, strict=True)):
        assert not torch.equal(before, after), f"parameter {index} moved"
        torch.testing.assert_close(after, expected.detach(), atol=1e-5, rtol=1e-5, msg=f"parameter {index}")
    for key, value in reference.stats.items():
        assert stats[key] == pytest.approx(value, abs=1e-5, rel=1e-5), key


@pytest.mark.parametrize("rnn_type", ["lstm", None])
def test_the_graphed_update_equals_the_eager_one_over_epochs_of_several_minibatches(rnn_type):
    """The epochs go through the same minibatches again, and the graph is captured on one of them: its replays must
    not write the other minibatches into it (:class:`~isaaclab_torchrl.runners.compilation.CallerSafeCudaGraph`).
    Both updates compile their losses and split the batch alike (the same seed on the same device)."""
    updated = []
    for cudagraphs in (False, True):
        learner = _gpu_learner(rnn_type, compile_=True, cudagraphs=cudagraphs, minibatches=2)
        torch.manual_seed(SEED)
        learner.update(_batch(rnn_type).to("cuda:0"))
        updated.append([p.detach().cpu() for p in _learner_parameters(learner)])
    for index, (eager, graphed) in enumerate(zip(*updated, strict=True)):
        torch.testing.assert_close(graphed, eager, atol=1e-5, rtol=1e-5, msg=f"parameter {index}")


@pytest.mark.parametrize("rnn_type", ["lstm", None])
def test_the_graphed_update_skips_every_step_from_a_non_finite_minibatch_on(rnn_type):
    """The NaN check on the device (fused Adam's ``found_inf`` on CUDA): no step from the bad minibatch on."""
    learner = _gpu_learner(rnn_type, compile_=True, cudagraphs=True, minibatches=2)
    batch = _batch(rnn_type)
    batch["action"][2, 4] = float("nan")
    torch.manual_seed(SEED)
    with pytest.raises(NonFiniteError, match=r"in minibatch \d \(epoch 1\)") as error:
        learner.update(batch.to("cuda:0"))
    applied = int(error.value.args[0].split("in minibatch ")[1][0]) - 1
    assert {int(state["step"]) for state in learner.optimizer.state.values()} <= {applied}
    assert all(bool(torch.isfinite(p).all()) for p in _learner_parameters(learner))


@pytest.mark.parametrize("rnn_type", ["lstm", None])
def test_the_graphed_update_equals_the_eager_one_over_several_updates(rnn_type):
    """Each update replays the graph captured in the first one on a new batch, with the adaptive schedule: the
    capture's gradient tensors, which the optimizer reads, the learning-rate tensor and Adam's moments carry from one
    update to the next as in the eager update."""
    results = []
    for cudagraphs in (False, True):
        learner = _gpu_learner(rnn_type, compile_=True, cudagraphs=cudagraphs, minibatches=2)
        learner.cfg.algorithm.schedule = "adaptive"
        rates = []
        for update in range(3):
            batch = _batch(rnn_type)
            generator = torch.Generator().manual_seed(update)
            batch["next", "reward"] = torch.randn(batch["next", "reward"].shape, generator=generator)
            torch.manual_seed(SEED + update)
            learner.update(batch.to("cuda:0"))
            rates.append(learner.learning_rate)
        results.append((rates, [p.detach().cpu() for p in _learner_parameters(learner)]))
    (eager_rates, eager), (graphed_rates, graphed) = results
    assert len(set(eager_rates)) > 1, "the schedule changed the learning rate"
    assert graphed_rates == pytest.approx(eager_rates, rel=1e-6)
    for index, (expected, actual) in enumerate(zip(eager, graphed, strict=True)):
        torch.testing.assert_close(actual, expected, atol=1e-5, rtol=1e-5, msg=f"parameter {index}")
