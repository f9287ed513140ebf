"""The training loop: batches from the collector workers, the learner's updates (PPO's or distillation's), weight
syncs, logs and checkpoints."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import os
import signal
import time

import torch
import yaml

from ..agents.torchrl_cfg import TorchRLDistillationRunnerCfg, TorchRLRunnerCfg
from ..agents.validation import learner_device
from ..envs import IsaacLabEnvFactory
from ..models import EnvInterface
from .checkpoint import BEST_CHECKPOINT, EVALUATION_KEY, best_score, load_checkpoint, save_checkpoint
from .collection import Collection
from .distillation import Distillation
from .distributed import DistributedContext, average
from .evaluation import Evaluation, EvaluationResult
from .logger import Logger, batch_bytes
from .ppo import PPO
from .safety import NonFiniteError, StopSignals
from .trackers import Tracker, VideoUploads, make_tracker


class TrackerStartError(RuntimeError):
    """The tracker of ``agent.logger`` could not start its run (nothing was trained)."""


def make_learner(
    cfg: TorchRLRunnerCfg, interface: EnvInterface, distributed: DistributedContext | None
) -> PPO | Distillation:
    """The learner of the config: PPO, or distillation for a :class:`TorchRLDistillationRunnerCfg`. Both take
    batches (:meth:`update`), hold the policy the workers run (:attr:`collection_policy`, :attr:`policy_factory`)
    and save and load their state."""
    device = learner_device(cfg)
    if isinstance(cfg, TorchRLDistillationRunnerCfg):
        return Distillation(cfg, interface, device)
    return PPO(cfg, interface, device, distributed, lag_corrected=not cfg.collector.sync)


class TorchRLRunner:
    """Trains a (recurrent) PPO agent, or distils a teacher into a student, on Isaac Lab environments that live only
    in collector subprocesses.

    Args:
        env_factories: One factory per collector subprocess.
        interface: Observation and action sizes, read from a worker's environment.
        cfg: The runner configuration, resolved and checked by
            :func:`~isaaclab_torchrl.agents.validation.validate_agent_cfg`.
        log_dir: Run folder for TensorBoard events and checkpoints; ``None`` disables both.
        distributed: This rank's place in a data-parallel group, or ``None``.
        eval_env_factory: The evaluation worker's environments (``cfg.eval_interval``; rank 0 only), or ``None``.
    """

    collection_class = Collection
    """The collector workers' class (``benchmarks/storage_proof.py`` runs one that checksums every batch)."""

    def __init__(
        self,
        env_factories: list[IsaacLabEnvFactory],
        interface: EnvInterface,
        cfg: TorchRLRunnerCfg,
        log_dir: str | None,
        distributed: DistributedContext | None = None,
        eval_env_factory: IsaacLabEnvFactory | None = None,
    ):
        if None in (cfg.compile, cfg.cudagraphs, cfg.collector.sync, cfg.collector.cudagraph_policy):
            raise ValueError("TorchRLRunner trains a resolved config: pass it through validate_agent_cfg first.")
        self.cfg = cfg
        self.env_factories = env_factories
        self.interface = interface
        self.log_dir = log_dir
        self.distributed = distributed
        self.eval_env_factory = eval_env_factory
        torch.manual_seed(cfg.seed)
        self.learner = make_learner(cfg, interface, distributed)
        self.iteration = 0
        self._last_saved = None
        self._videos: VideoUploads | None = None
        self._best_score: float | None = None
        """The evaluated return of the run folder's ``model_best.pt``, which only a better one replaces."""
        self.tracker = Tracker()
        """W&B, Neptune or MLflow while :meth:`learn` runs (``agent.logger``); a no-op otherwise."""

    def learn(self, num_iterations: int | None = None) -> signal.Signals | None:
        """Collects and trains for ``num_iterations`` iterations (default: ``cfg.max_iterations``).

        SIGINT or SIGTERM stops training after the current update, which is saved; a second SIGINT aborts at
        once. The collector workers are shut down whatever happens.

        Returns:
            The signal that stopped training, or ``None`` when it ran all its iterations.

        Raises:
            WorkerFailure: a collector worker died, or no batch (or weight acknowledgement) came within the timeout.
            NonFiniteError: NaN/Inf in a batch or in the update (the last checkpoint holds parameters from
                before it).
        """
        start_iteration = self.iteration
        end_iteration = start_iteration + (self.cfg.max_iterations if num_iterations is None else num_iterations)
        self.tracker = self._start_tracker()
        echo = self.distributed is None or self.distributed.is_main
        logger = Logger(self.log_dir, start_iteration, echo=echo, tracker=self.tracker)
        start_time = time.perf_counter()
        policy, policy_factory = self.learner.collection_policy, self.learner.policy_factory
        evaluation = self._make_evaluation()
        tracked = self.log_dir is not None and type(self.tracker) is not Tracker
        self._videos = VideoUploads(self.log_dir) if tracked else None
        try:
            with StopSignals() as stop, evaluation or contextlib.nullcontext():
                every_state = self.learner.reads_every_state
                workers = self.collection_class(self.cfg, self.env_factories, policy, policy_factory, every_state)
                with workers:
                    stopped = self._train(workers, stop, logger, evaluation, start_time, end_iteration)
                if evaluation is not None and not stopped:  # the workers have stopped: nothing else runs now
                    self._finish_evaluation(evaluation, logger, stop)
            self._upload_videos(final=True)  # the recording workers have stopped
            return stop.received
        finally:
            logger.close()
            self.tracker.close()
            self.tracker = Tracker()

    def _train(
        self,
        workers: Collection,
        stop: StopSignals,
        logger: Logger,
        evaluation: Evaluation | None,
        start_time: float,
        end_iteration: int,
    ) -> bool:
        """The iterations, until ``end_iteration`` or a signal; returns whether a signal stopped them."""
        start_iteration, stopped = self.iteration, False
        for batch in workers:
            if self.iteration == start_iteration:
                print(f"[torchrl] batch bytes per env step: {batch_bytes(batch)}", flush=True)
            if self.distributed is not None and self.iteration == start_iteration:
                # each rank collects its own data: this line shows that they differ
                rank, size = self.distributed.rank, self.distributed.world_size
                reward_sum = float(batch["next", "reward"].sum())
                print(f"[torchrl] rank {rank} of {size}: first batch reward sum {reward_sum:.9g}", flush=True)
            learn_start = time.perf_counter()
            stats = self._update(batch)
            workers.sync_weights()
            learn_time = time.perf_counter() - learn_start
            self.iteration += 1
            stats["policy_lag"] = workers.policy_lag(batch)
            episode_terms = logger.add_batch(batch)
            elapsed = time.perf_counter() - start_time
            eta = elapsed / (self.iteration - start_iteration) * (end_iteration - self.iteration)
            steps = batch.numel()
            logger.log(self.iteration, end_iteration, stats, episode_terms, steps, workers.wait_time, learn_time, eta)
            if self.iteration % self.cfg.save_interval == 0 or self.iteration == end_iteration:
                self._save_iteration()
            self._upload_videos()
            if evaluation is not None:  # the last iteration's evaluation comes after the workers stopped
                self._evaluate(evaluation, logger, due=self.iteration != end_iteration)
            stopped = self._stop_requested(stop)
            if stopped or self.iteration == end_iteration:
                break
        if stopped:  # the update that finished when the signal came is saved (by rank 0 for all ranks)
            self._save_iteration()
        return stopped

    def _upload_videos(self, final: bool = False) -> None:
        """Sends the tracker the videos recorded since the last call (``--video``), as rsl_rl does to W&B."""
        for path in [] if self._videos is None else self._videos.ready(final):
            self.tracker.log_video(path, self.iteration)

    def _make_evaluation(self) -> Evaluation | None:
        if self.eval_env_factory is None or not self.cfg.eval_interval:
            return None
        if self.log_dir is not None:
            self._best_score = best_score(os.path.join(self.log_dir, BEST_CHECKPOINT))
        cfg = self.cfg
        return Evaluation(
            self.eval_env_factory,
            cfg.policy,
            self.interface,
            cfg.device,
            cfg.eval_interval,
            cfg.collector.shutdown_timeout_s,
        )

    def _evaluate(self, evaluation: Evaluation, logger: Logger, due: bool) -> None:
        """Records the evaluations that finished, and asks for this iteration's when it is due (never waits)."""
        for result in evaluation.poll():
            self._record_evaluation(result, logger)
        if due and evaluation.due(self.iteration):
            evaluation.trigger(self.iteration, self._snapshot)

    def _finish_evaluation(self, evaluation: Evaluation, logger: Logger, stop: StopSignals) -> None:
        """At the end of training: waits for the evaluation in progress, then evaluates the last iteration's policy if
        it was not (each wait as long as for a batch, and none after a signal)."""
        self._wait_for_evaluation(evaluation, logger, stop)
        if evaluation.last_requested != self.iteration and evaluation.trigger(self.iteration, self._snapshot):
            self._wait_for_evaluation(evaluation, logger, stop)

    def _wait_for_evaluation(self, evaluation: Evaluation, logger: Logger, stop: StopSignals) -> None:
        deadline = time.monotonic() + self.cfg.collector.batch_timeout_s
        while evaluation.running is not None and stop.received is None and time.monotonic() < deadline:
            for result in evaluation.poll(timeout=0.5):
                self._record_evaluation(result, logger)
        if evaluation.running is not None:
            print(f"[torchrl] the evaluation of iteration {evaluation.running} was not waited for.", flush=True)

    def _snapshot(self) -> bytes:
        """The runner's state now, as a checkpoint's bytes: what is evaluated, and kept if it is the best."""
        buffer = io.BytesIO()
        torch.save(self.state_dict(), buffer)
        return buffer.getvalue()

    def _record_evaluation(self, result: EvaluationResult, logger: Logger) -> None:
        """Logs an evaluation; a better one than the run folder's best so far becomes ``model_best.pt``."""
        logger.log_evaluation(
            result.iteration, result.mean_reward, result.mean_episode_length, result.episodes, self.iteration
        )
        if self.log_dir is None or (self._best_score is not None and result.mean_reward <= self._best_score):
            return
        state = torch.load(io.BytesIO(result.checkpoint), weights_only=True)
        state[EVALUATION_KEY] = {
            "iteration": result.iteration,
            "mean_reward": result.mean_reward,
            "mean_episode_length": result.mean_episode_length,
            "episodes": result.episodes,
        }
        path = os.path.join(self.log_dir, BEST_CHECKPOINT)
        save_checkpoint(state, path)
        self._best_score = result.mean_reward
        self.tracker.log_file(path, "checkpoints")
        print(f"[torchrl] best evaluated policy so far: iteration {result.iteration}, saved as {path}", flush=True)

    def _start_tracker(self) -> Tracker:
        """Starts (or, in a resumed run folder, continues) the tracked run; a new one receives the configs, the
        ``params`` and ``git`` files of the run folder."""
        cfg = self.cfg
        try:
            tracker = make_tracker(cfg, self.log_dir)
        except Exception as exc:
            raise TrackerStartError(f"--logger {cfg.logger} could not start its run: {exc}") from exc
        if self.log_dir is not None and not tracker.resumed:
            tracker.log_config(cfg.to_dict(), self.env_factories[0].env_cfg.to_dict())
            for folder in ("params", "git"):
                directory = os.path.join(self.log_dir, folder)
                for name in sorted(os.listdir(directory)) if os.path.isdir(directory) else []:
                    tracker.log_file(os.path.join(directory, name), folder)
        return tracker

    def _update(self, batch) -> dict[str, float]:
        """The learner's update of one batch and the statistics to log; a NaN/Inf stop names the iteration, and
        saves the networks when they are still those from before the update."""
        try:
            stats = self.learner.update(batch)
        except NonFiniteError as exc:
            if exc.parameters_unchanged:
                self._save_iteration()
            raise NonFiniteError(f"{exc} (iteration {self.iteration + 1})", exc.parameters_unchanged) from exc
        stats["learning_rate"] = self.learner.learning_rate
        stats["mean_std"] = self.learner.noise_std()
        if self.distributed is not None:
            stats["communication_time"] = self.learner.communication_time
        return stats

    def _stop_requested(self, stop: StopSignals) -> bool:
        """Whether to stop now; with several ranks, all stop after the same update when any was signalled."""
        requested = stop.received is not None
        if self.distributed is not None:
            requested = bool(average(torch.tensor(float(requested), device=self.learner.device)) > 0)
        return requested

    def _save_iteration(self) -> None:
        """Saves ``model_<iteration>.pt`` (once per iteration) in the run folder."""
        path = None if self.log_dir is None else os.path.join(self.log_dir, f"model_{self.iteration}.pt")
        if path is not None and path != self._last_saved:
            self.save(path)
            self.tracker.log_file(path, "checkpoints")
            self._last_saved = path

    def state_dict(self) -> dict:
        return {
            **self.learner.state_dict(),
            "interface": dataclasses.asdict(self.interface),  # what the networks read (load_policy rebuilds them)
            "iteration": self.iteration,
            "rng_state": torch.get_rng_state(),
            # the config travels as YAML text, so that loading stays weights_only
            "config": yaml.safe_dump(self.cfg.to_dict(), sort_keys=False),
        }

    def save(self, path: str) -> None:
        save_checkpoint(self.state_dict(), path)

    def load(self, path: str, optimizer: bool = True) -> bool:
        """Restores networks, optimizer, learning rate, iteration counter and RNG state from a checkpoint; a
        distillation run given a PPO checkpoint (this runner's or rsl_rl's) takes its teacher from it, and nothing
        else.

        Args:
            optimizer: Restore the optimizer and the learning rate too; ``False`` keeps a fresh optimizer and the
                configured learning rate (``--no-resume_optimizer_state``).

        Returns:
            Whether the run continues the checkpoint's (its iteration counter and RNG state restored).

        Raises:
            ValueError: the checkpoint cannot be read or was trained with other networks or sizes.
        """
        distillation = isinstance(self.cfg, TorchRLDistillationRunnerCfg)
        state = load_checkpoint(path, map_location=self.learner.device, rsl_rl_teacher=distillation)
        try:
            continues = self.learner.load_state_dict(state, optimizer=optimizer)
        except ValueError as exc:
            raise ValueError(f"Checkpoint {path} does not fit this task and agent ({exc})") from exc
        if continues:
            self.iteration = state["iteration"]
            torch.set_rng_state(state["rng_state"].cpu())
        return continues
