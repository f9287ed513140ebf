"""Collection: torchrl's multi-process collectors, whose workers run Isaac Lab and the policy, as one context
manager that yields batches; a watchdog over the workers, the weight sync, and a shutdown that always ends them."""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Callable, Iterator

import torch
from tensordict import TensorDictBase
from torchrl.collectors import Collector, MultiAsyncCollector, MultiSyncCollector
from torchrl.weight_update import MultiProcessWeightSyncScheme

from ..agents.torchrl_cfg import TorchRLRunnerCfg
from ..envs import IsaacLabEnvFactory
from ..recurrent import ROLLOUT_START_KEY, fold_states
from .compilation import CallerSafeCudaGraph
from .safety import CollectorWatchdog, WorkerFailure, init_worker


class Collection:
    """The collector workers of a training run.

    Use it as a context manager and iterate over it for batches of all environments' rollouts; call
    :meth:`sync_weights` after each update. On exit the workers are shut down, and killed if they do not stop
    within ``cfg.collector.shutdown_timeout_s`` (at once after a second Ctrl-C). Batches are laid out with
    ``compact_obs=True``: root observations only, and the critic's true next observations under
    ``("next", "final_obs")`` (see :class:`isaaclab_torchrl.envs.IsaacLabEnv`).

    Args:
        cfg: The runner configuration (its ``collector`` section, ``num_steps_per_env`` and devices are read).
        env_factories: One factory per worker.
        policy: The learner's collection policy: its weights are the ones sent to the workers.
        policy_factory: What builds each worker's own copy of the policy (the learner's ``policy_factory``).
        every_state: Store a recurrent policy's state at every step (a learner that reads them all); by default the
            batches hold only the state each rollout starts from (see :class:`CompactCollector`).

    Raises (while iterating):
        WorkerFailure: a worker died, or no batch (or weight acknowledgement) came within the timeout.
    """

    def __init__(
        self,
        cfg: TorchRLRunnerCfg,
        env_factories: list[IsaacLabEnvFactory],
        policy: torch.nn.Module,
        policy_factory: Callable[[], torch.nn.Module],
        every_state: bool = False,
    ):
        self.cfg = cfg
        self.every_state = every_state
        self.env_factories = env_factories
        self.policy = policy
        self.policy_factory = policy_factory
        self.policy_version = 0
        """Weight syncs so far: the version of the policy the workers act with after the next one lands."""
        self.wait_time = 0.0
        """Seconds the last batch was waited for."""
        self._collector = None
        self._watchdog = None

    def __enter__(self) -> Collection:
        self._collector = self._make_collector()
        collector_cfg = self.cfg.collector
        self._watchdog = CollectorWatchdog(
            self._collector.procs, collector_cfg.first_batch_timeout_s, collector_cfg.batch_timeout_s
        )
        workers = ", ".join(f"{index} (pid {process.pid})" for index, process in enumerate(self._collector.procs))
        print(f"[torchrl] collector workers: {workers}", flush=True)
        return self

    def __iter__(self) -> Iterator[TensorDictBase]:
        """Batches of ``num_envs x num_steps_per_env`` steps, whatever the number of workers and the mode: an
        asynchronous collector delivers one worker's rollout at a time, so as many rollouts as there are workers
        are joined into one batch (a fast worker may deliver two of them)."""
        rollouts = iter(self._collector)
        rollouts_per_batch = 1 if self.cfg.collector.sync else len(self.env_factories)
        while True:
            start = time.perf_counter()
            parts = [self._next_rollout(rollouts) for _ in range(rollouts_per_batch)]
            self.wait_time = time.perf_counter() - start
            yield parts[0] if len(parts) == 1 else torch.cat(parts, dim=0)

    def _next_rollout(self, rollouts: Iterator[TensorDictBase]) -> TensorDictBase:
        rollout = self._watchdog.wait_for("batch", lambda: next(rollouts))
        if rollout.device is not None and rollout.device.type == "cuda":
            # an asynchronous collector clones the worker's CUDA buffer on this stream and at once lets the worker
            # collect into it again: the copy must be complete before that worker can finish its next rollout
            torch.cuda.current_stream(rollout.device).synchronize()
        self._watchdog.batch_received()
        return rollout

    def sync_weights(self) -> None:
        """Sends the policy's current weights (and observation statistics) to the workers."""
        self.policy_version += 1
        # the workers acknowledge the weights (torchrl waits for them without a timeout): a hung worker is caught here
        self._watchdog.wait_for("acknowledgement of the new weights", self._collector.update_policy_weights_)

    def policy_lag(self, batch: TensorDictBase) -> float:
        """Mean number of weight updates between the policy that acted and the one that learns from ``batch``.

        A step's version tag is written with the observation of the step before, so the first step of a rollout
        carries the previous rollout's tag; it is left out.
        """
        acting_versions = batch["policy_version"][..., 1:].float()
        return float(self.policy_version - 1 - acting_versions.mean())

    def __exit__(self, exc_type, exc, traceback) -> None:
        if self._watchdog is not None:
            self._watchdog.stop()
            # a second Ctrl-C: no waiting for the workers' rollouts; a failed worker: the others are not waited for
            # either (nothing of theirs is needed, and a worker in the middle of a rollout would delay the report)
            if exc_type is KeyboardInterrupt or (exc_type is not None and issubclass(exc_type, WorkerFailure)):
                self._watchdog.kill_workers()
        processes = list(getattr(self._collector, "procs", []))
        timeout = self.cfg.collector.shutdown_timeout_s
        with contextlib.suppress(Exception):  # workers that died or were killed cannot answer
            self._collector.shutdown(timeout=timeout, raise_on_error=False)
        for process in processes:
            with contextlib.suppress(Exception):
                process.join(timeout=timeout)
                if process.is_alive():
                    process.kill()
                    process.join(timeout=5)
        self._collector = None

    def rollout_hook(self) -> PublishRollout:
        """What each worker runs on a finished rollout before handing it to the learner."""
        return PublishRollout()

    def _make_collector(self) -> MultiSyncCollector | MultiAsyncCollector:
        cfg = self.cfg
        sync = cfg.collector.sync
        frames_per_worker = [factory.num_envs * cfg.num_steps_per_env for factory in self.env_factories]
        # on a GPU the batches stay there; the hand-over rules keep them intact: no torchrl streams (below), the
        # worker's wait in PublishRollout, the learner's wait in _next_rollout. Without them a CUDA-stored rollout can
        # be read before it is written, or written while it is read; benchmarks/storage_proof.py checks every batch
        storing_device = cfg.collector.storing_device or cfg.device
        collector_class = MultiSyncCollector if sync else MultiAsyncCollector
        on_cuda = torch.device(cfg.device).type == "cuda"
        return collector_class(
            create_env_fn=self.env_factories,
            policy=self.policy,
            policy_factory=self.policy_factory,
            weight_sync_schemes={"policy": MultiProcessWeightSyncScheme()},
            frames_per_batch=sum(frames_per_worker) if sync else frames_per_worker[0],
            total_frames=-1,
            device=cfg.device,
            storing_device=storing_device,
            compact_obs=True,
            cudagraph_policy=cfg.collector.cudagraph_policy,
            track_policy_version=True,
            auto_register_policy_transforms=True,
            collector_class=functools.partial(
                CompactCollector if sync else AsyncCompactCollector, every_state=self.every_state
            ),
            init_fn=init_worker,
            post_collect_hook=self.rollout_hook(),
            # the rollout stays on the stream Isaac Lab steps on (torchrl's own streams do not wait for the
            # simulator's); the hook above orders the hand-over instead
            no_cuda_sync=on_cuda,
            **({"cat_results": "stack"} if sync else {}),
        )


