"""The recurrent backends: LSTM and GRU layers over whole trajectory slices in recurrent mode (GAE, the update).

``pad`` (:class:`PaddedLSTMModule`, :class:`PaddedGRUModule`): torchrl's, the slices split at episode starts and
padded at their ends, run through ``nn.LSTM`` / ``nn.GRU`` (cuDNN, MKL) without packing them.

``fused`` (:class:`FusedLSTMModule`, :class:`FusedGRUModule`): episode starts as a mask.

torchrl's :class:`~torchrl.modules.LSTMModule` and :class:`~torchrl.modules.GRUModule` keep their keys, their
step-by-step collection path (cuDNN, one step) and their weights; only their pass over trajectory slices in
recurrent mode (GAE, the update) is replaced. It keeps the slices' fixed shape (a CUDA graph replays it) and
computes what torchrl's ``scan`` backend computes, with a backward pass written out instead of traced:

* the input projection of every step is one matrix product before the time loop, and the weight gradients are
  one matrix product each over all steps after it; only the hidden state's own product stays in the loop;
* the time loop is a plain Python loop over the slice's fixed number of steps, which ``torch.compile`` unrolls;
  compiled and graphed, it updates faster than torchrl's ``scan`` on a GPU (``docs/benchmarks.md``);
* at an episode start the state entering the step is zero, as in the step-by-step path; no gradient flows across it;
* without gradients (GAE's value pass and the proximal pass over the whole batch) a plain loop keeps each step's
  states only, not what the backward pass reads: on a GPU the learner's peak memory is that pass's
  (``docs/benchmarks.md``).

Every backend reads a slice's stored state at its first step only (:func:`first_states`): a batch stores the state
each rollout starts from once, folded across the rollout's steps (:func:`fold_states`), not the state of every step.
"""

from __future__ import annotations

import inspect

import torch
from tensordict import TensorDictBase
from torchrl.modules import GRUModule, LSTMModule

from .autoreset import StatePrimer


def _lstm_cell(gates: torch.Tensor, c: torch.Tensor):
    """One LSTM step from its gates before activation ``[B, 4H]`` and the cell state entering it: the activated gates
    (input, forget, cell, output), the new cell state and the new hidden state."""
    i, f, g, o = gates.chunk(4, -1)
    i, f, g, o = i.sigmoid(), f.sigmoid(), g.tanh(), o.sigmoid()
    c = f * c + i * g
    return (i, f, g, o), c, o * c.tanh()


def _gru_cell(gates_x: torch.Tensor, gates_h: torch.Tensor, h: torch.Tensor):
    """One GRU step from the input's and the hidden state's products ``[B, 3H]`` (biases included) and the hidden
    state entering it: the gates (reset, update, new), the hidden product's new-gate part, and the new hidden state."""
    x_r, x_z, x_n = gates_x.chunk(3, -1)
    h_r, h_z, h_n = gates_h.chunk(3, -1)
    r = (x_r + h_r).sigmoid()
    z = (x_z + h_z).sigmoid()
    n = (x_n + r * h_n).tanh()
    return (r, z, n, h_n), n + z * (h - n)


