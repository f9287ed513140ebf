"""The ``fused`` recurrent backend's layers (:mod:`isaaclab_torchrl.recurrent`): one LSTM or GRU layer over the ``T``
steps of trajectory slices, forward and backward, with a backward pass written out instead of traced.

* the input projection of every step is one matrix product before the time loop, and the weight gradients are
  one matrix product each over all steps after it; only the hidden state's own product stays in the loop;
* at an episode start the state entering the step is zero, as in the step-by-step path; no gradient flows across it;
* without gradients (GAE's value pass and the proximal pass over the whole batch) a plain loop keeps each step's
  states only, not what the backward pass reads: on a GPU the learner's peak memory is that pass's
  (``docs/benchmarks.md``).

The passes with gradients are torch operators (``isaaclab_torchrl::lstm_layer``, ``..._backward``, and the GRU's),
so that ``torch.compile`` keeps each as one node of the update's graph instead of unrolling its time loop: the
unrolled loops of the actor and the critic, forward and backward, were most of the update's compilation
(``docs/benchmarks.md``). When the update is being compiled (``torch.compiler.is_compiling()``) the operators run
each step as one small compiled function, compiled once and called at every step, so that a step still runs as a
few fused kernels; eagerly they run in plain PyTorch. Under autocast (``use_mixed_precision``) they compute in
bfloat16.
"""

from __future__ import annotations

import functools

import torch
from torch import Tensor


def _lstm_cell(gates: Tensor, c: Tensor):
    """One LSTM step from its gates before activation ``[B, 4H]`` and the cell state entering it: the activated gates
    (input, forget, cell, output), the new cell state and the new hidden state."""
    i, f, g, o = gates.chunk(4, -1)
    i, f, g, o = i.sigmoid(), f.sigmoid(), g.tanh(), o.sigmoid()
    c = f * c + i * g
    return (i, f, g, o), c, o * c.tanh()


def _gru_cell(gates_x: Tensor, gates_h: Tensor, h: Tensor):
    """One GRU step from the input's and the hidden state's products ``[B, 3H]`` (biases included) and the hidden
    state entering it: the gates (reset, update, new), the hidden product's new-gate part, and the new hidden state."""
    x_r, x_z, x_n = gates_x.chunk(3, -1)
    h_r, h_z, h_n = gates_h.chunk(3, -1)
    r = (x_r + h_r).sigmoid()
    z = (x_z + h_z).sigmoid()
    n = (x_n + r * h_n).tanh()
    return (r, z, n, h_n), n + z * (h - n)


def _lstm_step(gates_x, h, c, is_init_next, w_hh):
    """One step of the LSTM's forward pass from the states entering it: its gates before activation, the states it
    leaves, and those states as the next step takes them (zero where the next step starts an episode)."""
    gates = torch.addmm(gates_x, h, w_hh.t())
    _, c, h = _lstm_cell(gates, c)
    return gates, c, h, torch.where(is_init_next, 0.0, h), torch.where(is_init_next, 0.0, c)


def _lstm_step_backward(grad_h_out, grad_c_out, grad_h, grad_c, is_init_next, gates, c, previous_c, w_hh):
    """One step of the LSTM's backward pass, from the gradients of its outputs and of the states the next step took
    (none where it started an episode): the gradient of its gates before activation, and what it sends back to the
    states entering it."""
    (i, f, g, o), _, _ = _lstm_cell(gates, previous_c)
    tanh_c = c.tanh()
    grad_h = grad_h_out + torch.where(is_init_next, 0.0, grad_h)
    grad_c = grad_c_out + torch.where(is_init_next, 0.0, grad_c) + grad_h * o * (1 - tanh_c * tanh_c)
    grad_gates = torch.cat(
        (
            grad_c * g * i * (1 - i),
            grad_c * previous_c * f * (1 - f),
            grad_c * i * (1 - g * g),
            grad_h * tanh_c * o * (1 - o),
        ),
        -1,
    )
    return grad_gates, grad_gates @ w_hh, grad_c * f


def _gru_step(gates_x, h, is_init_next, w_hh, b_hh):
    """One step of the GRU's forward pass from the state entering it: the hidden state's product, the state it
    leaves, and that state as the next step takes it."""
    gates_h = torch.addmm(b_hh, h, w_hh.t())
    _, h = _gru_cell(gates_x, gates_h, h)
    return gates_h, h, torch.where(is_init_next, 0.0, h)


