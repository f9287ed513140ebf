"""What a run reports: episode statistics from the batches, TensorBoard scalars under rsl_rl's tag names, and a
one-line console summary per iteration. Every tag name is written here and nowhere else."""

from __future__ import annotations

import collections
import statistics

from tensordict import TensorDictBase
from torch.utils.tensorboard import SummaryWriter

from ..envs import EPISODE_LOG_KEY
from .trackers import Tracker

LOSS_TAGS = {
    "surrogate": "Loss/surrogate",
    "value": "Loss/value",
    "entropy": "Loss/entropy",
    "symmetry": "Loss/symmetry",
    "rnd": "Loss/rnd",
    "rnd_weight": "Rnd/weight",
    "rnd_intrinsic_reward": "Rnd/intrinsic_reward_per_step",
    "behavior": "Loss/behavior",
    "kl": "Loss/kl",
    "grad_norm": "Loss/grad_norm",
}
"""PPO's and distillation's (``behavior``) losses under rsl_rl's tags (``symmetry`` and ``rnd`` with those
extensions); ``kl`` and ``grad_norm`` are ours, and RND's weight and mean intrinsic reward per step (rsl_rl logs its
sum per episode)."""


def finished_episodes(td: TensorDictBase) -> tuple[list[float], list[int]]:
    """The returns and lengths of the episodes that end in the steps of ``td`` (a collected batch ``[..., time]`` or
    one step), in the order they ended.

    With ``compact_obs`` only the root running sums are kept: a finished episode's totals are the root value plus
    its last step.
    """
    if td.ndim > 1:  # time first, so that the episodes come in the order they ended (rsl_rl's buffer order)
        td = td.reshape(-1, td.shape[-1]).transpose(0, 1)
    done = td["next", "done"].squeeze(-1)
    returns = (td["episode_reward"] + td["next", "reward"]).squeeze(-1)[done]
    lengths = td["step_count"].squeeze(-1)[done] + 1
    return returns.tolist(), lengths.tolist()


