"""What keeps a training run safe when something goes wrong: a watchdog over the collector workers (a worker
that dies, a batch that never comes), the handling of SIGINT/SIGTERM (stop after the current update) and the update's
guard against NaN/Inf steps."""

from __future__ import annotations

import atexit
import contextlib
import gc
import signal
import sys
import threading
import time

import torch

from ..workers import end_with_parent


class WorkerFailure(RuntimeError):
    """A collector worker died or the workers stopped delivering batches."""


class NonFiniteError(FloatingPointError):
    """NaN/Inf in the data or in the update.

    Attributes:
        parameters_unchanged: Whether the networks still hold the parameters from before the update that
            met the values (so that they can be saved as the iteration's checkpoint).
    """

    def __init__(self, message: str, parameters_unchanged: bool):
        super().__init__(message)
        self.parameters_unchanged = parameters_unchanged


class SkipNonFiniteSteps:
    """The update's NaN/Inf guard, without a host sync per minibatch: from the first minibatch whose losses or gradient
    norm are not finite, the optimizers given to it skip every step, on the device (fused Adam's ``found_inf``, the
    flag ``torch.amp.GradScaler`` sets), and :meth:`raise_if_found` reads the verdict once, after the epochs, so that
    the networks, the optimizers' moments and the learning rate stay as they were before that minibatch."""

    def __init__(self, names: list[str], device: torch.device, optimizers: list[torch.optim.Optimizer]):
        self.names = names
        self.found = torch.zeros((), device=device)
        """1.0 from the first step whose statistics were not finite on (what the optimizers read)."""
        self.bad = torch.zeros(len(names), dtype=torch.bool, device=device)
        self.applied = torch.zeros((), dtype=torch.long, device=device)
        for optimizer in optimizers:
            if not all(group.get("fused") for group in optimizer.param_groups):
                raise ValueError(f"{type(optimizer).__name__} is not fused: it would not read found_inf")
            optimizer.found_inf = self.found

    def reset(self) -> None:
        self.found.zero_()
        self.bad.zero_()
        self.applied.zero_()

    def check(self, statistics: torch.Tensor) -> torch.Tensor:
        """Marks a step whose ``statistics`` are not finite, and every later step, to be skipped; returns the flag."""
        not_finite = ~torch.isfinite(statistics)
        first = not_finite.any() & (self.found == 0)
        self.bad.copy_(torch.where(first, not_finite, self.bad))
        self.found.copy_(torch.maximum(self.found, not_finite.any().float()))
        self.applied.add_((self.found == 0).long())
        return self.found

    def raise_if_found(self, steps_per_epoch: int) -> None:
        """Raises :class:`NonFiniteError` if a step was skipped (reads the device once)."""
        if bool(self.found):
            applied = int(self.applied)
            bad = [name for name, flag in zip(self.names, self.bad.tolist(), strict=True) if flag]
            raise NonFiniteError(
                f"Non-finite {bad} in minibatch {applied + 1} (epoch {applied // steps_per_epoch + 1}) of the update; "
                "neither that gradient step nor a later one was applied.",
                parameters_unchanged=applied == 0,
            )


def describe_exit(exitcode: int | None) -> str:
    if exitcode is None:
        return "is still running"
    if exitcode < 0:
        with contextlib.suppress(ValueError):
            return f"was killed by {signal.Signals(-exitcode).name}"
        return f"was killed by signal {-exitcode}"
    return f"exited with code {exitcode}"


def init_worker() -> None:
    """Run in each collector worker at its start.

    Ctrl-C reaches the whole process group, but the main process alone decides how training stops (it then
    shuts the workers down), so workers ignore SIGINT. And a worker dies with its parent, the main process or the
    fork server (:mod:`isaaclab_torchrl.workers`, which dies with the main process), even one killed with SIGKILL
    (out of memory, a cluster scheduler), instead of living on as an orphan simulator.

    At its exit, after its environment has closed, a worker's interpreter would spend seconds (longer than
    torchrl's shutdown waits before terminating it, ``docs/benchmarks.md``) in the garbage collections of its
    module teardown, over the simulator's millions of objects: they are frozen out of them.
    """
    atexit.register(gc.freeze)  # runs after the handlers registered later (Isaac Lab's, Warp's), before the teardown
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    end_with_parent()