def _gru_step_backward(grad_h_out, grad_h, is_init_next, gates_x, gates_h, previous_h, w_hh):
    """One step of the GRU's backward pass (see :func:`_lstm_step_backward`): the gradients of the input's and the
    hidden state's products, and what it sends back to the state entering it."""
    (r, z, n, h_n), _ = _gru_cell(gates_x, gates_h, previous_h)
    grad_h = grad_h_out + torch.where(is_init_next, 0.0, grad_h)
    grad_n = grad_h * (1 - z) * (1 - n * n)
    grad_z = grad_h * (previous_h - n) * z * (1 - z)
    grad_r = grad_n * h_n * r * (1 - r)
    grad_gates_h = torch.cat((grad_r, grad_z, grad_n * r), -1)
    return torch.cat((grad_r, grad_z, grad_n), -1), grad_gates_h, torch.addmm(grad_h * z, grad_gates_h, w_hh)


@functools.cache
def _compiled(step):
    return torch.compile(step, dynamic=False, fullgraph=True)


def _step(step, compiled: bool):
    return _compiled(step) if compiled else step


def _next_starts(is_init: Tensor) -> list[Tensor]:
    """Per step, whether the step after it starts an episode (the last step's: unread, its own)."""
    return [is_init[min(t + 1, len(is_init) - 1)] for t in range(len(is_init))]


