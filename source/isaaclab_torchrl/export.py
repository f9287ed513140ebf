"""Deployable copies of a trained actor: TorchScript (``policy.pt``) and ONNX (``policy.onnx``).

Both compute the deterministic action (the Gaussian mean) from the actor's flat observation groups concatenated in
the order of ``obs_groups["actor"]`` (``obs``), normalised inside with the trained running statistics. A recurrent
policy's hidden state is explicit in ONNX (inputs ``obs, h_in[, c_in]``, outputs ``actions, h_out[, c_out]``);
the TorchScript module keeps it as a buffer, carried across calls, and zeroes it with ``reset()``.

An actor that reads image groups takes them as the environment gives them (``[B, C, H, W]``, uint8 camera images
as uint8), as rsl_rl's CNN exports do: ONNX has one input per image group, named after it, after ``obs`` (which it
lacks when the actor reads images only); TorchScript takes ``policy(obs, [image, ...])``, ``obs`` ignored (it may be
empty) when the actor reads images only.
"""

from __future__ import annotations

import os

import torch
from torch import nn

from .models import GaussianActor


class _Inputs(nn.Module):
    """The MLP's (or recurrent layer's) input: the normalised flat observations, then the images' features."""

    def __init__(self, normalizer: nn.Module, images: nn.Module | None):
        super().__init__()
        self.normalizer = normalizer
        self.encoders = nn.ModuleList() if images is None else images.encoders
        self.has_flat = images is None or images.has_flat

    def forward(self, obs: torch.Tensor, images: list[torch.Tensor]) -> torch.Tensor:
        features = [self.normalizer(obs)] if self.has_flat else []
        for index, encoder in enumerate(self.encoders):  # TorchScript zips no module list
            features.append(encoder(images[index]))
        return torch.cat(features, dim=-1)


class _MlpStep(nn.Module):
    def __init__(self, inputs: _Inputs, mlp: nn.Module):
        super().__init__()
        self.inputs = inputs
        self.mlp = mlp

    def forward(self, obs: torch.Tensor, images: list[torch.Tensor]) -> torch.Tensor:
        return self.mlp(self.inputs(obs, images))


class _LstmStep(nn.Module):
    """One step of the LSTM policy with explicit state: (obs, images, h, c) -> (actions, h, c). Shapes [B, ...] and
    [num_layers, B, hidden]."""

    def __init__(self, inputs: _Inputs, rnn: nn.LSTM, mlp: nn.Module):
        super().__init__()
        self.inputs = inputs
        self.rnn = rnn
        self.mlp = mlp

    def forward(self, obs: torch.Tensor, images: list[torch.Tensor], h: torch.Tensor, c: torch.Tensor):
        features, (h, c) = self.rnn(self.inputs(obs, images).unsqueeze(1), (h, c))
        return self.mlp(features.squeeze(1)), h, c


class _GruStep(nn.Module):
    def __init__(self, inputs: _Inputs, rnn: nn.GRU, mlp: nn.Module):
        super().__init__()
        self.inputs = inputs
        self.rnn = rnn
        self.mlp = mlp

    def forward(self, obs: torch.Tensor, images: list[torch.Tensor], h: torch.Tensor):
        features, h = self.rnn(self.inputs(obs, images).unsqueeze(1), h)
        return self.mlp(features.squeeze(1)), h


class _MlpPolicy(nn.Module):
    def __init__(self, step: _MlpStep):
        super().__init__()
        self.step = step

    def forward(self, obs: torch.Tensor, images: list[torch.Tensor] | None = None) -> torch.Tensor:
        return self.step(obs, images if images is not None else [])

    @torch.jit.export
    def reset(self) -> None:
        pass


