"""The ``fused`` recurrent backend (the graphed update's) computes what torchrl's ``pad`` backend computes: the
features, the states written at the trajectories' ends and every gradient, over slices with episode starts in the
middle, eagerly and under ``torch.compile`` (which the GPU's graphed update runs it in). Our ``pad`` backend (not
packed) computes torchrl's features and their gradients."""

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictSequential
from torchrl.modules import GRUModule, LSTMModule, set_recurrent_mode

from isaaclab_torchrl.paired_recurrence import PairedRecurrence
from isaaclab_torchrl.recurrent import (
    ROLLOUT_START_KEY,
    FusedGRUModule,
    FusedLSTMModule,
    PaddedGRUModule,
    PaddedLSTMModule,
    _GRULayer,
    _LSTMLayer,
    fold_states,
)
from isaaclab_torchrl.runners import PPO
from ppo_reference import HIDDEN as STATE_SIZE
from ppo_reference import INTERFACE, SEVERAL_STEPS, N, _batch, _cfg, _update
from ppo_reference import T as STEPS

pytestmark = pytest.mark.fast

B, T, IN, HIDDEN = 6, 7, 3, 5


def _modules(rnn_type: str, num_layers: int):
    states = ["h", "c"] if rnn_type == "lstm" else ["h"]
    kwargs = dict(
        input_size=IN,
        hidden_size=HIDDEN,
        num_layers=num_layers,
        in_keys=["x", *states],
        out_keys=["y", *(("next", key) for key in states)],
    )
    reference_class, fused_class = (LSTMModule, FusedLSTMModule) if rnn_type == "lstm" else (GRUModule, FusedGRUModule)
    reference = reference_class(**kwargs, recurrent_backend="pad")
    fused = fused_class(**kwargs)
    fused.load_state_dict(reference.state_dict())  # the same parameter names: checkpoints move between backends
    return reference, fused, [("next", key) for key in states]


def _slices(rnn_type: str, num_layers: int) -> TensorDict:
    generator = torch.Generator().manual_seed(1)
    is_init = torch.rand(B, T, 1, generator=generator) < 0.3
    is_init[:, 0] = True
    is_init[1] = False  # a slice that continues an episode from a stored state
    is_init[2, 3:5] = True  # an episode of one step
    # the stored states, zero where an episode starts (what the collectors store)
    states = {
        key: torch.randn(B, T, num_layers, HIDDEN, generator=generator) * ~is_init.unsqueeze(-1) for key in ("h", "c")
    }
    if rnn_type == "gru":
        del states["c"]
    return TensorDict({"x": torch.randn(B, T, IN, generator=generator), "is_init": is_init, **states}, [B, T])


def _outputs_and_gradients(module, slices: TensorDict, state_keys):
    slices = slices.clone()
    x = slices["x"].requires_grad_(True)
    with set_recurrent_mode(True):
        out = module(slices)
    loss = out["y"].square().sum() + sum(0.3 * out[key].sum() for key in state_keys)
    gradients = torch.autograd.grad(loss, [*module.parameters(), x])
    return [out["y"], *(out[key] for key in state_keys)], gradients


def _refuse(*args):
    raise AssertionError("the layer that keeps its backward pass's tensors ran without gradients")


