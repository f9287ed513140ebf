"""Evaluation during training (``agent.eval_interval``): the deterministic policy (the Gaussian mean, the recurrent
state carried, the observation normaliser inside) on an evaluation worker, a process with environments of its own,
while the training loop goes on.

Every ``eval_interval`` iterations the loop hands the worker a snapshot of the runner's state (a checkpoint's bytes);
the worker resets its ``eval_episodes`` environments and steps each until its first episode ends, so that every
episode started is counted to its end, long ones as short ones. One evaluation runs at a time: one that falls due
while another is still running (or waits for the worker to start) is skipped, and the loop says so. The loop polls
for results without waiting, except at the end of training, where the evaluation in progress is waited for.

torchrl's ``Evaluator`` is not used: its collector keeps its environments running from one evaluation to the next
(an episode begun under old weights ends under new ones) and counts the first ``num_trajectories`` episodes to end,
which favours short ones.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import multiprocessing
import queue
import statistics

import cloudpickle
import torch

from ..agents.torchrl_cfg import TorchRLActorCfg
from ..envs import IsaacLabEnvFactory, env_interface
from ..models import EnvInterface
from ..workers import worker_context
from .safety import describe_exit, init_worker


@dataclasses.dataclass
class EvaluationResult:
    """One evaluation of the policy of :attr:`iteration`."""

    iteration: int
    mean_reward: float
    mean_episode_length: float
    episodes: int
    checkpoint: bytes
    """The runner's state at :attr:`iteration` (what :func:`torch.save` wrote), kept for the best checkpoint."""


def evaluate_episodes(env, actor) -> tuple[list[float], list[int]]:
    """Steps all environments of ``env`` (a factory's env, with its episodes' running sums and, for a recurrent
    actor, its primers) from a reset with ``actor``'s mean action until each has finished its first episode.

    Returns:
        Each environment's return and length of its first episode.
    """
    num_envs = env.batch_size[0]
    returns = torch.zeros(num_envs, device=env.device)
    lengths = torch.zeros(num_envs, dtype=torch.long, device=env.device)
    finished = torch.zeros(num_envs, dtype=torch.bool, device=env.device)
    from torchrl.envs.utils import ExplorationType, set_exploration_type

    with torch.no_grad(), set_exploration_type(ExplorationType.DETERMINISTIC):
        td = env.reset()
        while not bool(finished.all()):
            td, next_td = env.step_and_maybe_reset(actor(td))
            ended = td["next", "done"].reshape(num_envs) & ~finished
            returns = torch.where(ended, (td["episode_reward"] + td["next", "reward"]).reshape(num_envs), returns)
            lengths = torch.where(ended, td["step_count"].reshape(num_envs) + 1, lengths)
            finished |= ended
            td = next_td
    return returns.tolist(), lengths.tolist()


def _worker(payload: bytes, requests, results) -> None:
    """The evaluation worker's process: builds its environments and actor, then evaluates each request."""
    init_worker()  # dies with its parent, ignores Ctrl-C (the training process decides), exits fast
    try:
        from torchrl.envs import InitTracker
        from torchrl.modules.utils import get_primers_from_module

        from ..models import make_actor

        factory, cfg, interface, device = cloudpickle.loads(payload)
        env = factory()
        sizes = env_interface(env)
        found, trained = (sizes.actor_obs_dim, sizes.action_dim), (interface.actor_obs_dim, interface.action_dim)
        if found != trained:
            raise ValueError(
                f"the task's play config gives the policy {found[0]} observations and {found[1]} actions, its training "
                f"config {trained[0]} and {trained[1]}"
            )
        env.append_transform(InitTracker())
        actor = make_actor(cfg, interface, device)
        if cfg.rnn_type is not None:
            env.append_transform(get_primers_from_module(actor))
        actor.eval()
        results.put(("ready",))
        while (request := requests.get()) is not None:
            iteration, checkpoint = request
            state = torch.load(io.BytesIO(checkpoint), map_location=device, weights_only=True)
            actor.load_state_dict(state["actor"])
            returns, lengths = evaluate_episodes(env, actor)
            results.put(("result", iteration, statistics.fmean(returns), statistics.fmean(lengths), len(returns)))
        env.close()
    except BaseException as exc:
        results.put(("error", f"{type(exc).__name__}: {exc}".splitlines()[0]))
        raise


