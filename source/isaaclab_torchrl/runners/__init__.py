"""Training runners."""

from .checkpoint import find_checkpoint, load_checkpoint, resolve_checkpoint, save_checkpoint
from .ppo_runner import TorchRLRunner

__all__ = ["TorchRLRunner", "find_checkpoint", "load_checkpoint", "resolve_checkpoint", "save_checkpoint"]