class _StatefulLstmPolicy(nn.Module):
    def __init__(self, step: _LstmStep, num_envs: int):
        super().__init__()
        self.step = step
        shape = (step.rnn.num_layers, num_envs, step.rnn.hidden_size)
        self.register_buffer("h", torch.zeros(shape))
        self.register_buffer("c", torch.zeros(shape))

    def forward(self, obs: torch.Tensor, images: list[torch.Tensor] | None = None) -> torch.Tensor:
        actions, h, c = self.step(obs, images if images is not None else [], self.h, self.c)
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

    def forward(self, obs: torch.Tensor, images: list[torch.Tensor] | None = None) -> torch.Tensor:
        actions, h = self.step(obs, images if images is not None else [], self.h)
        self.h.copy_(h)
        return actions

    @torch.jit.export
    def reset(self) -> None:
        self.h.zero_()


class _OnnxInputs(nn.Module):
    """The step with positional inputs, as ONNX names them: ``obs`` (when the actor reads flat groups), the images,
    then the recurrent state."""

    def __init__(self, step: nn.Module, num_images: int, has_flat: bool, obs_dim: int):
        super().__init__()
        self.step = step
        self.num_images, self.has_flat, self.obs_dim = num_images, has_flat, obs_dim

    def forward(self, *inputs: torch.Tensor):
        if self.has_flat:
            obs, inputs = inputs[0], inputs[1:]
        else:
            obs = inputs[0].new_zeros(inputs[0].shape[0], self.obs_dim, dtype=torch.float32)
        return self.step(obs, list(inputs[: self.num_images]), *inputs[self.num_images :])


def export_policy(
    actor: GaussianActor, obs_dim: int, folder: str, num_envs: int = 1, images: list | tuple = ()
) -> tuple[str, str]:
    """Writes ``folder/policy.pt`` (TorchScript, state for ``num_envs`` environments) and ``folder/policy.onnx``
    from the actor's deterministic path (:attr:`~isaaclab_torchrl.models.GaussianActor.parts`).

    Args:
        images: The actor's image groups, ``(name, [C, H, W], dtype)`` each
            (:meth:`~isaaclab_torchrl.models.EnvInterface.image_groups`).

    Returns:
        The paths of the two files.
    """
    os.makedirs(folder, exist_ok=True)
    inputs = _Inputs(actor.parts.normalizer, actor.parts.images)
    rnn = actor.parts.rnn
    # torchrl's MLP is an nn.Sequential whose variadic forward TorchScript rejects; its layers are used as they are
    mean = actor.parts.mean
    mlp = nn.Sequential(*mean) if isinstance(mean, nn.Sequential) else mean  # else a class of the task author's
    device = next(mlp.parameters()).device
    obs = torch.zeros(num_envs, obs_dim, device=device)
    image_inputs = [
        torch.zeros(num_envs, *shape, dtype=getattr(torch, dtype), device=device) for _, shape, dtype in images
    ]
    names = (["obs"] if inputs.has_flat else []) + [name for name, _, _ in images]
    if rnn is None:
        step = _MlpStep(inputs, mlp)
        stateful, state, state_names = _MlpPolicy(step), [], []
    else:
        zeros = torch.zeros(rnn.num_layers, num_envs, rnn.hidden_size, device=device)
        if isinstance(rnn, nn.LSTM):
            step = _LstmStep(inputs, rnn, mlp)
            stateful, state, state_names = _StatefulLstmPolicy(step, num_envs), [zeros, zeros], ["h", "c"]
        else:
            step = _GruStep(inputs, rnn, mlp)
            stateful, state, state_names = _StatefulGruPolicy(step, num_envs), [zeros], ["h"]
    onnx_step = _OnnxInputs(step, len(images), inputs.has_flat, obs_dim)
    example = ([obs] if inputs.has_flat else []) + image_inputs + state
    torchscript_path = os.path.join(folder, "policy.pt")
    onnx_path = os.path.join(folder, "policy.onnx")
    with torch.no_grad():
        torch.jit.script(stateful.to(device)).save(torchscript_path)
        torch.onnx.export(
            onnx_step,
            tuple(example),
            onnx_path,
            input_names=names + [f"{name}_in" for name in state_names],
            output_names=["actions"] + [f"{name}_out" for name in state_names],
            dynamo=False,
            opset_version=17,
        )
    return torchscript_path, onnx_path
