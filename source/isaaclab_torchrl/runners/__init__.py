"""Training runners."""

from .checkpoint import load_checkpoint, save_checkpoint
from .ppo_runner import TorchRLRunner

__all__ = ["TorchRLRunner", "load_checkpoint", "save_checkpoint"]
