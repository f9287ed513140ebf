"""A task author's own network class, for ``agent.policy.actor_class_name`` / ``critic_class_name``:
``agent.policy.actor_class_name=own_model:GatedMLP`` with this folder on ``PYTHONPATH``."""

from __future__ import annotations

import torch
from torch import nn


class GatedMLP(nn.Module):
    """A gated residual block between two linear layers, of the width ``cfg.actor_hidden_dims[0]``."""

    def __init__(self, in_features: int, out_features: int, cfg):
        super().__init__()
        width = cfg.actor_hidden_dims[0]
        self.inp = nn.Linear(in_features, width)
        self.gate = nn.Linear(width, width)
        self.out = nn.Linear(width, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = torch.tanh(self.inp(x))
        hidden = hidden + torch.sigmoid(self.gate(hidden)) * hidden
        return self.out(hidden)
