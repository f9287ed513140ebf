"""Recurrent PPO over torchrl multi-process collectors that run Isaac Lab in their subprocesses."""

from __future__ import annotations

import collections
import contextlib
import os
import signal
import statistics
import time

import torch
import yaml
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import CudaGraphModule
from torch.utils.tensorboard import SummaryWriter
from torchrl.collectors import MultiAsyncCollector, MultiSyncCollector
from torchrl.modules import set_recurrent_mode
from torchrl.objectives import ClipPPOLoss
from torchrl.objectives.value import GAE
from torchrl.weight_update import MultiProcessWeightSyncScheme

from ..agents.torchrl_cfg import TorchRLRunnerCfg
from ..envs import EPISODE_LOG_KEY, FINAL_OBS_KEY, IsaacLabEnvFactory
from ..models import (
    CollectionPolicyFactory,
    EnvInterface,
    make_collection_policy,
    make_models,
    noise_std,
    observation_normalizers,
)
from .checkpoint import load_checkpoint, save_checkpoint
from .distributed import DistributedContext, average, average_gradients, broadcast_state, global_moments
from .safety import CollectorWatchdog, NonFiniteError, StopSignals, WorkerFailure, init_worker


def compute_advantages(gae: GAE, batch: TensorDictBase, critic_obs_keys: tuple[str, ...]) -> TensorDictBase:
    """Runs shifted GAE on a collected batch laid out as [trajectory slice, time] (leading dims are flattened).

    ``compact_obs`` drops the ``("next", obs)`` copies, so the critic's true next observations are taken from
    ``("next", "final_obs")``: GAE then bootstraps with V(s_T) after the rollout's last step and on time-outs
    (where the next root observation already belongs to the new episode), and never on terminations. The
    value network runs once in recurrent mode over each slice with the final observations inserted after
    time-outs; the shifted budget leaves room for every one of them, so no sample is displaced.
    """
    batch = batch.reshape(-1, batch.shape[-1])
    batch.names = [None, "time"]
    for key in critic_obs_keys:
        batch["next", key] = batch["next", FINAL_OBS_KEY, key]
    next_td = batch["next"]
    time_outs = (next_td["done"] & ~next_td["terminated"]).squeeze(-1)[:, :-1]
    gae.shifted_budget = int(time_outs.sum(-1).max()) + 1
    with torch.no_grad(), set_recurrent_mode(True):
        gae(batch)
    return batch


