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
* at an episode start the state entering the step is the one stored with the batch (zero after a reset), as in
  torchrl's ``scan`` and ``pad`` backends; no gradient flows across it.
"""

from __future__ import annotations

import inspect

import torch
from torchrl.modules import GRUModule, LSTMModule


class _LSTMLayer(torch.autograd.Function):
    """One LSTM layer over ``T`` steps: ``x [T, B, I]``, states ``[B, H]``, stored states and starts ``[T, B, ...]``.

    Returns the hidden and the cell state of every step, ``[T, B, H]`` each.
    """

    @staticmethod
    def forward(ctx, x, h, c, stored_h, stored_c, is_init, w_ih, w_hh, bias):
        steps, batch = x.shape[:2]
        gates_x = torch.addmm(bias, x.flatten(0, 1), w_ih.t()).view(steps, batch, -1)
        hs, cs, previous_hs, previous_cs, gates = [], [], [], [], []
        for t in range(steps):
            h = torch.where(is_init[t], stored_h[t], h)
            c = torch.where(is_init[t], stored_c[t], c)
            previous_hs.append(h)
            previous_cs.append(c)
            i, f, g, o = torch.addmm(gates_x[t], h, w_hh.t()).chunk(4, -1)
            i, f, g, o = i.sigmoid(), f.sigmoid(), g.tanh(), o.sigmoid()
            c = f * c + i * g
            h = o * c.tanh()
            hs.append(h)
            cs.append(c)
            gates.append(torch.cat((i, f, g, o), -1))
        hs, cs = torch.stack(hs), torch.stack(cs)
        previous_hs, previous_cs, gates = torch.stack(previous_hs), torch.stack(previous_cs), torch.stack(gates)
        ctx.save_for_backward(x, previous_hs, previous_cs, cs, gates, is_init, w_ih, w_hh)
        return hs, cs

    @staticmethod
    def backward(ctx, grad_hs, grad_cs):
        x, previous_hs, previous_cs, cs, gates, is_init, w_ih, w_hh = ctx.saved_tensors
        steps = x.shape[0]
        grad_h = torch.zeros_like(previous_hs[0])
        grad_c = torch.zeros_like(previous_cs[0])
        grad_gates, grad_stored_h, grad_stored_c = [None] * steps, [None] * steps, [None] * steps
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
            grad_h = grad_gates[t] @ w_hh
            grad_c = grad_c * f
            # a step that starts an episode reads the stored state, not the previous step's
            grad_stored_h[t] = torch.where(is_init[t], grad_h, 0.0)
            grad_stored_c[t] = torch.where(is_init[t], grad_c, 0.0)
            grad_h = torch.where(is_init[t], 0.0, grad_h)
            grad_c = torch.where(is_init[t], 0.0, grad_c)
        grad_gates = torch.stack(grad_gates).flatten(0, 1)
        grad_x = (grad_gates @ w_ih).view_as(x)
        grad_w_ih = grad_gates.t() @ x.flatten(0, 1)
        grad_w_hh = grad_gates.t() @ previous_hs.flatten(0, 1)
        grad_bias = grad_gates.sum(0)
        grad_stored = (torch.stack(grad_stored_h), torch.stack(grad_stored_c))
        return grad_x, grad_h, grad_c, *grad_stored, None, grad_w_ih, grad_w_hh, grad_bias


class _GRULayer(torch.autograd.Function):
    """One GRU layer over ``T`` steps (torch's gate order: reset, update, new); returns the hidden states."""

    @staticmethod
    def forward(ctx, x, h, stored_h, is_init, w_ih, w_hh, b_ih, b_hh):
        steps, batch = x.shape[:2]
        gates_x = torch.addmm(b_ih, x.flatten(0, 1), w_ih.t()).view(steps, batch, -1)
        hs, previous_hs, saved = [], [], []
        for t in range(steps):
            h = torch.where(is_init[t], stored_h[t], h)
            previous_hs.append(h)
            x_r, x_z, x_n = gates_x[t].chunk(3, -1)
            h_r, h_z, h_n = torch.addmm(b_hh, h, w_hh.t()).chunk(3, -1)
            r = (x_r + h_r).sigmoid()
            z = (x_z + h_z).sigmoid()
            n = (x_n + r * h_n).tanh()
            h = n + z * (h - n)
            hs.append(h)
            saved.append(torch.cat((r, z, n, h_n), -1))
        hs = torch.stack(hs)
        ctx.save_for_backward(x, torch.stack(previous_hs), torch.stack(saved), is_init, w_ih, w_hh)
        return hs

    @staticmethod
    def backward(ctx, grad_hs):
        x, previous_hs, saved, is_init, w_ih, w_hh = ctx.saved_tensors
        steps = x.shape[0]
        grad_h = torch.zeros_like(previous_hs[0])
        grad_gates_x, grad_gates_h, grad_stored = [None] * steps, [None] * steps, [None] * steps
        for t in reversed(range(steps)):
            r, z, n, h_n = saved[t].chunk(4, -1)
            grad_h = grad_hs[t] + grad_h
            grad_n = grad_h * (1 - z) * (1 - n * n)
            grad_z = grad_h * (previous_hs[t] - n) * z * (1 - z)
            grad_r = grad_n * h_n * r * (1 - r)
            grad_gates_x[t] = torch.cat((grad_r, grad_z, grad_n), -1)
            grad_gates_h[t] = torch.cat((grad_r, grad_z, grad_n * r), -1)
            grad_h = grad_h * z + grad_gates_h[t] @ w_hh
            grad_stored[t] = torch.where(is_init[t], grad_h, 0.0)
            grad_h = torch.where(is_init[t], 0.0, grad_h)
        grad_gates_x = torch.stack(grad_gates_x).flatten(0, 1)
        grad_gates_h = torch.stack(grad_gates_h).flatten(0, 1)
        grad_x = (grad_gates_x @ w_ih).view_as(x)
        grad_w_ih = grad_gates_x.t() @ x.flatten(0, 1)
        grad_w_hh = grad_gates_h.t() @ previous_hs.flatten(0, 1)
        return (
            grad_x,
            grad_h,
            torch.stack(grad_stored),
            None,
            grad_w_ih,
            grad_w_hh,
            grad_gates_x.sum(0),
            grad_gates_h.sum(0),
        )


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


def _end_mask(is_init: torch.Tensor) -> torch.Tensor:
    """``[B, T]``: where a trajectory ends inside the slice (before an episode start, and at the slice's end)."""
    return torch.cat((is_init[:, 1:], torch.ones_like(is_init[:, :1])), 1)


def _mask_to_ends(states: torch.Tensor, is_init: torch.Tensor) -> torch.Tensor:
    """Per-step states ``[T, B, L, H]`` as torchrl's modules write them: ``[B, T, L, H]``, zero but at the ends."""
    return torch.where(_end_mask(is_init)[..., None, None], states.transpose(0, 1), 0.0)


class FusedLSTMModule(LSTMModule):
    """torchrl's :class:`~torchrl.modules.LSTMModule` whose recurrent mode runs :class:`_LSTMLayer` (see the module's
    docstring). Built with torchrl's ``pad`` backend, then routed through its ``scan`` path, which this class
    replaces: building it as ``scan`` would run torchrl's check of the scan operator, which is not used."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, recurrent_backend="pad", **kwargs)
        _check_supported(self.lstm)
        self.recurrent_backend = "scan"

    def _lstm_scan_with_resets(self, input, hidden0_in, hidden1_in, initial_hidden, is_init):
        # torchrl's layout: input [B, T, I], stored states [B, T, L, H], initial states [L, B, H], starts [B, T]
        steps_first = is_init.transpose(0, 1).unsqueeze(-1)
        layer_input = input.transpose(0, 1)
        hs, cs = [], []
        for layer in range(self.lstm.num_layers):
            w_ih, w_hh, b_ih, b_hh = _layer_weights(self.lstm, layer, 4)
            layer_input, c = _LSTMLayer.apply(
                layer_input,
                initial_hidden[0][layer],
                initial_hidden[1][layer],
                hidden0_in[:, :, layer].transpose(0, 1),
                hidden1_in[:, :, layer].transpose(0, 1),
                steps_first,
                w_ih,
                w_hh,
                b_ih + b_hh,
            )
            hs.append(layer_input)
            cs.append(c)
        hidden0 = _mask_to_ends(torch.stack(hs, 2), is_init)
        hidden1 = _mask_to_ends(torch.stack(cs, 2), is_init)
        return layer_input.transpose(0, 1), hidden0, hidden1


class FusedGRUModule(GRUModule):
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
    forward = inspect.unwrap(GRUModule.forward)

    def _gru_scan_with_resets(self, input, hidden_in, initial_hidden, is_init):
        steps_first = is_init.transpose(0, 1).unsqueeze(-1)
        layer_input = input.transpose(0, 1)
        hs = []
        for layer in range(self.gru.num_layers):
            layer_input = _GRULayer.apply(
                layer_input,
                initial_hidden[layer],
                hidden_in[:, :, layer].transpose(0, 1),
                steps_first,
                *_layer_weights(self.gru, layer, 3),
            )
            hs.append(layer_input)
        return layer_input.transpose(0, 1), _mask_to_ends(torch.stack(hs, 2), is_init)


class PaddedLSTMModule(LSTMModule):
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

    def _lstm(self, input, batch, steps, device, dtype, hidden0_in=None, hidden1_in=None, splits=None, **kwargs):
        return super()._lstm(input, batch, steps, device, dtype, hidden0_in, hidden1_in, None, **kwargs)


class PaddedGRUModule(GRUModule):
    """torchrl's :class:`~torchrl.modules.GRUModule` with its ``pad`` backend, padded trajectories not packed (see
    :class:`PaddedLSTMModule`), and its ``forward`` without decorators (see :class:`FusedGRUModule`)."""

    forward = inspect.unwrap(GRUModule.forward)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, recurrent_backend="pad", **kwargs)

    def _gru(self, input, batch, steps, device, dtype, hidden_in=None, splits=None, **kwargs):
        return super()._gru(input, batch, steps, device, dtype, hidden_in, None, **kwargs)
