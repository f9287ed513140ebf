"""Data-parallel training on ``torch.distributed`` (launched by ``torchrun``): every rank collects with its own
workers and simulators and holds a learner replica; gradients, KL estimates and observation statistics are
averaged across ranks, so the replicas stay identical."""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn


@dataclass(frozen=True)
class DistributedContext:
    """This process's place in the group: ``rank`` of ``world_size``, ``local_rank`` on its node."""

    rank: int
    world_size: int
    local_rank: int

    @property
    def is_main(self) -> bool:
        """Rank 0 writes the logs and checkpoints."""
        return self.rank == 0


def init_distributed(use_cuda: bool, timeout_s: float) -> DistributedContext:
    """Joins the process group ``torchrun`` describes in the environment (NCCL on GPUs, gloo on CPUs).

    Raises:
        RuntimeError: not started by ``torchrun`` (no ``RANK``/``WORLD_SIZE``/``LOCAL_RANK`` variables).
    """
    missing = [name for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK") if name not in os.environ]
    if missing:
        raise RuntimeError(
            f"--distributed needs torchrun (missing {', '.join(missing)}): "
            "torchrun --nproc_per_node G scripts/train.py --distributed ..."
        )
    context = DistributedContext(
        rank=int(os.environ["RANK"]), world_size=int(os.environ["WORLD_SIZE"]), local_rank=int(os.environ["LOCAL_RANK"])
    )
    if use_cuda:
        torch.cuda.set_device(context.local_rank)
    dist.init_process_group("nccl" if use_cuda else "gloo", timeout=timedelta(seconds=timeout_s))
    return context


def broadcast_state(module: nn.Module) -> None:
    """Gives every rank rank 0's parameters and buffers (in place)."""
    for tensor in module.state_dict().values():
        dist.broadcast(tensor, src=0)


def average_gradients(parameters: list[nn.Parameter]) -> None:
    """Replaces each gradient by its mean over the ranks, in one all-reduce."""
    grads = [p.grad for p in parameters if p.grad is not None]
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat)
    flat /= dist.get_world_size()
    offset = 0
    for grad in grads:
        grad.copy_(flat[offset : offset + grad.numel()].view_as(grad))
        offset += grad.numel()


def average(tensor: torch.Tensor) -> torch.Tensor:
    """The mean of ``tensor`` over the ranks (a new tensor)."""
    tensor = tensor.clone()
    dist.all_reduce(tensor)
    return tensor / dist.get_world_size()


def global_moments(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Count, mean and (population) variance of the samples ``x`` (``[..., size]``) of all ranks together."""
    x = x.reshape(-1, x.shape[-1])
    sums = torch.cat([torch.tensor([x.shape[0]], dtype=x.dtype, device=x.device), x.sum(0), x.square().sum(0)])
    dist.all_reduce(sums)
    count = sums[0]
    mean = sums[1 : 1 + x.shape[-1]] / count
    var = (sums[1 + x.shape[-1] :] / count - mean.square()).clamp_min(0.0)
    return count, mean, var


def parameter_checksum(module: nn.Module) -> float:
    """A number that differs between replicas whose parameters or buffers differ (printed at the end of a run)."""
    return float(sum(t.double().sum() + t.double().abs().sum() for t in module.state_dict().values() if t.numel()))
