"""Deployable copies of a trained actor: TorchScript (``policy.pt``) and ONNX (``policy.onnx``).

Both compute the deterministic action (the Gaussian mean) from the actor's observation groups concatenated in
the order of ``obs_groups["actor"]``, normalised inside with the trained running statistics. A recurrent
policy's hidden state is explicit in ONNX (inputs ``obs, h_in[, c_in]``, outputs ``actions, h_out[, c_out]``);
the TorchScript module keeps it as a buffer, carried across calls, and zeroes it with ``reset()``.
"""

from __future__ import annotations

import os

import torch
from torch import nn

from .models import GaussianActor


class _MlpPolicy(nn.Module):
    def __init__(self, normalizer: nn.Module, mlp: nn.Module):
        super().__init__()
        self.normalizer = normalizer
        self.mlp = mlp

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.mlp(self.normalizer(obs))

    @torch.jit.export
    def reset(self) -> None:
        pass


class _LstmStep(nn.Module):
    """One step of the LSTM policy with explicit state: (obs, h, c) -> (actions, h, c). Shapes [B, ...] and
    [num_layers, B, hidden]."""

    def __init__(self, normalizer: nn.Module, rnn: nn.LSTM, mlp: nn.Module):
        super().__init__()
        self.normalizer = normalizer
        self.rnn = rnn
        self.mlp = mlp

    def forward(self, obs: torch.Tensor, h: torch.Tensor, c: torch.Tensor):
        features, (h, c) = self.rnn(self.normalizer(obs).unsqueeze(1), (h, c))
        return self.mlp(features.squeeze(1)), h, c


class _GruStep(nn.Module):
    def __init__(self, normalizer: nn.Module, rnn: nn.GRU, mlp: nn.Module):
        super().__init__()
        self.normalizer = normalizer
        self.rnn = rnn
        self.mlp = mlp

    def forward(self, obs: torch.Tensor, h: torch.Tensor):
        features, h = self.rnn(self.normalizer(obs).unsqueeze(1), h)
        return self.mlp(features.squeeze(1)), h


class _StatefulLstmPolicy(nn.Module):
    def __init__(self, step: _LstmStep, num_envs: int):
        super().__init__()
        self.step = step
        shape = (step.rnn.num_layers, num_envs, step.rnn.hidden_size)
        self.register_buffer("h", torch.zeros(shape))
        self.register_buffer("c", torch.zeros(shape))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        actions, h, c = self.step(obs, self.h, self.c)
        self.h.copy_(h)
        self.c.copy_(c)
        return actions

    @torch.jit.export
    def reset(self) -> None:
        self.h.zero_()
        self.c.zero_()


class _StatefulGruPolicy(nn.Module):
    def __init__(self, step: _GruStep, num_envs: int):
        super().__init__()
        self.step = step
        self.register_buffer("h", torch.zeros(step.rnn.num_layers, num_envs, step.rnn.hidden_size))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        actions, h = self.step(obs, self.h)
        self.h.copy_(h)
        return actions

    @torch.jit.export
    def reset(self) -> None:
        self.h.zero_()


def export_policy(actor: GaussianActor, obs_dim: int, folder: str, num_envs: int = 1) -> tuple[str, str]:
    """Writes ``folder/policy.pt`` (TorchScript, state for ``num_envs`` environments) and ``folder/policy.onnx``
    from the actor's deterministic path (:attr:`~isaaclab_torchrl.models.GaussianActor.parts`).

    Returns:
        The paths of the two files.
    """
    os.makedirs(folder, exist_ok=True)
    normalizer, rnn = actor.parts.normalizer, actor.parts.rnn
    # torchrl's MLP is an nn.Sequential whose variadic forward TorchScript rejects; its layers are used as they are
    mlp = nn.Sequential(*actor.parts.mean)
    device = next(mlp.parameters()).device
    obs = torch.zeros(num_envs, obs_dim, device=device)
    if rnn is None:
        step = _MlpPolicy(normalizer, mlp)
        stateful = step
        inputs, input_names, output_names = (obs,), ["obs"], ["actions"]
    else:
        state = torch.zeros(rnn.num_layers, num_envs, rnn.hidden_size, device=device)
        if isinstance(rnn, nn.LSTM):
            step = _LstmStep(normalizer, rnn, mlp)
            stateful = _StatefulLstmPolicy(step, num_envs).to(device)
            inputs, input_names, output_names = (
                (obs, state, state),
                ["obs", "h_in", "c_in"],
                ["actions", "h_out", "c_out"],
            )
        else:
            step = _GruStep(normalizer, rnn, mlp)
            stateful = _StatefulGruPolicy(step, num_envs).to(device)
            inputs, input_names, output_names = (obs, state), ["obs", "h_in"], ["actions", "h_out"]
    torchscript_path = os.path.join(folder, "policy.pt")
    onnx_path = os.path.join(folder, "policy.onnx")
    with torch.no_grad():
        torch.jit.script(stateful).save(torchscript_path)
        torch.onnx.export(
            step, inputs, onnx_path, input_names=input_names, output_names=output_names, dynamo=False, opset_version=17
        )
    return torchscript_path, onnx_path