class CompactCollector(Collector):
    """torchrl's collector in each worker, whose rollout buffer leaves out every ``("next", ...)`` key that
    ``compact_obs`` drops, the recurrent state's included, stores a recurrent policy's state once per rollout, and
    whose graphed policy imports no inductor.

    Args:
        every_state: Store the recurrent state of every step instead of the one each rollout starts from.
        *args, **kwargs: torchrl's :class:`~torchrl.collectors.Collector`'s.

    Proposed upstream changes (torchrl 0.14.1):

    * ``Collector._maybe_make_final_rollout``: the buffer is built from the env's keys without the compact ones, and
      the policy's output keys are added to it afterwards; a recurrent policy's next state
      (``("next", "actor_rnn_h")``, ...) is one of them, so the buffer holds it although no step writes it (every
      step's data drops it): zeros carried to the learner. Dropping the compact keys once the buffer is complete
      takes them out: for ANYmal-D's LSTM 256 (actor and critic) 4,096 of 10,879 bytes per env step
      (``docs/benchmarks.md``).
    * The recurrent state entering each step (``actor_rnn_h``, ...): training in recurrent mode reads it at a
      trajectory slice's first step only (at an episode start the state is zero), so the buffer holds the state
      each rollout starts from, under :data:`~isaaclab_torchrl.recurrent.ROLLOUT_START_KEY`, folded across the
      rollout's steps (:func:`~isaaclab_torchrl.recurrent.fold_states`; the bytes saved are in
      ``docs/benchmarks.md``). Upstream, an option to store the recurrent state at the rollout's first step only.
    * ``cudagraph_policy``: before every call of the graphed policy the collector calls
      ``torch.compiler.cudagraph_mark_step_begin()``, which marks a step of inductor's CUDA graph trees (for a
      compiled policy) and imports inductor the first time (~2.5 s of each worker's start on the H200); tensordict's
      ``CudaGraphModule`` does not use those trees. Here the collector wraps the policy in a ``CudaGraphModule``
      itself (:class:`~isaaclab_torchrl.runners.compilation.CallerSafeCudaGraph`, which leaves the collector's step
      data its own tensors) and does not mark steps. The module replays into a fresh clone, as torchrl clones
      a graphed policy's outputs (:class:`~isaaclab_torchrl.models.CollectionPolicy` returns a new tensordict).
    """

    def __init__(self, *args, every_state: bool = False, **kwargs):
        self._every_state = every_state
        super().__init__(*args, **kwargs)

    def _read_compile_kwargs(self, compile_policy, cudagraph_policy) -> None:
        super()._read_compile_kwargs(compile_policy, cudagraph_policy)
        self._graph_kwargs = self.cudagraphed_policy_kwargs if self.cudagraphed_policy else None
        self.cudagraphed_policy = False

    @property
    def _wrapped_policy(self):
        if self._wrapped_policy_maybe_compiled is None and self._graph_kwargs is not None:
            policy, kwargs = self._wrapped_policy_uncompiled, self._graph_kwargs
            self._wrapped_policy_maybe_compiled = CallerSafeCudaGraph(
                policy, in_keys=[], out_keys=[], device=self.policy_device, **kwargs
            )
        return Collector._wrapped_policy.fget(self)

    @_wrapped_policy.setter
    def _wrapped_policy(self, value) -> None:
        Collector._wrapped_policy.fset(self, value)

    @property
    def _state_keys(self) -> list:
        """The recurrent state entering a step: the root key of each next state the policy writes, unless every
        step's is stored."""
        if self._every_state:
            return []
        next_keys = [key for key in self._policy_output_keys if isinstance(key, tuple) and key[0] == "next"]
        return [key[1] if len(key) == 2 else key[1:] for key in next_keys]

    def _maybe_make_final_rollout(self, make_rollout: bool) -> None:
        super()._maybe_make_final_rollout(make_rollout)
        if make_rollout and self._compact_next_keys:
            self._final_rollout = self._final_rollout.exclude(*self._compact_next_keys)
        if make_rollout and self._state_keys:
            first = fold_states(self._final_rollout[..., 0].select(*self._state_keys), self.frames_per_batch)
            self._final_rollout = self._final_rollout.exclude(*self._state_keys)
            self._final_rollout.set(ROLLOUT_START_KEY, first)

    def rollout(self) -> TensorDictBase:
        keys = self._state_keys
        first = self._carrier.select(*keys).clone() if keys else None
        rollout = super().rollout()
        if first is not None:
            folded = fold_states(first, rollout.shape[-1]).to(rollout.device)
            if ROLLOUT_START_KEY in rollout.keys():  # the shared buffer: written in place
                rollout.get(ROLLOUT_START_KEY).copy_(folded)
            else:
                rollout = rollout.exclude(*keys).set(ROLLOUT_START_KEY, folded)
        return rollout


class AsyncCompactCollector(CompactCollector):
    """:class:`CompactCollector` without trajectory ids, for asynchronous collection.

    Nothing reads the ids, and torchrl 0.14.1 numbers each new trajectory from a counter shared by the workers: on
    every step with a finished episode, two host syncs (``any`` and ``sum`` of the done mask), a cross-process lock
    and a copy to the device. torchrl's ``MultiSyncCollector`` counts a batch's frames by the ids (proposed upstream
    change: by the batch's size), so synchronous workers keep them.
    """

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("track_traj_ids", False)
        super().__init__(*args, **kwargs)


class PublishRollout:
    """A worker's last step of each rollout before the learner may read it (torchrl's ``post_collect_hook``).

    A CUDA rollout is written into the buffer shared with the learner by kernels that may still be queued when
    torchrl signals the learner; the worker waits for them here.
    """

    def __call__(self, rollout: TensorDictBase) -> None:
        if rollout.device is not None and rollout.device.type == "cuda":
            torch.cuda.current_stream(rollout.device).synchronize()
