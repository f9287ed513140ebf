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
from .recurrent import FusedLSTMModule, _layer_weights, _LSTMLayer, lstm_input_gates


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
        for layer in range(self.lstms[0].lstm.num_layers):
            gates_x, w_hhs = [], []
            for lstm, layer_input in zip(self.lstms, inputs, strict=True):
                w_ih, w_hh, b_ih, b_hh = _layer_weights(lstm.lstm, layer, 4)
                gates_x.append(lstm_input_gates(layer_input, w_ih, b_ih, b_hh))
                w_hhs.append(w_hh)
            h0 = torch.stack([first[0][layer] for first in firsts])
            c0 = torch.stack([first[1][layer] for first in firsts])
            hs, _ = _LSTMLayer.apply(torch.stack(gates_x, 1), h0, c0, steps_first, torch.stack(w_hhs))
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