class TorchRLRunner:
    """Trains a (recurrent) PPO agent on Isaac Lab environments that live only in collector subprocesses.

    Args:
        env_factories: One factory per collector subprocess.
        interface: Observation and action sizes, read from a worker's environment.
        cfg: The runner configuration.
        log_dir: Run folder for TensorBoard events and checkpoints; ``None`` disables both.
    """

    def __init__(
        self,
        env_factories: list[IsaacLabEnvFactory],
        interface: EnvInterface,
        cfg: TorchRLRunnerCfg,
        log_dir: str | None,
        distributed: DistributedContext | None = None,
    ):
        self.cfg = cfg
        self.distributed = distributed
        self.env_factories = env_factories
        self.interface = interface
        self.log_dir = log_dir
        self.device = torch.device(cfg.device)
        self.train_device = torch.device(cfg.train_device or cfg.device)
        torch.manual_seed(cfg.seed)

        self.actor, self.critic = make_models(
            cfg.policy, interface, self.train_device, recurrent_backend=cfg.collector.recurrent_backend
        )
        if distributed is not None:
            # every replica starts from rank 0's parameters; averaged gradients keep them equal
            broadcast_state(self.actor)
            broadcast_state(self.critic)
        self.collection_policy = make_collection_policy(self.actor, self.critic, cfg.policy)
        # each input normalizer with the groups it reads; a shared recurrent layer shares the actor's normalizer
        self.normalizers = [(n, interface.actor_obs_keys) for n in observation_normalizers(self.actor)]
        self.normalizers += [
            (n, interface.critic_obs_keys)
            for n in observation_normalizers(self.critic)
            if not any(n is known for known, _ in self.normalizers)
        ]
        algo = cfg.algorithm
        self.loss = ClipPPOLoss(
            self.actor,
            self.critic,
            clip_epsilon=algo.clip_param,
            entropy_coeff=algo.entropy_coef,
            critic_coeff=algo.value_loss_coef,
            loss_critic_type="l2",
            clip_value=algo.clip_param if algo.use_clipped_value_loss else None,
            normalize_advantage=False,
            # a CUDA graph cannot replay the loss's host-side branches on its coefficients (`if clip_value:`)
            # when they live on the GPU
            device="cpu" if cfg.cudagraphs else None,
        )
        # shifted=True runs the (recurrent) critic once over [obs_0 .. obs_T-1, obs_T] per trajectory slice
        self.gae = GAE(gamma=algo.gamma, lmbda=algo.lam, value_network=self.critic, average_gae=False, shifted=True)
        self.loss_keys = [key for key in self.loss.in_keys if not (isinstance(key, tuple) and key[0] == "next")]
        self.loss_keys += ["advantage", "value_target", "state_value"]
        # the learning rate is a tensor on the learner's device, adapted there, so that no minibatch waits for the
        # GPU to report its KL (Adam reads a tensor learning rate on CUDA with capturable=True)
        self.lr = torch.tensor(float(algo.learning_rate), device=self.train_device)
        on_cuda = self.train_device.type == "cuda"
        self.parameters = list(self.loss.parameters())  # what the optimizer, the all-reduce and the clipping act on
        self.optimizer = torch.optim.Adam(self.parameters, lr=self.lr, capturable=on_cuda, fused=on_cuda)
        self._loss_and_gradients = torch.compile(self._losses) if cfg.compile else self._losses
        if cfg.cudagraphs:
            # the gradients of the replays land in the .grad tensors of the capture, which the optimizer reads
            self._loss_and_gradients = CudaGraphModule(
                self._loss_and_gradients, in_keys=[], out_keys=[], device=self.train_device
            )
        self.iteration = 0
        self.policy_version = 0
        self.collector = None
        self.writer = None
        self._last_saved = None
        self.communication_time = 0.0
        """Seconds spent in gradient, statistics and KL all-reduces since the last logged iteration."""
        self.episode_returns = collections.deque(maxlen=100)
        self.episode_lengths = collections.deque(maxlen=100)

    """
    Training.
    """

    def learn(self, num_iterations: int | None = None) -> signal.Signals | None:
        """Collects and trains for ``num_iterations`` iterations (default: ``cfg.max_iterations``).

        SIGINT or SIGTERM stops training after the current update, which is saved; a second SIGINT aborts at
        once. The collector workers are shut down whatever happens.

        Returns:
            The signal that stopped training, or ``None`` when it ran all its iterations.

        Raises:
            WorkerFailure: a collector worker died, or no batch came within the timeout.
            NonFiniteError: NaN/Inf in a batch or in the update (the last checkpoint holds parameters from
                before it).
        """
        num_iterations = self.cfg.max_iterations if num_iterations is None else num_iterations
        if self.log_dir is not None and self.writer is None:
            # a resumed run continues the same event stream; steps logged after its checkpoint are dropped
            self.writer = SummaryWriter(log_dir=self.log_dir, flush_secs=10, purge_step=self.iteration + 1)
        collector_cfg = self.cfg.collector
        start_iteration = self.iteration
        end_iteration = start_iteration + num_iterations
        start_time = time.perf_counter()
        watchdog = None
        try:
            with StopSignals() as stop:
                self.collector = self._make_collector()
                watchdog = CollectorWatchdog(
                    self.collector.procs, collector_cfg.first_batch_timeout_s, collector_cfg.batch_timeout_s
                )
                batches = iter(self.collector)
                while self.iteration < end_iteration and not self._stop_requested(stop):
                    collect_start = time.perf_counter()
                    watchdog.expect_batch()
                    try:
                        batch = next(batches)
                    except WorkerFailure:
                        raise
                    except Exception as exc:  # torchrl stops the collector when a worker dies or is killed
                        raise watchdog.failure(exc) from exc
                    watchdog.batch_received()
                    collect_time = time.perf_counter() - collect_start
                    learn_start = time.perf_counter()
                    self.communication_time = 0.0
                    try:
                        stats = self.update(batch)
                    except NonFiniteError as exc:
                        if exc.parameters_unchanged:
                            self._save_iteration()
                        raise
                    self.policy_version += 1
                    self.collector.update_policy_weights_()
                    learn_time = time.perf_counter() - learn_start
                    self.iteration += 1
                    stats.update(self._episode_stats(batch))
                    stats["policy_lag"] = self._policy_lag(batch)
                    self._log(
                        stats, batch.numel(), collect_time, learn_time, start_time, start_iteration, end_iteration
                    )
                    if self.iteration % self.cfg.save_interval == 0 or self.iteration == end_iteration:
                        self._save_iteration()
                if self._stop_requested(stop):
                    self._save_iteration()
                return stop.received
        except KeyboardInterrupt:
            # a second SIGINT: no waiting for the workers to finish their rollouts
            if watchdog is not None:
                watchdog.stop()
                watchdog.kill_workers()
            raise
        finally:
            if watchdog is not None:
                watchdog.stop()
            self.close()

    @contextlib.contextmanager
    def _communication(self):
        """Times a collective operation (on GPUs, NCCL's launch; the wait shows where the result is used)."""
        start = time.perf_counter()
        yield
        self.communication_time += time.perf_counter() - start

    def _stop_requested(self, stop: StopSignals) -> bool:
        """Whether to stop now; with several ranks, all stop after the same update when any was signalled."""
        requested = stop.received is not None
        if self.distributed is not None:
            requested = bool(average(torch.tensor(float(requested), device=self.train_device)) > 0)
        return requested

    def _save_iteration(self) -> None:
        """Saves ``model_<iteration>.pt`` (once per iteration) in the run folder."""
        path = None if self.log_dir is None else os.path.join(self.log_dir, f"model_{self.iteration}.pt")
        if path is not None and path != self._last_saved:
            self.save(path)
            self._last_saved = path

    def update(self, batch: TensorDictBase) -> dict[str, float]:
        """One PPO update (GAE, then epochs of minibatches of whole trajectory slices) on a collected batch."""
        algo = self.cfg.algorithm
        batch = batch.to(self.train_device)
        critic_keys = self.interface.critic_obs_keys
        if self.cfg.check_for_nan:
            final_obs = [("next", FINAL_OBS_KEY, key) for key in critic_keys]
            self._check_finite(batch, [*self.interface.obs_keys, *final_obs, ("next", "reward")], "batch")
        batch = compute_advantages(self.gae, batch, critic_keys)
        if self.cfg.check_for_nan:
            self._check_finite(batch, ["advantage", "value_target"], "advantages")
        # after the checks, so that a bad batch leaves the networks (statistics included) as they were
        self._update_normalizers(batch)
        if algo.normalize_advantage:
            advantage = batch["advantage"]
            valid = batch["shifted_valid"].unsqueeze(-1).expand_as(advantage)
            mean, std = advantage[valid].mean(), advantage[valid].std()
            batch["advantage"] = (advantage - mean) / (std + 1e-8)

        # only what the loss reads: indexing a minibatch then copies a few tensors instead of the whole batch
        batch = batch.select(*self.loss_keys)
        # minibatches of equal size (a CUDA graph replays one shape); like rsl_rl, the remainder of the division is
        # left out of that epoch
        slices_per_minibatch = batch.shape[0] // algo.num_mini_batches
        num_slices = slices_per_minibatch * algo.num_mini_batches
        # summed on the device and read once per update; only the NaN check (check_for_nan) reads a flag per minibatch
        sums = None
        num_updates = 0
        for epoch in range(algo.num_learning_epochs):
            permutation = torch.randperm(batch.shape[0], device=batch.device)[:num_slices]
            for indices in permutation.view(algo.num_mini_batches, slices_per_minibatch):
                stats = self._gradient_step(batch[indices])
                values = torch.stack(list(stats.values()))
                if self.distributed is not None:
                    # one all-reduce: the same KL (so the same learning rate) and NaN verdict on every rank
                    with self._communication():
                        values = average(values)
                    stats = TensorDict(dict(zip(stats.keys(), values.unbind(), strict=True)))
                if self.cfg.check_for_nan and not bool(torch.isfinite(values).all()):
                    bad = [key for key, value in stats.items() if not bool(torch.isfinite(value))]
                    raise NonFiniteError(
                        f"Non-finite {bad} in minibatch {num_updates + 1} (epoch {epoch + 1}) of the update of "
                        f"iteration {self.iteration + 1}; that gradient step was not applied.",
                        parameters_unchanged=num_updates == 0,
                    )
                if algo.schedule == "adaptive":
                    self._adapt_learning_rate(stats["kl"])
                self.optimizer.step()
                sums = stats if sums is None else sums + stats
                num_updates += 1
        return {key: float(value) / num_updates for key, value in sums.items()}

    def _gradient_step(self, minibatch: TensorDictBase) -> TensorDictBase:
        """Loss and clipped (with several ranks: averaged) gradient on one minibatch; returns its statistics.

        The optimizer step is the caller's, after the NaN check.
        """
        stats = self._loss_and_gradients(minibatch)
        if self.distributed is not None:
            with self._communication():
                average_gradients(self.parameters)
        stats["grad_norm"] = torch.nn.utils.clip_grad_norm_(self.parameters, self.cfg.algorithm.max_grad_norm)
        return stats

    def _losses(self, minibatch: TensorDictBase) -> TensorDictBase:
        """PPO's losses on one minibatch and their gradients (in ``.grad``); returns the detached statistics.

        This is the part that ``cfg.compile`` compiles and ``cfg.cudagraphs`` replays as a CUDA graph.
        """
        with set_recurrent_mode(True):
            losses = self.loss(minibatch)
        loss = losses["loss_objective"] + losses["loss_critic"] + losses["loss_entropy"]
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        # k3 estimator of KL(behaviour || current) from the loss's ratio statistics: non-negative per sample and
        # with less variance than kl_approx (k1), as the adaptive schedule needs
        kl = (losses["mean_ratio"] - 1.0 + losses["kl_approx"]).detach()
        return TensorDict(
            {
                "surrogate": losses["loss_objective"].detach(),
                "value_function": losses["loss_critic"].detach(),
                "entropy": losses["entropy"].detach(),
                "kl": kl,
            }
        )

    def _update_normalizers(self, batch: TensorDictBase) -> None:
        """Merges the batch's observations into the running statistics of the networks' inputs.

        The workers receive the new statistics with the next weight sync (they are buffers of the policy).
        """
        for normalizer, keys in self.normalizers:
            samples = torch.cat([batch[key] for key in keys], dim=-1)
            if self.distributed is None:
                normalizer.update(samples)
            else:  # the statistics of all ranks' batches, so that the replicas' normalizers stay equal
                with self._communication():
                    moments = global_moments(samples)
                normalizer.merge(*moments)

    def _check_finite(self, batch: TensorDictBase, keys: list, what: str) -> None:
        """Stops on NaN/Inf in ``batch[keys]``, naming the keys, before they change the networks (one host sync)."""
        finite = torch.stack([torch.isfinite(batch[key]).all() for key in keys])
        if self.distributed is not None:  # a bad batch on any rank stops all ranks
            finite = average(finite.float()) == 1.0
        if not bool(finite.all()):
            bad = [key for key, ok in zip(keys, finite.tolist(), strict=True) if not ok]
            raise NonFiniteError(
                f"Non-finite values (NaN/Inf) in {bad} of the {what} of iteration {self.iteration + 1}: no update "
                "was made with this batch.",
                parameters_unchanged=True,
            )

    def _adapt_learning_rate(self, kl: torch.Tensor) -> None:
        """rsl_rl's adaptive schedule: shrink the learning rate when the policy moved too far, grow it otherwise."""
        desired_kl = self.cfg.algorithm.desired_kl
        shrunk = torch.clamp(self.lr / 1.5, min=1e-5)
        grown = torch.clamp(self.lr * 1.5, max=1e-2)
        lr = torch.where(
            kl > desired_kl * 2.0, shrunk, torch.where((kl > 0.0) & (kl < desired_kl / 2.0), grown, self.lr)
        )
        self.lr.copy_(lr)

    @property
    def learning_rate(self) -> float:
        """The current learning rate (reading it waits for the learner's device)."""
        return float(self.lr)

    """
    Collection.
    """

    def _make_collector(self):
        cfg = self.cfg
        collector_class = MultiSyncCollector if cfg.collector.sync else MultiAsyncCollector
        frames_per_worker = [factory.num_envs * cfg.num_steps_per_env for factory in self.env_factories]
        kwargs = {"cat_results": "stack"} if cfg.collector.sync else {}
        storing_device = cfg.collector.storing_device
        if storing_device is None:
            # batches collected on a GPU go through host memory: with torchrl 0.14.1, rollouts left in the
            # workers' shared CUDA buffers were corrupted on an H200 (asynchronous Cartpole: NaN observations, an
            # illegal memory access; synchronous ANYmal: illegal memory access and SIGSEGV in the worker in its
            # first iterations), while host-stored batches ran cleanly in both
            storing_device = "cpu" if self.device.type == "cuda" else cfg.device
        return collector_class(
            create_env_fn=self.env_factories,
            policy=self.collection_policy,
            policy_factory=CollectionPolicyFactory(cfg.policy, self.interface, cfg.device),
            weight_sync_schemes={"policy": MultiProcessWeightSyncScheme()},
            frames_per_batch=sum(frames_per_worker) if cfg.collector.sync else frames_per_worker[0],
            total_frames=-1,
            device=cfg.device,
            storing_device=storing_device,
            compact_obs=cfg.collector.compact_obs,
            cudagraph_policy=cfg.collector.cudagraph_policy,
            track_policy_version=True,
            auto_register_policy_transforms=True,
            init_fn=init_worker,
            **kwargs,
        )

    def close(self) -> None:
        """Shuts the collector workers down (killing those that do not stop in time) and flushes the logs."""
        if self.collector is not None:
            processes = list(getattr(self.collector, "procs", []))
            with contextlib.suppress(Exception):  # workers that died or were killed cannot answer
                self.collector.shutdown(timeout=self.cfg.collector.shutdown_timeout_s, raise_on_error=False)
            for process in processes:
                with contextlib.suppress(Exception):
                    process.join(timeout=self.cfg.collector.shutdown_timeout_s)
                    if process.is_alive():
                        process.kill()
                        process.join(timeout=5)
            self.collector = None
        if self.writer is not None:
            self.writer.flush()

    """
    Logging and checkpoints.
    """

    def _policy_lag(self, batch: TensorDictBase) -> float:
        """Mean number of weight updates between the policy that acted and the one that learns from the batch.

        A step's version tag is written with the observation of the step before, so the first step of a rollout
        carries the previous rollout's tag; it is left out.
        """
        acting_versions = batch["policy_version"][..., 1:].float()
        return float(self.policy_version - 1 - acting_versions.mean())

    def _episode_stats(self, batch: TensorDictBase) -> dict[str, float]:
        # compact_obs keeps the root running sums only: a finished episode's totals are the root value plus its
        # last step
        done = batch["next", "done"].squeeze(-1)
        returns = batch["episode_reward"] + batch["next", "reward"]
        self.episode_returns.extend(returns.squeeze(-1)[done].tolist())
        self.episode_lengths.extend((batch["step_count"].squeeze(-1)[done] + 1).tolist())
        stats = {}
        if self.episode_returns:
            stats["mean_reward"] = statistics.fmean(self.episode_returns)
            stats["mean_episode_length"] = statistics.fmean(self.episode_lengths)
        if EPISODE_LOG_KEY in batch["next"].keys():
            for name, value in batch["next", EPISODE_LOG_KEY].items(include_nested=True, leaves_only=True):
                value = value[~value.isnan()]
                if value.numel():
                    stats[f"log/{name}"] = float(value.mean())
        return stats

    def _log(self, stats, num_steps, collect_time, learn_time, start_time, start_iteration, end_iteration) -> None:
        fps = num_steps / (collect_time + learn_time)
        std = self.noise_std()
        if self.writer is not None:
            step = self.iteration
            for key in ("surrogate", "value_function", "entropy", "kl", "grad_norm"):
                self.writer.add_scalar(f"Loss/{key}", stats[key], step)
            self.writer.add_scalar("Loss/learning_rate", self.learning_rate, step)
            self.writer.add_scalar("Policy/mean_noise_std", std, step)
            self.writer.add_scalar("Perf/total_fps", fps, step)
            self.writer.add_scalar("Perf/collection time", collect_time, step)
            self.writer.add_scalar("Perf/learning_time", learn_time, step)
            self.writer.add_scalar("Perf/policy_lag", stats["policy_lag"], step)
            if self.distributed is not None:
                self.writer.add_scalar("Perf/communication_time", self.communication_time, step)
            if "mean_reward" in stats:
                self.writer.add_scalar("Train/mean_reward", stats["mean_reward"], step)
                self.writer.add_scalar("Train/mean_episode_length", stats["mean_episode_length"], step)
            for key, value in stats.items():
                if key.startswith("log/"):
                    self.writer.add_scalar(key[4:], value, step)
        if self.distributed is not None and not self.distributed.is_main:
            return  # rank 0 speaks for all
        elapsed = time.perf_counter() - start_time
        done_iterations = self.iteration - start_iteration
        eta = elapsed / done_iterations * (end_iteration - self.iteration)
        communication = f", of which all-reduce {self.communication_time:.3f}s" if self.distributed else ""
        reward = f"{stats['mean_reward']:9.2f}" if "mean_reward" in stats else "      n/a"
        length = f"{stats['mean_episode_length']:7.1f}" if "mean_episode_length" in stats else "    n/a"
        print(
            f"[torchrl] it {self.iteration:5d}/{end_iteration} | {fps:8.0f} steps/s "
            f"(collect {collect_time:.2f}s, learn {learn_time:.2f}s{communication}) | "
            f"return {reward} | ep len {length} | "
            f"value {stats['value_function']:.4f} | surrogate {stats['surrogate']:+.4f} | "
            f"entropy {stats['entropy']:.3f} | kl {stats['kl']:.4f} | lag {stats['policy_lag']:.1f} | "
            f"lr {self.learning_rate:.1e} | ETA {eta:6.0f}s",
            flush=True,
        )

    def noise_std(self) -> float:
        """Mean standard deviation of the Gaussian action noise."""
        return float(noise_std(self.actor).mean())

    def state_dict(self) -> dict:
        return {
            "actor": self.actor.state_dict(),
            "critic": self.critic.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "learning_rate": self.learning_rate,
            "iteration": self.iteration,
            "rng_state": torch.get_rng_state(),
            # the config travels as YAML text, so that loading stays weights_only
            "config": yaml.safe_dump(self.cfg.to_dict(), sort_keys=False),
        }

    def load(self, path: str) -> None:
        """Restores networks, optimizer, learning rate, iteration counter and RNG state from a checkpoint.

        Raises:
            ValueError: the checkpoint cannot be read or was trained with other networks or sizes.
        """
        state = load_checkpoint(path, map_location=self.train_device)
        try:
            self.actor.load_state_dict(state["actor"])
            self.critic.load_state_dict(state["critic"])
            self.optimizer.load_state_dict(state["optimizer"])
        except (RuntimeError, KeyError, ValueError) as exc:
            raise ValueError(
                f"Checkpoint {path} does not fit this task and agent (different observation/action sizes or "
                f"networks): {str(exc).splitlines()[0]}"
            ) from exc
        self.lr.fill_(float(state["learning_rate"]))
        for group in self.optimizer.param_groups:
            group["lr"] = self.lr
        self.iteration = state["iteration"]
        torch.set_rng_state(state["rng_state"].cpu())

    def save(self, path: str) -> None:
        save_checkpoint(self.state_dict(), path)