def batch_bytes(batch: TensorDictBase) -> str:
    """Bytes per env step of each entry of a collected batch, the largest first, with its dtype and shape per step,
    and their total: ``"policy 6144 (uint8 6x32x32), ...; total 6300"``."""
    steps = max(batch.numel(), 1)
    entries = []
    for key, value in batch.items(include_nested=True, leaves_only=True):
        shape = "x".join(map(str, value.shape[batch.batch_dims :])) or "1"
        name = key if isinstance(key, str) else "/".join(key)
        dtype = str(value.dtype).removeprefix("torch.")
        entries.append((value.element_size() * value.numel() // steps, f"{name} {{}} ({dtype} {shape})"))
    entries.sort(key=lambda entry: -entry[0])
    listed = ", ".join(text.format(size) for size, text in entries)
    return f"{listed}; total {sum(size for size, _ in entries)}"


class Logger:
    """TensorBoard events in the run folder (none without one) and the console line of each iteration.

    Args:
        log_dir: The run folder, or ``None`` (no events: a rank other than 0, or a run without a folder).
        start_iteration: The iteration training starts from; a resumed run continues its event stream, and
            events logged after its checkpoint are dropped.
        echo: Print the console line (rank 0 speaks for all).
        tracker: W&B, Neptune or MLflow, which receives the same scalars at the same steps.
    """

    def __init__(
        self, log_dir: str | None, start_iteration: int = 0, echo: bool = True, tracker: Tracker | None = None
    ):
        self.tracker = tracker or Tracker()
        self.writer = None
        if log_dir is not None:
            self.writer = SummaryWriter(log_dir=log_dir, flush_secs=10, purge_step=start_iteration + 1)
        self.echo = echo
        self.episode_returns = collections.deque(maxlen=100)
        self.episode_lengths = collections.deque(maxlen=100)
        self.total_time = 0.0
        """Collection and learning seconds summed over the iterations (rsl_rl's time axis)."""

    def add_batch(self, batch: TensorDictBase) -> dict[str, float]:
        """Records the episodes that ended in ``batch``; returns the task's episode terms (``extras["log"]``)."""
        returns, lengths = finished_episodes(batch)
        self.episode_returns.extend(returns)
        self.episode_lengths.extend(lengths)
        terms = {}
        if EPISODE_LOG_KEY in batch["next"].keys():
            # a term's value is fresh on the steps where episodes ended (see IsaacLabEnv)
            done = batch["next", "done"]
            for name, value in batch["next", EPISODE_LOG_KEY].items(include_nested=True, leaves_only=True):
                value = value[done & ~value.isnan()]
                if value.numel():
                    # rsl_rl's rule: a name with a "/" is a tag of its own, others go under Episode/
                    terms[name if "/" in name else f"Episode/{name}"] = float(value.mean())
        return terms

    def log(
        self,
        iteration: int,
        end_iteration: int,
        stats: dict[str, float],
        episode_terms: dict[str, float],
        num_steps: int,
        collect_time: float,
        learn_time: float,
        eta: float,
    ) -> None:
        """Writes one iteration's scalars and prints its line.

        Args:
            stats: The update's statistics (PPO's ``surrogate``, ``value``, ``entropy``, ``kl``, ``grad_norm``, with
                asynchronous collection ``importance_weight`` and ``truncated_fraction``; distillation's ``behavior``
                and ``grad_norm``), the ``learning_rate``, ``mean_std``, ``policy_lag`` and, with several ranks,
                ``communication_time``.
        """
        fps = num_steps / (collect_time + learn_time)
        self.total_time += collect_time + learn_time
        reward = statistics.fmean(self.episode_returns) if self.episode_returns else None
        length = statistics.fmean(self.episode_lengths) if self.episode_lengths else None
        if self.writer is not None:
            scalars = {tag: stats[key] for key, tag in LOSS_TAGS.items() if key in stats}
            scalars["Loss/learning_rate"] = stats["learning_rate"]
            scalars["Policy/mean_std"] = stats["mean_std"]
            scalars.update({"Perf/total_fps": fps, "Perf/collection_time": collect_time})
            scalars.update({"Perf/learning_time": learn_time, "Perf/policy_lag": stats["policy_lag"]})
            if "communication_time" in stats:
                scalars["Perf/communication_time"] = stats["communication_time"]
            for key in ("importance_weight", "truncated_fraction"):  # lag-corrected (asynchronous) updates
                if key in stats:
                    scalars[f"Policy/{key}"] = stats[key]
            if reward is not None:
                scalars.update({"Train/mean_reward": reward, "Train/mean_episode_length": length})
            scalars.update(episode_terms)
            for tag, value in scalars.items():
                self.writer.add_scalar(tag, value, iteration)
            self.tracker.log_scalars(scalars, iteration)
            if reward is not None:  # rsl_rl's second axis: seconds of collection and learning
                self.writer.add_scalar("Train/mean_reward/time", reward, int(self.total_time))
                self.writer.add_scalar("Train/mean_episode_length/time", length, int(self.total_time))
        if not self.echo:
            return
        communication = ""
        if "communication_time" in stats:
            communication = f", of which all-reduce {stats['communication_time']:.3f}s"
        print(
            f"[torchrl] it {iteration:5d}/{end_iteration} | {fps:8.0f} steps/s "
            f"(collect {collect_time:.2f}s, learn {learn_time:.2f}s{communication}) | "
            f"return {'n/a' if reward is None else f'{reward:.2f}':>9} | "
            f"ep len {'n/a' if length is None else f'{length:.1f}':>7} | "
            f"{_losses(stats)} | lag {stats['policy_lag']:.1f} | lr {stats['learning_rate']:.1e} | ETA {eta:6.0f}s",
            flush=True,
        )

    def log_evaluation(self, iteration: int, mean_reward: float, mean_episode_length: float, episodes: int, step: int):
        """Writes an evaluation of the deterministic policy of ``iteration`` (``Eval/*`` at that step) and prints its
        line; ``step`` is the training iteration at which it finished (W&B's steps only increase)."""
        scalars = {"Eval/mean_reward": mean_reward, "Eval/mean_episode_length": mean_episode_length}
        if self.writer is not None:
            for tag, value in scalars.items():
                self.writer.add_scalar(tag, value, iteration)
            self.tracker.log_evaluation(scalars, iteration, step)
        if self.echo:
            print(
                f"[torchrl] evaluation of iteration {iteration}: return {mean_reward:.2f} | "
                f"ep len {mean_episode_length:.1f} | {episodes} episodes",
                flush=True,
            )

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def _losses(stats: dict[str, float]) -> str:
    """The console line's losses: distillation's behaviour loss, or PPO's."""
    if "behavior" in stats:
        return f"behavior {stats['behavior']:.5f}"
    return (
        f"value {stats['value']:.4f} | surrogate {stats['surrogate']:+.4f} | "
        f"entropy {stats['entropy']:.3f} | kl {stats['kl']:.4f}"
    )