class _LSTMLayer(torch.autograd.Function):
    """The recurrence of ``S`` LSTM layers of one size over ``T`` steps with the same episode starts (one network's,
    or the actor's and the critic's: :mod:`isaaclab_torchrl.paired_recurrence`), one batched product per step:
    ``gates_x [T, S, B, 4H]`` (:func:`lstm_input_gates`), states ``[S, B, H]``, episode starts ``[T, 1, B, 1]``,
    ``w_hh [S, 4H, H]``. Returns the hidden and the cell state of every step, ``[T, S, B, H]`` each."""

    @staticmethod
    def forward(ctx, gates_x, h, c, is_init, w_hh):
        w_t = w_hh.transpose(1, 2)
        hs, cs, previous_hs, previous_cs, gates = [], [], [], [], []
        for t in range(gates_x.shape[0]):
            h = torch.where(is_init[t], 0.0, h)
            c = torch.where(is_init[t], 0.0, c)
            previous_hs.append(h)
            previous_cs.append(c)
            activated, c, h = _lstm_cell(torch.baddbmm(gates_x[t], h, w_t), c)
            hs.append(h)
            cs.append(c)
            gates.append(torch.cat(activated, -1))
        hs, cs = torch.stack(hs), torch.stack(cs)
        ctx.save_for_backward(torch.stack(previous_hs), torch.stack(previous_cs), cs, torch.stack(gates), is_init, w_hh)
        return hs, cs

    @staticmethod
    def backward(ctx, grad_hs, grad_cs):
        previous_hs, previous_cs, cs, gates, is_init, w_hh = ctx.saved_tensors
        steps = gates.shape[0]
        grad_h = torch.zeros_like(previous_hs[0])
        grad_c = torch.zeros_like(previous_cs[0])
        grad_gates = [None] * steps
        for t in reversed(range(steps)):
            i, f, g, o = gates[t].chunk(4, -1)
            tanh_c = cs[t].tanh()
            grad_h = grad_hs[t] + grad_h
            grad_c = grad_cs[t] + grad_c + grad_h * o * (1 - tanh_c * tanh_c)
            grad_gates[t] = torch.cat(
                (
                    grad_c * g * i * (1 - i),
                    grad_c * previous_cs[t] * f * (1 - f),
                    grad_c * i * (1 - g * g),
                    grad_h * tanh_c * o * (1 - o),
                ),
                -1,
            )
            grad_h = torch.bmm(grad_gates[t], w_hh)
            grad_c = grad_c * f
            # a step that starts an episode starts from zero, not from the previous step's state
            grad_h = torch.where(is_init[t], 0.0, grad_h)
            grad_c = torch.where(is_init[t], 0.0, grad_c)
        grad_gates = torch.stack(grad_gates)
        # each layer's [4H, H]: its steps' and slices' gradients times the states they multiplied
        grad_w_hh = torch.bmm(
            grad_gates.transpose(0, 1).flatten(1, 2).transpose(1, 2), previous_hs.transpose(0, 1).flatten(1, 2)
        )
        return grad_gates, grad_h, grad_c, None, grad_w_hh


def lstm_input_gates(x: torch.Tensor, w_ih: torch.Tensor, b_ih: torch.Tensor, b_hh: torch.Tensor) -> torch.Tensor:
    """A layer's input projection of every step, both biases added apart (compiled, their sum's backward gave both one
    gradient tensor, which the in-place clipping scaled twice): ``x [T, B, I]`` to ``[T, B, 4H]``."""
    return (torch.addmm(b_ih, x.flatten(0, 1), w_ih.t()) + b_hh).view(*x.shape[:2], -1)


class _GRULayer(torch.autograd.Function):
    """One GRU layer over ``T`` steps (torch's gate order: reset, update, new); returns the hidden states."""

    @staticmethod
    def forward(ctx, x, h, is_init, w_ih, w_hh, b_ih, b_hh):
        steps, batch = x.shape[:2]
        gates_x = torch.addmm(b_ih, x.flatten(0, 1), w_ih.t()).view(steps, batch, -1)
        hs, previous_hs, saved = [], [], []
        for t in range(steps):
            h = torch.where(is_init[t], 0.0, h)
            previous_hs.append(h)
            gates, h = _gru_cell(gates_x[t], torch.addmm(b_hh, h, w_hh.t()), h)
            hs.append(h)
            saved.append(torch.cat(gates, -1))
        hs = torch.stack(hs)
        ctx.save_for_backward(x, torch.stack(previous_hs), torch.stack(saved), is_init, w_ih, w_hh)
        return hs

    @staticmethod
    def backward(ctx, grad_hs):
        x, previous_hs, saved, is_init, w_ih, w_hh = ctx.saved_tensors
        steps = x.shape[0]
        grad_h = torch.zeros_like(previous_hs[0])
        grad_gates_x, grad_gates_h = [None] * steps, [None] * steps
        for t in reversed(range(steps)):
            r, z, n, h_n = saved[t].chunk(4, -1)
            grad_h = grad_hs[t] + grad_h
            grad_n = grad_h * (1 - z) * (1 - n * n)
            grad_z = grad_h * (previous_hs[t] - n) * z * (1 - z)
            grad_r = grad_n * h_n * r * (1 - r)
            grad_gates_x[t] = torch.cat((grad_r, grad_z, grad_n), -1)
            grad_gates_h[t] = torch.cat((grad_r, grad_z, grad_n * r), -1)
            grad_h = grad_h * z + grad_gates_h[t] @ w_hh
            grad_h = torch.where(is_init[t], 0.0, grad_h)
        grad_gates_x = torch.stack(grad_gates_x).flatten(0, 1)
        grad_gates_h = torch.stack(grad_gates_h).flatten(0, 1)
        grad_x = (grad_gates_x @ w_ih).view_as(x)
        grad_w_ih = grad_gates_x.t() @ x.flatten(0, 1)
        grad_w_hh = grad_gates_h.t() @ previous_hs.flatten(0, 1)
        return (
            grad_x,
            grad_h,
            None,
            grad_w_ih,
            grad_w_hh,
            grad_gates_x.sum(0),
            grad_gates_h.sum(0),
        )


