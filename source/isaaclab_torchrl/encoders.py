"""Image encoders: the CNNs that turn image observation groups into features before the recurrent layer / MLP.

A group is an image when each environment's observation has three dimensions ``[C, H, W]`` (rsl_rl's 2D groups:
camera images, height maps). :class:`CNN` is rsl_rl's ``CNN`` (``rsl_rl.modules.cnn``), layer for layer:
torchrl's ``ConvNet`` takes fixed integer paddings, one norm class for all layers and no per-layer max pooling, so
rsl_rl's padding computed from each layer's input size, per-layer norms and max pools do not map onto it.
``encoder="spatial_softmax"`` is the Isaac Lab KukaAllegro camera tasks' ``SpatialSoftmaxCNNModel``: the CNN's
feature map reduced to the expected ``(x, y)`` position of each channel, its images scaled by
:class:`CameraImageScale`.

Images travel as the environment gives them (uint8 camera images stay uint8 in the collected batches) and become
floats inside the network (:class:`ImageScale`).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from .agents.torchrl_cfg import TorchRLCNNCfg, cnn_configs

CNN_ACTIVATION_CLASSES = {
    "elu": nn.ELU,
    "selu": nn.SELU,
    "relu": nn.ReLU,
    "crelu": nn.CELU,
    "lrelu": nn.LeakyReLU,
    "leakyrelu": nn.LeakyReLU,
    "tanh": nn.Tanh,
    "sigmoid": nn.Sigmoid,
    "softplus": nn.Softplus,
    "gelu": nn.GELU,
    "swish": nn.SiLU,
    "silu": nn.SiLU,
    "mish": nn.Mish,
    "identity": nn.Identity,
}
"""The modules behind :data:`~isaaclab_torchrl.agents.torchrl_cfg.CNN_ACTIVATIONS` (``crelu`` is ``nn.CELU`` in
rsl_rl too)."""


def _per_layer(value, index: int):
    """rsl_rl's ``get_param``: one value for every layer, or one per layer."""
    return value[index] if isinstance(value, (list, tuple)) else value


def _same_padding(size: tuple[int, int], kernel: int, stride: int, dilation: int) -> tuple[int, int]:
    def pad(n: int) -> int:
        return math.ceil((stride * math.floor(n / stride) - n - stride + dilation * (kernel - 1) + 1) / 2)

    return pad(size[0]), pad(size[1])


def _output_size(size, kernel: int, stride: int, dilation: int, padding, max_pool: bool) -> tuple[int, int]:
    out = [
        math.floor((n + 2 * p - dilation * (kernel - 1) - 1) / stride + 1) for n, p in zip(size, padding, strict=True)
    ]
    return tuple(math.ceil(n / 2) for n in out) if max_pool else tuple(out)


class CNN(nn.Sequential):
    """rsl_rl's ``CNN``: per layer a ``Conv2d`` (padding ``"none"``, or computed from the layer's input size for the
    padding modes), an optional ``BatchNorm2d``/``LayerNorm``, the activation and an optional ``MaxPool2d(3, 2, 1)``;
    then an optional global pool and a flatten. Its layers are numbered as rsl_rl's, so their weights are named
    alike."""

    def __init__(self, input_size: tuple[int, int], input_channels: int, cfg: TorchRLCNNCfg, flatten: bool = True):
        super().__init__()
        layers, channels, size = [], input_channels, tuple(input_size)
        for index, out_channels in enumerate(cfg.output_channels):
            kernel, stride = _per_layer(cfg.kernel_size, index), _per_layer(cfg.stride, index)
            dilation = _per_layer(cfg.dilation, index)
            padded = cfg.padding != "none"
            padding = _same_padding(size, kernel, stride, dilation) if padded else (0, 0)
            mode = cfg.padding if padded else "zeros"
            layers.append(nn.Conv2d(channels, out_channels, kernel, stride, padding, dilation, padding_mode=mode))
            norm = _per_layer(cfg.norm, index)
            max_pool = bool(_per_layer(cfg.max_pool, index))
            if norm == "batch":
                layers.append(nn.BatchNorm2d(out_channels))
            elif norm == "layer":
                norm_size = _output_size(size, kernel, stride, dilation, padding, False)
                layers.append(nn.LayerNorm([out_channels, *norm_size]))
            layers.append(CNN_ACTIVATION_CLASSES[cfg.activation.lower()]())
            if max_pool:
                layers.append(nn.MaxPool2d(kernel_size=3, stride=2, padding=1))
            channels, size = out_channels, _output_size(size, kernel, stride, dilation, padding, max_pool)
        if cfg.global_pool != "none":
            layers.append(nn.AdaptiveMaxPool2d((1, 1)) if cfg.global_pool == "max" else nn.AdaptiveAvgPool2d((1, 1)))
            size = (1, 1)
        if flatten:
            layers.append(nn.Flatten(start_dim=1))
        for index, layer in enumerate(layers):
            self.add_module(str(index), layer)
        self.output_channels, self.output_size = channels, size
        self.output_dim = channels * size[0] * size[1]


