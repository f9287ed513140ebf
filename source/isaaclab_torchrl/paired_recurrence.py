"""The actor's and the critic's LSTM layers over the same trajectory slices in one pass: their recurrences batched.

In the update both networks run their LSTM over the same minibatch slices, the same steps and episode starts, with
the same hidden size: two chains of 24 small products and cell kernels per layer and direction. Batched, each step
is one batched product (``baddbmm``) and one cell kernel for both, half the kernels and half the graph that
``torch.compile`` traces and compiles. The input projections and the layers' outputs stay each network's own.
"""

from __future__ import annotations

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictSequential
from torch import nn

from .models import GaussianActor
from .recurrent import FusedLSTMModule, _layer_weights, _lstm_cell


class _LSTMRecurrence(torch.autograd.Function):
    """The recurrence of ``S`` LSTM layers of one hidden size over ``T`` steps with the same episode starts:
    ``gates_x [T, S, B, 4H]`` (each layer's input projection with both biases), initial states ``[S, B, H]``,
    episode starts ``[T, 1, B, 1]``, ``w_hh [S, 4H, H]``. Returns the hidden and cell state of every step,
    ``[T, S, B, H]`` each."""

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
            grad_h = torch.where(is_init[t], 0.0, grad_h)
            grad_c = torch.where(is_init[t], 0.0, grad_c)
        grad_gates = torch.stack(grad_gates)
        # each layer's [4H, H]: its steps' and slices' gradients times the states they multiplied
        grad_w_hh = torch.bmm(
            grad_gates.transpose(0, 1).flatten(1, 2).transpose(1, 2), previous_hs.transpose(0, 1).flatten(1, 2)
        )
        return grad_gates, grad_h, grad_c, None, grad_w_hh


class PairedRecurrence(nn.Module):
    """The input layers and the LSTM of each network, run over a minibatch's slices together: writes each LSTM's
    ``<name>_features`` for the networks' heads (:func:`pair`).

    Args:
        prefixes: each network's layers before its LSTM (concatenation, normalisation).
        lstms: each network's :class:`~isaaclab_torchrl.recurrent.FusedLSTMModule`, of one hidden size and depth.
    """

    def __init__(self, prefixes: list[TensorDictSequential], lstms: list[FusedLSTMModule]):
        super().__init__()
        self.prefixes = nn.ModuleList(prefixes)
        self.lstms = nn.ModuleList(lstms)
        keys = {key for module in (*prefixes, *lstms) for key in module.in_keys}
        keys -= {key for prefix in prefixes for key in prefix.out_keys}
        self.in_keys = sorted(keys | {"is_init"}, key=str)
        self.out_keys = [lstm.out_keys[0] for lstm in lstms]

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        for prefix in self.prefixes:
            prefix(tensordict)
        steps_first = tensordict.get("is_init").squeeze(-1).transpose(0, 1)[:, None, :, None]  # [T, 1, B, 1]
        inputs = [tensordict.get(lstm.in_keys[0]).transpose(0, 1) for lstm in self.lstms]  # [T, B, I] each
        # the state each slice starts from, [L, B, H] per network (zero at an episode start: the recurrence's where)
        firsts = [[tensordict.get(key)[:, 0].transpose(0, 1) for key in lstm.in_keys[1:3]] for lstm in self.lstms]
        steps, batch = inputs[0].shape[:2]
        for layer in range(self.lstms[0].lstm.num_layers):
            gates_x, w_hhs = [], []
            for lstm, layer_input in zip(self.lstms, inputs, strict=True):
                w_ih, w_hh, b_ih, b_hh = _layer_weights(lstm.lstm, layer, 4)
                # the biases apart, not as their sum: compiled, the sum's backward gave both the same gradient tensor,
                # which the in-place gradient clipping then scaled twice
                gates_x.append((torch.addmm(b_ih, layer_input.flatten(0, 1), w_ih.t()) + b_hh).view(steps, batch, -1))
                w_hhs.append(w_hh)
            h0 = torch.stack([first[0][layer] for first in firsts])
            c0 = torch.stack([first[1][layer] for first in firsts])
            hs, _ = _LSTMRecurrence.apply(torch.stack(gates_x, 1), h0, c0, steps_first, torch.stack(w_hhs))
            inputs = list(hs.unbind(1))
        for lstm, features in zip(self.lstms, inputs, strict=True):
            tensordict.set(lstm.out_keys[0], features.transpose(0, 1))
        return tensordict


def _split(sequence: TensorDictSequential) -> tuple[TensorDictSequential, FusedLSTMModule, TensorDictSequential]:
    """A network's layers before its LSTM, the LSTM and the layers after it (the same modules)."""
    modules = list(sequence.module)
    index = next(i for i, module in enumerate(modules) if isinstance(module, FusedLSTMModule))
    return TensorDictSequential(*modules[:index]), modules[index], TensorDictSequential(*modules[index + 1 :])


def pair(
    actor: GaussianActor, critic: TensorDictSequential
) -> tuple[PairedRecurrence, GaussianActor, TensorDictSequential] | None:
    """The paired recurrence of a fused-LSTM actor and critic of one hidden size and depth, and their heads (the
    layers after the LSTM; the same modules, so the same weights); ``None`` when they are not such a pair."""
    fused = [module for module in (*actor.deterministic.module, *critic.module) if isinstance(module, FusedLSTMModule)]
    if len(fused) != 2 or len({(m.lstm.hidden_size, m.lstm.num_layers) for m in fused}) != 1:
        return None
    actor_prefix, actor_lstm, actor_head = _split(actor.deterministic)
    critic_prefix, critic_lstm, critic_head = _split(critic)
    head = GaussianActor(actor_head, actor.parts)
    return PairedRecurrence([actor_prefix, critic_prefix], [actor_lstm, critic_lstm]), head, critic_head