class CollectorWatchdog:
    """Watches the collector's worker processes from a thread of the main process.

    A worker that dies is recorded with its exit status; when the main process waits on the workers (for a batch,
    for their acknowledgement of new weights) longer than the timeout, the watchdog records that and kills the
    workers. Either way it then raises :class:`WorkerFailure` in the main thread through SIGUSR1, which also ends a
    blocking wait, wherever the main thread is; it repeats the signal until the failure has reached the caller of
    :meth:`wait_for` (or :meth:`stop`), because a library's wait may catch the first one and block again (torchrl's
    wait for weight acknowledgements logs any exception and goes on waiting). Create it in the main thread.

    Args:
        processes: The collector's worker processes.
        first_batch_timeout: Seconds the first batch may take (the workers start their simulations first).
        batch_timeout: Seconds any later wait may take.
    """

    POLL_INTERVAL_S = 0.5
    """How often the workers are looked at: a failure is noticed (and signalled again) within about this time."""

    def __init__(self, processes, first_batch_timeout: float, batch_timeout: float):
        self.processes = list(processes)
        self.batch_timeout = batch_timeout
        self.reason: str | None = None
        self._delivered = False
        self._timeout = first_batch_timeout
        self._deadline: float | None = None
        self._waiting_for = ""
        self._stop = threading.Event()
        self._main_thread = threading.main_thread().ident
        self._previous_handler = signal.signal(signal.SIGUSR1, self._raise_failure)
        self._thread = threading.Thread(target=self._watch, name="collector-watchdog", daemon=True)
        self._thread.start()

    def _raise_failure(self, signum, frame) -> None:
        if not self._delivered:
            raise self._error()

    def wait_for(self, what: str, call):
        """Runs ``call``, a wait on the workers (``what`` names it for the error), within the timeout (the first
        batch's until a batch came, then the batch timeout); returns its result.

        Raises:
            WorkerFailure: a worker died, the wait took too long, or ``call`` failed.
        """
        self._waiting_for = what
        self._deadline = time.monotonic() + self._timeout
        try:
            result = call()
        except WorkerFailure:
            self._delivered = True
            raise
        except Exception as exc:  # torchrl stops the collector when a worker dies or is killed
            raise self.failure(exc) from exc
        finally:
            self._deadline = None
        if self.reason is not None:  # signalled, but ``call`` caught the error and returned
            raise self.failure()
        return result

    def batch_received(self) -> None:
        """The first batch came: from now on every wait has the (shorter) batch timeout."""
        self._timeout = self.batch_timeout

    def _watch(self) -> None:
        while not self._stop.wait(self.POLL_INTERVAL_S):
            if self.reason is None:
                self.reason = self._look()
            if self.reason is not None and not self._delivered and not self._stop.is_set():
                signal.pthread_kill(self._main_thread, signal.SIGUSR1)

    def _look(self) -> str | None:
        """What went wrong since the last look, if anything."""
        for index, process in enumerate(self.processes):
            try:
                alive, exitcode = process.is_alive(), process.exitcode
            except ValueError:  # closed by torchrl after it saw a failure
                continue
            if not alive and exitcode != 0:
                return f"collector worker {index} (pid {process.pid}) {describe_exit(exitcode)}"
        deadline = self._deadline
        if deadline is not None and time.monotonic() > deadline:
            self.kill_workers()
            return f"the collector workers delivered no {self._waiting_for} within {self._timeout:g} s (a hung worker?)"
        return None

    def kill_workers(self) -> None:
        for process in self.processes:
            with contextlib.suppress(Exception):
                if process.is_alive():
                    process.kill()

    def failure(self, cause: BaseException | None = None) -> WorkerFailure:
        """The error to raise for what was recorded (or for ``cause``, when nothing was); the watchdog stops
        signalling it."""
        self._delivered = True
        return self._error(cause)

    def _error(self, cause: BaseException | None = None) -> WorkerFailure:
        reason = self.reason or f"the collector failed: {cause}"
        return WorkerFailure(
            f"Training stopped: {reason}. Its traceback, if it raised, is printed above; the checkpoints written "
            "so far are intact."
        )

    def stop(self) -> None:
        self._delivered = True  # a signal already on its way must not interrupt the shutdown that follows
        self._stop.set()
        self._thread.join(timeout=5)
        signal.signal(signal.SIGUSR1, self._previous_handler)


class StopSignals:
    """SIGINT/SIGTERM handling for the main process, as a context manager.

    The first signal asks training to stop at the end of the current update (:attr:`received` names it); a
    second SIGINT raises :class:`KeyboardInterrupt` at once.
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self):
        self.received: signal.Signals | None = None
        self._previous = {}

    def _handle(self, signum, frame) -> None:
        if self.received is not None:
            raise KeyboardInterrupt
        self.received = signal.Signals(signum)
        print(
            f"[torchrl] {self.received.name} received: stopping after the current update "
            "(send SIGINT again to abort at once).",
            file=sys.stderr,
            flush=True,
        )

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for signum in self.SIGNALS:
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()