def _lstm_layer_without_grad(x, h, c, is_init, w_ih, w_hh, bias):
    """One layer's forward pass of :class:`_LSTMLayer` without what its backward pass reads: the input projection
    step by step and the hidden and cell state of every step, written into their outputs."""
    hs = cs = None
    for t in range(x.shape[0]):
        h = torch.where(is_init[t], 0.0, h)
        c = torch.where(is_init[t], 0.0, c)
        _, c, h = _lstm_cell(torch.addmm(torch.addmm(bias, x[t], w_ih.t()), h, w_hh.t()), c)
        if hs is None:
            hs, cs = h.new_empty(x.shape[0], *h.shape), c.new_empty(x.shape[0], *c.shape)
        hs[t], cs[t] = h, c
    return hs, cs


def _gru_layer_without_grad(x, h, is_init, w_ih, w_hh, b_ih, b_hh):
    """:class:`_GRULayer`'s forward pass without what its backward pass reads (see
    :func:`_lstm_layer_without_grad`)."""
    hs = None
    for t in range(x.shape[0]):
        h = torch.where(is_init[t], 0.0, h)
        _, h = _gru_cell(torch.addmm(b_ih, x[t], w_ih.t()), torch.addmm(b_hh, h, w_hh.t()), h)
        if hs is None:
            hs = h.new_empty(x.shape[0], *h.shape)
        hs[t] = h
    return hs


def _needs_grad(input: torch.Tensor, rnn: torch.nn.RNNBase) -> bool:
    return torch.is_grad_enabled() and (input.requires_grad or any(p.requires_grad for p in rnn.parameters()))


def _layer_weights(rnn: torch.nn.RNNBase, layer: int, gates: int) -> tuple[torch.Tensor, ...]:
    """A layer's input and hidden weights and biases (zeros for a layer without bias)."""
    w_ih, w_hh = getattr(rnn, f"weight_ih_l{layer}"), getattr(rnn, f"weight_hh_l{layer}")
    if rnn.bias:
        return w_ih, w_hh, getattr(rnn, f"bias_ih_l{layer}"), getattr(rnn, f"bias_hh_l{layer}")
    zeros = w_ih.new_zeros(gates * rnn.hidden_size)
    return w_ih, w_hh, zeros, zeros


def _check_supported(rnn: torch.nn.RNNBase) -> None:
    if rnn.dropout or rnn.bidirectional or getattr(rnn, "proj_size", 0):
        raise ValueError("the fused recurrent backend supports neither dropout, bidirectional layers nor projections")


_gru_forward = inspect.unwrap(GRUModule.forward)


def _from_first_states(forward, module, tensordict: TensorDictBase) -> TensorDictBase:
    """Runs torchrl's ``pad`` ``forward`` in recurrent mode with the states of the slices' first steps only (see the
    module's docstring): torchrl splits the slices at episode starts and starts each part from the state stored at
    its first step, which is made zero at an episode start here."""
    if not module.recurrent_mode:
        return forward(tensordict)
    starts = tensordict.clone(False)
    is_init = starts.get("is_init").unsqueeze(-1)
    for key in module.in_keys[1:-1]:
        state = starts.get(key, None)
        if state is not None:
            starts.set(key, torch.where(is_init, 0.0, state))
    return tensordict.update(forward(starts).select(*module.out_keys))


def _end_mask(is_init: torch.Tensor) -> torch.Tensor:
    """``[B, T]``: where a trajectory ends inside the slice (before an episode start, and at the slice's end)."""
    return torch.cat((is_init[:, 1:], torch.ones_like(is_init[:, :1])), 1)