@torch.library.custom_op("isaaclab_torchrl::lstm_layer", mutates_args=())
def lstm_layer(
    x: Tensor, h: Tensor, c: Tensor, is_init: Tensor, w_ih: Tensor, w_hh: Tensor, bias: Tensor, compiled: bool
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """One LSTM layer: ``x [T, B, I]``, initial states ``[B, H]``, episode starts ``[T, B, 1]``; the hidden and the
    cell state of every step ``[T, B, H]`` each, then what the backward pass reads: the states entering each step and
    the gates before activation ``[T, B, 4H]``. ``compiled``: each step runs compiled.

    Each step masks the states it leaves for the next one, so that a compiled step is one matrix product and one
    fused kernel."""
    step = _step(_lstm_step, compiled)
    steps, batch = x.shape[:2]
    gates_x = torch.addmm(bias, x.flatten(0, 1), w_ih.t()).view(steps, batch, -1)
    h, c = torch.where(is_init[0], 0.0, h), torch.where(is_init[0], 0.0, c)
    outputs = [[], [], [], [], []]  # hs, cs, previous_hs, previous_cs, gates
    for t, is_init_next in enumerate(_next_starts(is_init)):
        gates, c_out, h_out, h_next, c_next = step(gates_x[t], h, c, is_init_next, w_hh)
        for values, value in zip(outputs, (h_out, c_out, h, c, gates), strict=True):
            values.append(value)
        h, c = h_next, c_next
    return tuple(torch.stack(values) for values in outputs)


@lstm_layer.register_fake
def _(x, h, c, is_init, w_ih, w_hh, bias, compiled):
    states = [x.new_empty(x.shape[0], *h.shape) for _ in range(4)]
    return (*states, x.new_empty(x.shape[0], h.shape[0], 4 * h.shape[1]))


@torch.library.custom_op("isaaclab_torchrl::lstm_layer_backward", mutates_args=())
def lstm_layer_backward(
    grad_hs: Tensor,
    grad_cs: Tensor,
    x: Tensor,
    previous_hs: Tensor,
    previous_cs: Tensor,
    cs: Tensor,
    gates: Tensor,
    is_init: Tensor,
    w_ih: Tensor,
    w_hh: Tensor,
    compiled: bool,
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    """:func:`lstm_layer`'s backward pass: the gradients of ``x``, of the initial states (none where the first step
    starts an episode), of the weights and of the bias."""
    step = _step(_lstm_step_backward, compiled)
    grad_h, grad_c = torch.zeros_like(previous_hs[0]), torch.zeros_like(previous_cs[0])
    grad_gates = [None] * x.shape[0]
    for t, is_init_next in reversed(list(enumerate(_next_starts(is_init)))):
        grad_gates[t], grad_h, grad_c = step(
            grad_hs[t], grad_cs[t], grad_h, grad_c, is_init_next, gates[t], cs[t], previous_cs[t], w_hh
        )
    grad_gates = torch.stack(grad_gates).flatten(0, 1)
    grad_x = (grad_gates @ w_ih).view_as(x)
    return (
        grad_x,
        torch.where(is_init[0], 0.0, grad_h),
        torch.where(is_init[0], 0.0, grad_c),
        grad_gates.t() @ x.flatten(0, 1),
        grad_gates.t() @ previous_hs.flatten(0, 1),
        grad_gates.sum(0),
    )


@lstm_layer_backward.register_fake
def _(grad_hs, grad_cs, x, previous_hs, previous_cs, cs, gates, is_init, w_ih, w_hh, compiled):
    state = previous_hs.new_empty(previous_hs.shape[1:])
    weights = w_ih.new_empty(w_ih.shape), w_hh.new_empty(w_hh.shape), gates.new_empty(gates.shape[-1])
    return x.new_empty(x.shape), state, state.clone(), *weights


def _lstm_setup(ctx, inputs, output):
    x, _, _, is_init, w_ih, w_hh, _, compiled = inputs
    _, cs, previous_hs, previous_cs, gates = output
    ctx.save_for_backward(x, previous_hs, previous_cs, cs, gates, is_init, w_ih, w_hh)
    ctx.compiled = compiled


def _lstm_backward(ctx, grad_hs, grad_cs, *_):
    x, previous_hs, previous_cs, cs, gates, is_init, w_ih, w_hh = ctx.saved_tensors
    grad_hs = torch.zeros_like(cs) if grad_hs is None else grad_hs
    grad_cs = torch.zeros_like(cs) if grad_cs is None else grad_cs
    grad_x, grad_h, grad_c, grad_w_ih, grad_w_hh, grad_bias = lstm_layer_backward(
        grad_hs, grad_cs, x, previous_hs, previous_cs, cs, gates, is_init, w_ih, w_hh, ctx.compiled
    )
    return grad_x, grad_h, grad_c, None, grad_w_ih, grad_w_hh, grad_bias, None


lstm_layer.register_autograd(_lstm_backward, setup_context=_lstm_setup)


@torch.library.custom_op("isaaclab_torchrl::gru_layer", mutates_args=())
def gru_layer(
    x: Tensor, h: Tensor, is_init: Tensor, w_ih: Tensor, w_hh: Tensor, b_ih: Tensor, b_hh: Tensor, compiled: bool
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """One GRU layer (torch's gate order: reset, update, new): the hidden state of every step ``[T, B, H]``, then
    what the backward pass reads: the states entering each step, the input's and the hidden state's products
    ``[T, B, 3H]`` each (see :func:`lstm_layer`)."""
    step = _step(_gru_step, compiled)
    steps, batch = x.shape[:2]
    gates_x = torch.addmm(b_ih, x.flatten(0, 1), w_ih.t()).view(steps, batch, -1)
    h = torch.where(is_init[0], 0.0, h)
    hs, previous_hs, gates_h = [], [], []
    for t, is_init_next in enumerate(_next_starts(is_init)):
        previous_hs.append(h)
        gates, h_out, h = step(gates_x[t], h, is_init_next, w_hh, b_hh)
        hs.append(h_out)
        gates_h.append(gates)
    return torch.stack(hs), torch.stack(previous_hs), gates_x, torch.stack(gates_h)


@gru_layer.register_fake
def _(x, h, is_init, w_ih, w_hh, b_ih, b_hh, compiled):
    states = [x.new_empty(x.shape[0], *h.shape) for _ in range(2)]
    return (*states, *(x.new_empty(x.shape[0], h.shape[0], 3 * h.shape[1]) for _ in range(2)))


@torch.library.custom_op("isaaclab_torchrl::gru_layer_backward", mutates_args=())
def gru_layer_backward(
    grad_hs: Tensor,
    x: Tensor,
    previous_hs: Tensor,
    gates_x: Tensor,
    gates_h: Tensor,
    is_init: Tensor,
    w_ih: Tensor,
    w_hh: Tensor,
    compiled: bool,
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    """:func:`gru_layer`'s backward pass: the gradients of ``x``, of the initial state, of the weights and of the
    biases."""
    step = _step(_gru_step_backward, compiled)
    grad_h = torch.zeros_like(previous_hs[0])
    grad_gates_x, grad_gates_h = [None] * x.shape[0], [None] * x.shape[0]
    for t, is_init_next in reversed(list(enumerate(_next_starts(is_init)))):
        grad_gates_x[t], grad_gates_h[t], grad_h = step(
            grad_hs[t], grad_h, is_init_next, gates_x[t], gates_h[t], previous_hs[t], w_hh
        )
    grad_gates_x = torch.stack(grad_gates_x).flatten(0, 1)
    grad_gates_h = torch.stack(grad_gates_h).flatten(0, 1)
    grad_x = (grad_gates_x @ w_ih).view_as(x)
    grad_w_ih = grad_gates_x.t() @ x.flatten(0, 1)
    grad_w_hh = grad_gates_h.t() @ previous_hs.flatten(0, 1)
    grad_h = torch.where(is_init[0], 0.0, grad_h)
    return grad_x, grad_h, grad_w_ih, grad_w_hh, grad_gates_x.sum(0), grad_gates_h.sum(0)


@gru_layer_backward.register_fake
def _(grad_hs, x, previous_hs, gates_x, gates_h, is_init, w_ih, w_hh, compiled):
    bias = w_ih.new_empty(w_ih.shape[0])
    state = previous_hs.new_empty(previous_hs.shape[1:])
    return x.new_empty(x.shape), state, w_ih.new_empty(w_ih.shape), w_hh.new_empty(w_hh.shape), bias, bias.clone()


def _gru_setup(ctx, inputs, output):
    x, _, is_init, w_ih, w_hh, _, _, compiled = inputs
    _, previous_hs, gates_x, gates_h = output
    ctx.save_for_backward(x, previous_hs, gates_x, gates_h, is_init, w_ih, w_hh)
    ctx.compiled = compiled


def _gru_backward(ctx, grad_hs, *_):
    x, previous_hs, gates_x, gates_h, is_init, w_ih, w_hh = ctx.saved_tensors
    grad_hs = torch.zeros_like(previous_hs) if grad_hs is None else grad_hs
    grad_x, grad_h, grad_w_ih, grad_w_hh, grad_b_ih, grad_b_hh = gru_layer_backward(
        grad_hs, x, previous_hs, gates_x, gates_h, is_init, w_ih, w_hh, ctx.compiled
    )
    return grad_x, grad_h, None, grad_w_ih, grad_w_hh, grad_b_ih, grad_b_hh, None


gru_layer.register_autograd(_gru_backward, setup_context=_gru_setup)

for _op in ("lstm_layer", "gru_layer"):
    for _device in ("cpu", "cuda"):  # under autocast (the learner's mixed precision) in bfloat16 throughout
        torch.library.register_autocast(f"isaaclab_torchrl::{_op}", _device, torch.bfloat16)


def lstm_with_grad(x, h, c, is_init, w_ih, w_hh, bias) -> tuple[Tensor, Tensor]:
    """:func:`lstm_layer`'s hidden and cell states; its steps compiled when the caller is being compiled."""
    hs, cs, *_ = lstm_layer(x, h, c, is_init, w_ih, w_hh, bias, torch.compiler.is_compiling())
    return hs, cs


def gru_with_grad(x, h, is_init, w_ih, w_hh, b_ih, b_hh) -> Tensor:
    """:func:`gru_layer`'s hidden states; its steps compiled when the caller is being compiled."""
    return gru_layer(x, h, is_init, w_ih, w_hh, b_ih, b_hh, torch.compiler.is_compiling())[0]


def lstm_without_grad(x, h, c, is_init, w_ih, w_hh, bias):
    """:func:`lstm_layer`'s forward pass without what its backward pass reads: the input projection step by step
    and the hidden and cell state of every step, written into their outputs."""
    hs = cs = None
    for t in range(x.shape[0]):
        h = torch.where(is_init[t], 0.0, h)
        c = torch.where(is_init[t], 0.0, c)
        _, c, h = _lstm_cell(torch.addmm(torch.addmm(bias, x[t], w_ih.t()), h, w_hh.t()), c)
        if hs is None:
            hs, cs = h.new_empty(x.shape[0], *h.shape), c.new_empty(x.shape[0], *c.shape)
        hs[t], cs[t] = h, c
    return hs, cs


def gru_without_grad(x, h, is_init, w_ih, w_hh, b_ih, b_hh):
    """:func:`gru_layer`'s forward pass without what its backward pass reads (see :func:`lstm_without_grad`)."""
    hs = None
    for t in range(x.shape[0]):
        h = torch.where(is_init[t], 0.0, h)
        _, h = _gru_cell(torch.addmm(b_ih, x[t], w_ih.t()), torch.addmm(b_hh, h, w_hh.t()), h)
        if hs is None:
            hs = h.new_empty(x.shape[0], *h.shape)
        hs[t] = h
    return hs
