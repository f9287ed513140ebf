"""Training: the runner (the loop) over a learner (PPO, distillation), the collector workers and the logger, one
module each."""

from .checkpoint import find_checkpoint, load_checkpoint, resolve_checkpoint, save_checkpoint
from .distillation import Distillation
from .on_policy_runner import TorchRLRunner
from .ppo import PPO

__all__ = [
    "PPO",
    "Distillation",
    "TorchRLRunner",
    "find_checkpoint",
    "load_checkpoint",
    "resolve_checkpoint",
    "save_checkpoint",
]