class SpatialSoftmax(nn.Module):
    """The expected ``(x, y)`` position (in ``[-1, 1]``) of each channel of a ``[B, C, H, W]`` feature map under a
    softmax over its pixels with a learned per-channel temperature: ``2 C`` outputs (the KukaAllegro tasks')."""

    def __init__(self, channels: int, height: int, width: int, init_temperature: float = 1.0):
        super().__init__()
        self.channels = channels
        pos_y, pos_x = torch.meshgrid(torch.linspace(-1, 1, height), torch.linspace(-1, 1, width), indexing="ij")
        self.register_buffer("positions", torch.stack([pos_x.reshape(-1), pos_y.reshape(-1)], dim=-1))
        self.log_temperature = nn.Parameter(torch.full((channels,), math.log(init_temperature)))

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        temperature = self.log_temperature.exp().clamp(min=1e-3).view(1, self.channels, 1)
        weights = torch.softmax(features.flatten(2) / temperature, dim=-1)
        return (weights @ self.positions).flatten(1)  # [B, C, 2] -> x0, y0, x1, y1, ...


class ImageScale(nn.Module):
    """An image as the CNN reads it: uint8 scaled to ``[0, 1]``; a float image (rsl_rl's case) as it is."""

    def __init__(self, uint8: bool):
        super().__init__()
        self.uint8 = uint8

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return images.float() / 255.0 if self.uint8 else images


class CameraImageScale(ImageScale):
    """The KukaAllegro tasks' ``CameraImageNormalizer``: uint8 to ``x / 255 - 0.5``; a float (depth, metres) to
    ``tanh(x / 2) - 0.5``, NaN to ``0.5``."""

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        if self.uint8:
            return images.float() / 255.0 - 0.5
        return torch.where(torch.isnan(images), 0.5, torch.tanh(images / 2.0) - 0.5)


class ImageEncoder(nn.Module):
    """One image group's encoder: its scale, the CNN and, for ``encoder="spatial_softmax"``, the keypoints;
    ``[..., C, H, W]`` images in, ``[..., output_dim]`` features out."""

    def __init__(self, shape: tuple[int, int, int], dtype: str, cfg: TorchRLCNNCfg, encoder: str, temperature: float):
        super().__init__()
        uint8 = dtype == "uint8"
        if encoder == "spatial_softmax":
            cnn = CNN(shape[1:], shape[0], cfg, flatten=False)
            keypoints = SpatialSoftmax(cnn.output_channels, *cnn.output_size, init_temperature=temperature)
            self.layers = nn.Sequential(CameraImageScale(uint8), cnn, keypoints)
            self.output_dim = 2 * cnn.output_channels
        else:
            cnn = CNN(shape[1:], shape[0], cfg)
            self.layers = nn.Sequential(ImageScale(uint8), cnn)
            self.output_dim = cnn.output_dim

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        features = self.layers(images.flatten(0, -4))  # the leading dims (env, time) as one batch dim
        return features.unflatten(0, images.shape[:-3])


class ImageFeatures(nn.Module):
    """A network's input with images: the flat input (possibly empty) followed by each image group's features, in
    the network's group order (rsl_rl's ``CNNModel.get_latent``). ``encoders`` may be shared with another network."""

    def __init__(self, encoders: nn.ModuleList, has_flat: bool):
        super().__init__()
        self.encoders = encoders
        self.has_flat = has_flat
        self.output_dim = sum(encoder.output_dim for encoder in encoders)

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        flat, images = (inputs[:1], inputs[1:]) if self.has_flat else ((), inputs)
        return torch.cat([*flat, *(encoder(image) for encoder, image in zip(self.encoders, images, strict=True))], -1)


def make_image_encoders(
    groups: list[tuple[str, tuple[int, int, int], str]], cnn_cfg, encoder: str, init_temperature: float
) -> nn.ModuleList:
    """One :class:`ImageEncoder` per image group ``(name, [C, H, W], dtype)``, from an ``*_cnn_cfg`` field
    (:func:`~isaaclab_torchrl.agents.torchrl_cfg.cnn_configs`)."""
    configs = cnn_configs(cnn_cfg, [name for name, _, _ in groups])
    encoders = [
        ImageEncoder(tuple(shape), dtype, configs[name], encoder, init_temperature) for name, shape, dtype in groups
    ]
    return nn.ModuleList(encoders)