@pytest.mark.parametrize("rnn_type", ["lstm", "gru"])
@pytest.mark.parametrize("num_layers", [1, 2])
def test_fused_backend_equals_torchrls_pad_backend(rnn_type, num_layers):
    torch.manual_seed(0)
    reference, fused, state_keys = _modules(rnn_type, num_layers)
    slices = _slices(rnn_type, num_layers)
    expected_outputs, expected_gradients = _outputs_and_gradients(reference, slices, state_keys)
    modules = [fused, torch.compile(fused)] if num_layers == 1 else [fused]
    for module in modules:
        outputs, gradients = _outputs_and_gradients(module, slices, state_keys)
        expected = expected_outputs + list(expected_gradients)
        for actual, wanted in zip(outputs + list(gradients), expected, strict=True):
            torch.testing.assert_close(actual, wanted, atol=1e-5, rtol=1e-5)
    # without gradients (GAE's value pass, the proximal pass: no grad mode, or nothing that requires one) the plain
    # loop runs, not the layer that keeps its backward pass's tensors, and gives the same features and states
    layer = _LSTMLayer if rnn_type == "lstm" else _GRULayer
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(layer, "apply", _refuse)
        with torch.no_grad(), set_recurrent_mode(True):
            without_grad = fused(slices.clone())
        for parameter in fused.parameters():
            parameter.requires_grad_(False)
        with set_recurrent_mode(True):
            frozen = fused(slices.clone())
        for parameter in fused.parameters():
            parameter.requires_grad_(True)
    for out in (without_grad, frozen):
        for actual, wanted in zip([out["y"], *(out[key] for key in state_keys)], expected_outputs, strict=True):
            torch.testing.assert_close(actual, wanted, atol=1e-5, rtol=1e-5)
    # the step-by-step path (collection) is torchrl's own: one step from the stored state gives the first feature
    with set_recurrent_mode(False):
        step = fused(slices[:, 0].clone())
    torch.testing.assert_close(step["y"], expected_outputs[0][:, 0], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("rnn_type", ["lstm", "gru"])
@pytest.mark.parametrize("num_layers", [1, 2])
def test_unpacked_pad_backend_gives_torchrls_features_and_gradients(rnn_type, num_layers):
    torch.manual_seed(0)
    reference, _, state_keys = _modules(rnn_type, num_layers)
    padded = (PaddedLSTMModule if rnn_type == "lstm" else PaddedGRUModule)(
        input_size=IN, hidden_size=HIDDEN, num_layers=num_layers, in_keys=reference.in_keys, out_keys=reference.out_keys
    )
    padded.load_state_dict(reference.state_dict())
    slices = _slices(rnn_type, num_layers)
    # the features and their gradients; the final states of split trajectories are not written (training reads none)
    expected, expected_gradients = _outputs_and_gradients(reference, slices, [])
    actual, gradients = _outputs_and_gradients(padded, slices, [])
    for value, wanted in zip(actual + list(gradients), expected + list(expected_gradients), strict=True):
        torch.testing.assert_close(value, wanted, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("rnn_type", ["lstm", "gru"])
@pytest.mark.parametrize("backend", ["pad", "fused"])
@pytest.mark.parametrize("lag_corrected", [False, True])
def test_the_update_reads_the_state_stored_at_each_slices_first_step_only(rnn_type, backend, lag_corrected):
    """The collectors store the state each rollout starts from, folded across its steps: the update (GAE, the lag
    correction's pass, the epochs) from it equals the update from every step's state, and from every step's state
    with those of the other steps replaced (at an episode start the state is zero, whatever is stored)."""
    keys = ["actor_rnn_h", "actor_rnn_c", "critic_rnn_h", "critic_rnn_c"]
    if rnn_type == "gru":
        keys = ["actor_rnn_h", "critic_rnn_h"]
    every = _batch("lstm").exclude("actor_rnn_c", "critic_rnn_c") if rnn_type == "gru" else _batch("lstm")
    replaced = every.clone()
    for key in keys:
        replaced[key][:, 1:] = 5.0 + torch.randn_like(replaced[key][:, 1:])
    folded = every.exclude(*keys).set(ROLLOUT_START_KEY, fold_states(every[:, 0].select(*keys), STEPS))
    assert folded[ROLLOUT_START_KEY, "actor_rnn_h"].shape == (N, STEPS, -(-STATE_SIZE // STEPS))
    updates = []
    for batch in (every, replaced, folded):
        torch.manual_seed(0)
        cfg = _cfg(rnn_type, **SEVERAL_STEPS)
        cfg.policy.recurrent_backend = backend
        learner = PPO(cfg, INTERFACE, "cpu", lag_corrected=lag_corrected)
        stats = _update(learner, batch)
        updates.append((stats, [parameter.detach().clone() for parameter in learner.loss.parameters()]))
    (expected_stats, expected), *others = updates
    for stats, parameters in others:
        assert stats == expected_stats
        for parameter, wanted in zip(parameters, expected, strict=True):
            torch.testing.assert_close(parameter, wanted, rtol=0, atol=0)


class _HostReads(torch.utils._python_dispatch.TorchDispatchMode):
    """Counts the operators whose result the host must wait for on a GPU: a tensor's value read (``bool``, ``item``),
    a comparison returning a bool, and those with data-dependent shapes (``nonzero``, boolean masks)."""

    READS = {"aten::is_nonzero", "aten::_local_scalar_dense", "aten::item", "aten::equal", "aten::nonzero"}
    READS |= {"aten::masked_select", "aten::unique", "aten::_unique2"}
    INDEXING = {"aten::index.Tensor", "aten::index_put_", "aten::index_put"}

    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.name()
        indices = args[1] if name in self.INDEXING and len(args) > 1 else ()
        mask = any(isinstance(index, torch.Tensor) and index.dtype == torch.bool for index in indices or ())
        self.count += name in self.READS or mask
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("rnn_type", ["lstm", "gru"])
def test_the_state_primer_resets_ended_episodes_as_torchrls_does_without_reading_the_mask(rnn_type):
    """After Isaac Lab's reset inside its step (torchrl's native auto-reset), the states of the ended episodes become
    zero as torchrl's primer makes them, without the host reading whether any episode ended."""
    from torchrl.envs import TensorDictPrimer

    _, fused, _ = _modules(rnn_type, 1)
    ours = fused.make_tensordict_primer()
    primers = ours.primers.expand(B)  # as an env of B environments expands them
    ours = type(ours)(primers, expand_specs=True, reset_key="_reset")
    reference = TensorDictPrimer(primers.clone(), expand_specs=True, reset_key="_reset")
    generator = torch.Generator().manual_seed(2)
    for ended in (torch.rand(B, 1, generator=generator) < 0.5, torch.zeros(B, 1, dtype=torch.bool)):
        step = TensorDict({key: torch.randn(B, 1, HIDDEN, generator=generator) for key in primers.keys()}, [B])
        step["_reset"] = ended
        expected = reference._reset_on_native_autoreset(step.clone(), step.clone())
        with _HostReads() as reads:
            actual = ours._reset_on_native_autoreset(step.clone(), step.clone())
        assert reads.count == 0
        for key in primers.keys():
            torch.testing.assert_close(actual[key], expected[key], rtol=0, atol=0)
            assert torch.equal(actual[key][ended.squeeze(-1)], torch.zeros_like(actual[key][ended.squeeze(-1)]))
    with _HostReads() as reads:  # torchrl's primer reads it: what the count would see
        reference._reset_on_native_autoreset(step.clone(), step.clone())
    assert reads.count > 0


@pytest.mark.parametrize("num_layers", [1, 2])
def test_the_paired_recurrence_equals_each_networks_own_pass(num_layers):
    """The actor's and the critic's LSTMs run together (:class:`PairedRecurrence`, their recurrences batched) give
    each one's features and every gradient of its own pass, with inputs of different sizes, eagerly and compiled."""
    torch.manual_seed(0)
    _, first, _ = _modules("lstm", num_layers)
    second = FusedLSTMModule(
        input_size=IN + 2,
        hidden_size=HIDDEN,
        num_layers=num_layers,
        in_keys=["x2", "h2", "c2"],
        out_keys=["y2", ("next", "h2"), ("next", "c2")],
    )
    slices = _slices("lstm", num_layers)
    slices["x2"] = torch.randn(B, T, IN + 2)
    slices["h2"], slices["c2"] = slices["h"].flip(0), slices["c"].flip(0)  # zero where an episode starts, as stored
    slices["h2"] = torch.where(slices["is_init"].unsqueeze(-1), 0.0, slices["h2"])
    slices["c2"] = torch.where(slices["is_init"].unsqueeze(-1), 0.0, slices["c2"])
    paired = PairedRecurrence([TensorDictSequential(), TensorDictSequential()], [first, second])

    def features_and_gradients(run):
        inputs = slices.clone()
        xs = [inputs["x"].requires_grad_(True), inputs["x2"].requires_grad_(True)]
        with set_recurrent_mode(True):
            y, y2 = run(inputs)
        loss = y.square().sum() + y2.sin().sum()
        return [y, y2, *torch.autograd.grad(loss, [*first.parameters(), *second.parameters(), *xs])]

    expected = features_and_gradients(lambda inputs: (first(inputs.clone(False))["y"], second(inputs)["y2"]))
    together = paired.forward
    runs = [together, torch.compile(together)] if num_layers == 1 else [together]
    for run in runs:
        actual = features_and_gradients(lambda inputs, run=run: tuple(run(inputs).get(key) for key in ("y", "y2")))
        for value, wanted in zip(actual, expected, strict=True):
            torch.testing.assert_close(value, wanted, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(("rnn_type", "backend"), [("lstm", "fused"), ("lstm", "pad"), ("gru", "fused")])
def test_the_update_pairs_the_fused_lstms_only(rnn_type, backend):
    """The update runs a fused-LSTM actor's and critic's recurrent layers together, through their own modules (one
    copy of the weights), and any other pair each in its own network."""
    cfg = _cfg(rnn_type, epochs=1, minibatches=1, schedule="fixed")
    cfg.policy.recurrent_backend = backend
    learner = PPO(cfg, INTERFACE, "cpu")
    recurrence = learner.loss.recurrence
    if (rnn_type, backend) != ("lstm", "fused"):
        assert recurrence is None
        return
    actor_lstm, critic_lstm = (
        next(m for m in net.modules() if isinstance(m, FusedLSTMModule)) for net in (learner.actor, learner.critic)
    )
    assert list(recurrence.lstms) == [actor_lstm, critic_lstm]
    assert {id(p) for p in learner.parameters} == {
        id(p) for p in (*learner.actor.parameters(), *learner.critic.parameters())
    }