def _mask_to_ends(states: torch.Tensor, is_init: torch.Tensor) -> torch.Tensor:
    """Per-step states ``[T, B, L, H]`` as torchrl's modules write them: ``[B, T, L, H]``, zero but at the ends."""
    return torch.where(_end_mask(is_init)[..., None, None], states.transpose(0, 1), 0.0)


class _SyncFreePrimer:
    """A recurrent module whose state primer resets the states without a host sync (:class:`StatePrimer`)."""

    def make_tensordict_primer(self) -> StatePrimer:
        # torchrl's primer of the module's states (zeros at an episode start), as a StatePrimer
        return StatePrimer(super().make_tensordict_primer().primers, expand_specs=True)


class FusedLSTMModule(_SyncFreePrimer, LSTMModule):
    """torchrl's :class:`~torchrl.modules.LSTMModule` whose recurrent mode runs :class:`_LSTMLayer` (see the module's
    docstring). Built with torchrl's ``pad`` backend, then routed through its ``scan`` path, which this class
    replaces: building it as ``scan`` would run torchrl's check of the scan operator, which is not used."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, recurrent_backend="pad", **kwargs)
        _check_supported(self.lstm)
        self.recurrent_backend = "scan"

    def _lstm_scan_with_resets(self, input, hidden0_in, hidden1_in, initial_hidden, is_init):
        # torchrl's layout: input [B, T, I], initial states [L, B, H] (the first step's), starts [B, T]
        steps_first = is_init.transpose(0, 1).unsqueeze(-1)
        layer_input = input.transpose(0, 1)
        with_grad = _needs_grad(input, self.lstm)
        hs, cs = [], []
        for layer in range(self.lstm.num_layers):
            w_ih, w_hh, b_ih, b_hh = _layer_weights(self.lstm, layer, 4)
            h, c = initial_hidden[0][layer], initial_hidden[1][layer]
            if with_grad:
                gates_x = lstm_input_gates(layer_input, w_ih, b_ih, b_hh)
                layer_input, c = (
                    out[:, 0]
                    for out in _LSTMLayer.apply(gates_x[:, None], h[None], c[None], steps_first[:, None], w_hh[None])
                )
            else:
                layer_input, c = _lstm_layer_without_grad(layer_input, h, c, steps_first, w_ih, w_hh, b_ih + b_hh)
            hs.append(layer_input)
            cs.append(c)
        hidden0 = _mask_to_ends(torch.stack(hs, 2), is_init)
        hidden1 = _mask_to_ends(torch.stack(cs, 2), is_init)
        return layer_input.transpose(0, 1), hidden0, hidden1


class FusedGRUModule(_SyncFreePrimer, GRUModule):
    """torchrl's :class:`~torchrl.modules.GRUModule` whose recurrent mode runs :class:`_GRULayer` (see
    :class:`FusedLSTMModule`)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, recurrent_backend="pad", **kwargs)
        _check_supported(self.gru)
        self.recurrent_backend = "scan"

    # torchrl's GRUModule.forward, without its decorators: `set_lazy_legacy(False)` (tensordict's default already)
    # writes os.environ at every call, which breaks torch.compile's graph of the update in two (LSTMModule.forward
    # has no such decorator); `dispatch` (calls with keyword tensors) is not used here. Proposed upstream: drop the
    # decorator from GRUModule.forward.
    forward = _gru_forward

    def _gru_scan_with_resets(self, input, hidden_in, initial_hidden, is_init):
        steps_first = is_init.transpose(0, 1).unsqueeze(-1)
        layer_input = input.transpose(0, 1)
        run_layer = _GRULayer.apply if _needs_grad(input, self.gru) else _gru_layer_without_grad
        hs = []
        for layer in range(self.gru.num_layers):
            layer_input = run_layer(
                layer_input,
                initial_hidden[layer],
                steps_first,
                *_layer_weights(self.gru, layer, 3),
            )
            hs.append(layer_input)
        return layer_input.transpose(0, 1), _mask_to_ends(torch.stack(hs, 2), is_init)


