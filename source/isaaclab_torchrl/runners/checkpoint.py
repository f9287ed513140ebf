"""Checkpoint files: written atomically, read with ``weights_only=True``."""

from __future__ import annotations

import os
import re
import tempfile

import torch

from .rsl_rl_teacher import RSL_RL_ACTOR_KEY, is_rsl_rl_checkpoint

MODEL_PATTERN = r"model_\d+\.pt"
BEST_CHECKPOINT = "model_best.pt"
"""The best evaluated policy of a run (``agent.eval_interval``), a full checkpoint with its score under
:data:`EVALUATION_KEY`. Only ``--checkpoint best`` (or its path) picks it: ``latest``, run folders and file-name
patterns skip it."""
EVALUATION_KEY = "evaluation"


def save_checkpoint(state: dict, path: str) -> None:
    """Writes ``state`` to ``path`` through a temporary file in the same folder, so a crash never leaves a
    truncated checkpoint behind."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp_path = tempfile.mkstemp(prefix=".tmp_", suffix=".pt", dir=folder)
    try:
        with os.fdopen(fd, "wb") as file:
            torch.save(state, file)
        os.replace(tmp_path, path)
    except BaseException:
        os.unlink(tmp_path)
        raise


def load_checkpoint(path: str, map_location: str | torch.device = "cpu", rsl_rl_teacher: bool = False) -> dict:
    """Reads a checkpoint written by :func:`save_checkpoint`; with ``rsl_rl_teacher`` (for a distillation run's
    teacher) also one of rsl_rl's ``OnPolicyRunner``, as ``{"rsl_rl_actor": <its actor's weights>, "iteration": ...}``
    (:mod:`isaaclab_torchrl.runners.rsl_rl_teacher`).

    Raises:
        ValueError: the file is missing, truncated or not a checkpoint of this runner.
    """
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as exc:
        raise ValueError(f"Cannot read checkpoint {path}: {type(exc).__name__}: {exc}".splitlines()[0]) from exc
    if rsl_rl_teacher and is_rsl_rl_checkpoint(state):
        return {RSL_RL_ACTOR_KEY: state["actor_state_dict"], "iteration": state["iter"]}
    if not isinstance(state, dict) or not {"actor", "iteration", "config"} <= set(state):
        raise ValueError(f"{path} is not a checkpoint of the isaaclab_torchrl runner.")
    return state


def load_optimizer_state(optimizer: torch.optim.Optimizer, state: dict) -> None:
    """Loads a checkpoint's optimizer ``state`` into ``optimizer``, which keeps its own settings.

    torch's ``load_state_dict`` takes each parameter group's settings from the checkpoint too: a checkpoint saved by
    an optimizer that was not fused (this project's CPU runs before fused Adam), or that was capturable (a GPU run)
    and resumed on a CPU, would change how this one steps, or fail its first step. The settings of how to step stay
    this optimizer's, and Adam's step counts move to where its step reads them.
    """
    optimizer.load_state_dict(state)
    settings = {key: optimizer.defaults[key] for key in ("fused", "capturable", "foreach") if key in optimizer.defaults}
    for group in optimizer.param_groups:
        group.update(settings)
        for parameter in group["params"]:
            step = optimizer.state.get(parameter, {}).get("step")
            if isinstance(step, torch.Tensor) and (group.get("fused") or group.get("capturable")):
                optimizer.state[parameter]["step"] = step.to(device=parameter.device, dtype=torch.float32)


def best_score(path: str) -> float | None:
    """The evaluated mean return stored in the best checkpoint ``path``; ``None`` when there is none (or it cannot be
    read, which is said)."""
    if not os.path.exists(path):
        return None
    try:
        return float(load_checkpoint(path)[EVALUATION_KEY]["mean_reward"])
    except (ValueError, KeyError, TypeError) as exc:
        print(f"[torchrl] warning: {path} has no readable score ({exc}); the next evaluation replaces it.")
        return None


def _natural_key(name: str) -> list:
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def _matches(checkpoint: str, name: str) -> bool:
    """Whether the file-name pattern ``checkpoint`` picks ``name``; the best checkpoint only when the pattern is its
    own name (``model_.*.pt`` does not pick it)."""
    if name == BEST_CHECKPOINT and checkpoint not in (BEST_CHECKPOINT, re.escape(BEST_CHECKPOINT)):
        return False
    return re.match(checkpoint, name) is not None


def last_checkpoint_in(run_dir: str, checkpoint: str = MODEL_PATTERN) -> str:
    """The last file of ``run_dir`` whose name matches ``checkpoint``, in natural order (model_10 after model_9)."""
    found = sorted(os.listdir(run_dir))
    files = sorted((name for name in found if _matches(checkpoint, name)), key=_natural_key)
    if not files:
        raise FileNotFoundError(
            f"No checkpoint matching {checkpoint!r} in {run_dir} (found: {', '.join(found) or 'nothing'})."
        )
    return os.path.join(run_dir, files[-1])


def find_checkpoint(log_root: str, load_run: str = ".*", checkpoint: str = MODEL_PATTERN) -> str:
    """The checkpoint to play or resume: in the newest run folder under ``log_root`` whose name matches
    ``load_run`` and holds a checkpoint, the last file matching ``checkpoint``.

    Raises:
        FileNotFoundError: naming the folder searched and what was found there.
    """
    return last_checkpoint_in(_newest_run_with(log_root, load_run, checkpoint), checkpoint)


def find_best_checkpoint(log_root: str, load_run: str = ".*") -> str:
    """Isaac Lab's ``best`` selector: in the newest run folder under ``log_root`` whose name matches ``load_run`` and
    holds a checkpoint, :data:`BEST_CHECKPOINT`, else (a run without evaluation) its last ``model_<N>.pt``."""
    run_dir = _newest_run_with(log_root, load_run, rf"{MODEL_PATTERN}|{re.escape(BEST_CHECKPOINT)}", best=True)
    best = os.path.join(run_dir, BEST_CHECKPOINT)
    return best if os.path.isfile(best) else last_checkpoint_in(run_dir)


def _newest_run_with(log_root: str, load_run: str, checkpoint: str, best: bool = False) -> str:
    """The newest run folder matching ``load_run`` that has a file matching ``checkpoint`` (with ``best``, the best
    checkpoint counts too): a run that died before its first save has none."""
    if not os.path.isdir(log_root):
        raise FileNotFoundError(f"No runs: the log folder {log_root} does not exist.")
    found = sorted(name for name in os.listdir(log_root) if os.path.isdir(os.path.join(log_root, name)))
    runs = sorted((name for name in found if re.match(load_run, name)), key=_natural_key)
    if not runs:
        raise FileNotFoundError(f"No run matching {load_run!r} in {log_root} (found: {', '.join(found) or 'nothing'}).")
    for run in reversed(runs):
        names = os.listdir(os.path.join(log_root, run))
        if any(_matches(checkpoint, name) or (best and name == BEST_CHECKPOINT) for name in names):
            return os.path.join(log_root, run)
    raise FileNotFoundError(f"No checkpoint matching {checkpoint!r} in the runs {', '.join(runs)} of {log_root}.")


def resolve_checkpoint(log_root: str, checkpoint: str = "latest", load_run: str = ".*") -> str:
    """``checkpoint`` as a file, a run folder (its last model), ``latest``, ``best`` (:func:`find_best_checkpoint`) or
    a file-name pattern, the last three looked up under ``log_root`` in the newest run matching ``load_run``."""
    if os.path.isfile(checkpoint):
        return checkpoint
    if os.path.isdir(checkpoint):
        return last_checkpoint_in(checkpoint)
    if os.sep in checkpoint:
        raise FileNotFoundError(f"Checkpoint file {checkpoint} does not exist.")
    if checkpoint == "best":
        return find_best_checkpoint(log_root, load_run)
    return find_checkpoint(log_root, load_run, MODEL_PATTERN if checkpoint == "latest" else checkpoint)