class Evaluation:
    """The evaluation worker of a training run, as the training loop sees it (a context manager).

    Args:
        factory: Builds the worker's environments (the task's play config, ``eval_episodes`` environments, no random
            episode starts).
        cfg: The actor's config; its weights come with each request.
        interface: The sizes the actor reads and writes.
        device: Where the actor runs (the simulation device).
        interval: Iterations between evaluations.
        shutdown_timeout_s: Seconds the worker gets to stop when training ends, before it is killed.
    """

    def __init__(
        self,
        factory: IsaacLabEnvFactory,
        cfg: TorchRLActorCfg,
        interface: EnvInterface,
        device: str,
        interval: int,
        shutdown_timeout_s: float,
    ):
        self.interval = interval
        self.shutdown_timeout_s = shutdown_timeout_s
        self._payload = cloudpickle.dumps((factory, cfg, interface, device))
        self._process: multiprocessing.Process | None = None
        self._requests = self._results = None
        self._running: tuple[int, bytes] | None = None
        """The iteration and snapshot of the evaluation requested and not answered yet."""
        self.last_requested: int | None = None
        """The iteration of the last evaluation requested."""
        self.failed = False
        """The worker died (it was said); training goes on without evaluation."""

    def __enter__(self) -> Evaluation:
        context = worker_context()
        self._requests, self._results = context.Queue(), context.Queue()
        self._process = context.Process(
            target=_worker, args=(self._payload, self._requests, self._results), name="evaluation", daemon=True
        )
        self._process.start()
        print(f"[torchrl] evaluation worker: pid {self._process.pid}", flush=True)
        return self

    def due(self, iteration: int) -> bool:
        return not self.failed and iteration % self.interval == 0

    def trigger(self, iteration: int, snapshot) -> bool:
        """Asks for the evaluation of ``snapshot()`` (the runner's state at ``iteration``, as bytes), unless one is
        still running: then it is skipped, and said. Returns whether it was requested."""
        if self.failed:
            return False
        if self._running is not None:
            print(
                f"[torchrl] evaluation of iteration {iteration} skipped: iteration {self._running[0]}'s is still "
                "running",
                flush=True,
            )
            return False
        self._running = (iteration, snapshot())
        self._requests.put(self._running)
        self.last_requested = iteration
        return True

    @property
    def running(self) -> int | None:
        """The iteration whose evaluation was requested and has not finished, or ``None``."""
        return None if self._running is None else self._running[0]

    def poll(self, timeout: float = 0.0) -> list[EvaluationResult]:
        """The evaluations finished since the last call, waiting up to ``timeout`` seconds for the one running. A dead
        worker is reported in one line, after which evaluation is off."""
        finished = []
        while not self.failed:
            try:
                message = self._results.get(timeout=timeout) if timeout else self._results.get_nowait()
            except queue.Empty:
                if not self._process.is_alive():
                    self._fail(None)
                break
            if message[0] == "result":
                (iteration, snapshot), self._running = self._running, None
                finished.append(EvaluationResult(iteration, *message[2:], checkpoint=snapshot))
                timeout = 0.0
            elif message[0] == "error":
                self._fail(message[1])
        return finished

    def _fail(self, error: str | None) -> None:
        self._process.join(timeout=5)
        cause = f" ({error})" if error else ""
        process = self._process
        print(
            f"[torchrl] warning: the evaluation worker (pid {process.pid}) {describe_exit(process.exitcode)}{cause}: "
            "training goes on without evaluation.",
            flush=True,
        )
        self.failed, self._running = True, None

    def __exit__(self, exc_type, exc, traceback) -> None:
        process = self._process
        if process is None:
            return
        with contextlib.suppress(Exception):
            if exc_type is None and process.is_alive():
                self._requests.put(None)  # after the request running, if any: the worker ends when it is done
                process.join(timeout=self.shutdown_timeout_s)
        with contextlib.suppress(Exception):
            if process.is_alive():
                process.kill()
            process.join(timeout=5)
        for channel in (self._requests, self._results):
            with contextlib.suppress(Exception):
                channel.close()
                channel.cancel_join_thread()
        self._process = None