class PaddedLSTMModule(_SyncFreePrimer, LSTMModule):
    """torchrl's :class:`~torchrl.modules.LSTMModule` with its ``pad`` backend, whose recurrent mode runs the
    trajectories, split at episode starts and padded at their ends, through ``nn.LSTM`` as they are.

    torchrl 0.14.1 packs them (``pack_padded_sequence``) so that each trajectory's final state is the one after its
    last step rather than after the padding. Padding only follows a trajectory's last step, so every step's output is
    the same either way, and training reads no final state; on the CPU, packing made the LSTM's forward and backward
    pass ~3x slower (docs/benchmarks.md). The final state of a trajectory shorter than its slice is therefore not
    written (zero), as at the slices' other steps. Proposed upstream: pack only where final states are read (an
    option of the module, or never in recurrent mode, whose intermediate states are placeholders already).
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, recurrent_backend="pad", **kwargs)

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        return _from_first_states(super().forward, self, tensordict)

    def _lstm(self, input, batch, steps, device, dtype, hidden0_in=None, hidden1_in=None, splits=None, **kwargs):
        return super()._lstm(input, batch, steps, device, dtype, hidden0_in, hidden1_in, None, **kwargs)


class PaddedGRUModule(_SyncFreePrimer, GRUModule):
    """torchrl's :class:`~torchrl.modules.GRUModule` with its ``pad`` backend, padded trajectories not packed (see
    :class:`PaddedLSTMModule`), and its ``forward`` without decorators (see :class:`FusedGRUModule`)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, recurrent_backend="pad", **kwargs)

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        return _from_first_states(_gru_forward.__get__(self), self, tensordict)

    def _gru(self, input, batch, steps, device, dtype, hidden_in=None, splits=None, **kwargs):
        return super()._gru(input, batch, steps, device, dtype, hidden_in, None, **kwargs)


ROLLOUT_START_KEY = "rollout_start"
"""Where a batch stores the recurrent state each rollout starts from, folded across its steps (:func:`fold_states`)."""


def fold_states(states: TensorDictBase, steps: int) -> TensorDictBase:
    """Recurrent states ``[*B, ...]`` as ``[*B, steps, K]``: each flattened, zero-padded to ``steps * K`` values and
    split across the steps, so that a batch of ``[*B, steps]`` holds them with ``K`` values per step."""

    def fold(state: torch.Tensor) -> torch.Tensor:
        flat = state.reshape(*states.batch_size, -1)
        width = -(-flat.shape[-1] // steps)
        return torch.nn.functional.pad(flat, (0, steps * width - flat.shape[-1])).view(*flat.shape[:-1], steps, width)

    return states.apply(fold, batch_size=[*states.batch_size, steps])


def first_states(batch: TensorDictBase, shapes: dict[str, torch.Size]) -> TensorDictBase:
    """Sets each recurrent state of ``shapes`` in ``batch`` ``[..., steps]`` to the state its rollout started from
    (:data:`ROLLOUT_START_KEY`), repeated at every step as a view (stride 0): what the recurrent mode reads of it."""
    folded, lead, steps = batch.get(ROLLOUT_START_KEY), batch.shape[:-1], batch.shape[-1]
    for key, shape in shapes.items():
        state = folded.get(key).flatten(-2)[..., : shape.numel()].unflatten(-1, shape)
        batch.set(key, state.unsqueeze(len(lead)).expand(*lead, steps, *shape))
    return batch


def state_shapes(*modules: torch.nn.Module) -> dict[str, torch.Size]:
    """The recurrent state keys of the LSTM and GRU modules in ``modules``, and each state's shape per step."""
    shapes = {}
    for module in (child for parent in modules for child in parent.modules()):
        if isinstance(module, LSTMModule):
            rnn = module.lstm
            shapes[module.in_keys[1]] = torch.Size([rnn.num_layers, rnn.proj_size or rnn.hidden_size])
            shapes[module.in_keys[2]] = torch.Size([rnn.num_layers, rnn.hidden_size])
        elif isinstance(module, GRUModule):
            shapes[module.in_keys[1]] = torch.Size([module.gru.num_layers, module.gru.hidden_size])
    return shapes


def slices(batch: TensorDictBase, indices: torch.Tensor, shapes: dict[str, torch.Size]) -> TensorDictBase:
    """``batch[indices]`` (trajectory slices ``[slice, step]``) whose recurrent states of ``shapes`` are the slices'
    first ones repeated as views: indexing copies them once per slice, not once per step."""
    if not shapes:
        return batch[indices]
    chosen = batch.exclude(*shapes)[indices]
    for key in shapes:
        first = batch.get(key)[:, 0][indices]
        chosen.set(key, first.unsqueeze(1).expand(-1, batch.shape[1], *first.shape[1:]))
    return chosen
