"""What keeps a training run safe when something goes wrong: a watchdog over the collector workers (a worker
that dies, a batch that never comes) and the handling of SIGINT/SIGTERM (stop after the current update)."""

from __future__ import annotations

import contextlib
import ctypes
import signal
import sys
import threading
import time


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
    shuts the workers down), so workers ignore SIGINT. And a worker dies with its main process, even one killed
    with SIGKILL (out of memory, a cluster scheduler), instead of living on as an orphan simulator.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if sys.platform == "linux":
        PR_SET_PDEATHSIG = 1
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


class CollectorWatchdog:
    """Watches the collector's worker processes from a thread of the main process.

    A worker that dies is recorded with its exit status; when the main process waits longer than the timeout
    for a batch, the watchdog records that and kills the workers. Either way it then raises
    :class:`WorkerFailure` in the main thread (through SIGUSR1, which also ends a blocking wait, e.g. a weight
    sync with a dead worker), wherever the main thread is. Create it in the main thread.

    Args:
        processes: The collector's worker processes.
        first_batch_timeout: Seconds the first batch may take (the workers start their simulations first).
        batch_timeout: Seconds any later batch may take.
    """

    POLL_INTERVAL_S = 0.5
    """How often the workers are looked at: a failure is noticed within about this time."""

    def __init__(self, processes, first_batch_timeout: float, batch_timeout: float):
        self.processes = list(processes)
        self.batch_timeout = batch_timeout
        self.reason: str | None = None
        self._reported = False
        self._timeout = first_batch_timeout
        self._deadline: float | None = None
        self._stop = threading.Event()
        self._main_thread = threading.main_thread().ident
        self._previous_handler = signal.signal(signal.SIGUSR1, self._raise_failure)
        self._thread = threading.Thread(target=self._watch, name="collector-watchdog", daemon=True)
        self._thread.start()

    def _raise_failure(self, signum, frame) -> None:
        if not self._reported:  # the main thread may have met the failure first, through torchrl
            raise self.failure()

    def expect_batch(self) -> None:
        """The main process starts waiting for a batch: the timeout runs from now."""
        self._deadline = time.monotonic() + self._timeout

    def batch_received(self) -> None:
        self._timeout = self.batch_timeout
        self._deadline = None

    def _watch(self) -> None:
        while not self._stop.wait(self.POLL_INTERVAL_S):
            for index, process in enumerate(self.processes):
                try:
                    alive, exitcode = process.is_alive(), process.exitcode
                except ValueError:  # closed by torchrl after it saw a failure
                    continue
                if not alive and exitcode != 0:
                    self.reason = f"collector worker {index} (pid {process.pid}) {describe_exit(exitcode)}"
                    self._alert()
                    return
            deadline = self._deadline
            if deadline is not None and time.monotonic() > deadline:
                self.reason = f"the collector workers delivered no batch within {self._timeout:g} s (a hung worker?)"
                self.kill_workers()
                self._alert()
                return

    def _alert(self) -> None:
        if not self._stop.is_set():
            signal.pthread_kill(self._main_thread, signal.SIGUSR1)

    def kill_workers(self) -> None:
        for process in self.processes:
            with contextlib.suppress(Exception):
                if process.is_alive():
                    process.kill()

    def failure(self, cause: BaseException | None = None) -> WorkerFailure:
        """The error to raise for what was recorded (or for ``cause``, when nothing was)."""
        self._reported = True
        reason = self.reason or f"the collector failed: {cause}"
        return WorkerFailure(
            f"Training stopped: {reason}. Its traceback, if it raised, is printed above; the checkpoints written "
            "so far are intact."
        )

    def stop(self) -> None:
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
