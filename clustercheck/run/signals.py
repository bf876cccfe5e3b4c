"""SIGINT and SIGTERM during a run. The first signal stops the run the way Ctrl-C does (pytest unwinds,
the record gets its end line and the reports are written, INCOMPLETE); SIGTERM is what Slurm and
Kubernetes send on a time-out or preemption, so it is treated the same. A second signal, or any signal
while the run is already finishing, never interrupts the writing of the record: it kills the ranks at
once so that what is left takes a moment, and the record stays whole."""

from __future__ import annotations

import os
import signal
import sys
import threading
from contextlib import contextmanager
from types import FrameType
from typing import Any, Callable, Iterator, TypeVar

STOPPING = (signal.SIGINT, signal.SIGTERM)
T = TypeVar("T")
_OWNED: list[bool] = []  # once `clustercheck run` owns its process (entry()): finished() may keep handlers


class Stopper:
    def __init__(self, kill_ranks: Callable[[], None]) -> None:
        self.kill_ranks = kill_ranks
        self.received: list[str] = []
        self.finishing = False
        self._previous: dict[int, Any] = {}

    @property
    def first(self) -> str | None:
        return self.received[0] if self.received else None

    def install(self) -> None:
        for sig in STOPPING:
            if not ignored(sig):
                self._previous[sig] = signal.signal(sig, self._handle)

    def restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.received.append(signal.Signals(signum).name)
        if len(self.received) == 1 and not self.finishing:
            raise KeyboardInterrupt(f"clustercheck: {self.received[0]}: stopping; the reports say INCOMPLETE")
        self.kill_ranks()  # a second signal: end the ranks now; the record is still written whole


@contextmanager
def the_run_from_its_first_line(running: bool) -> Iterator[None]:
    """cli.entry's, for `clustercheck run` (`running`): SIGTERM stops it as Ctrl-C does from the first line,
    and a Ctrl-C that reaches entry() is the one INCOMPLETE line and exit 2 (SystemExit). Argument parsing
    (argparse's parser imports the subcommands' modules: 0.2 s) came before any handler: a Ctrl-C there was
    a traceback, a SIGTERM death by the signal. Other commands end by a signal as ever. The handler is
    never restored: entry() ends the process (os._exit)."""
    if not running:
        yield
        return
    _OWNED.append(True)
    signal.signal(signal.SIGTERM, _raising("while the run was starting"))
    try:
        yield
    except KeyboardInterrupt as exc:
        from clustercheck.exitcodes import Exit

        print(not_started(stopped_by(exc)), file=sys.stderr)
        finished(Exit.INCOMPLETE, record=False)
        raise SystemExit(Exit.INCOMPLETE) from None


class _Said:
    """The handler of SIGINT and SIGTERM once the run's code is known: one line, and nothing else."""

    def __init__(self, code: int, record: bool) -> None:
        self.code, self.record = int(code), record

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        line = after_the_run(signal.Signals(signum).name, self.code, self.record)
        try:
            print(line, file=sys.stderr, flush=True)
        except (RuntimeError, OSError, ValueError):  # the signal cut a write to stderr in two (reentrant call)
            try:
                os.write(2, f"{line}\n".encode())
            except OSError:
                pass


def finished(code: int, record: bool) -> None:
    """The run's exit code is known (pytest.main returned; `record`: its session ended, its record and
    reports are written): from here to the process's exit, SIGINT and SIGTERM say so in one line and leave
    the code (were: 143 or 130 and nothing said, for a run that had passed). Only where `clustercheck run`
    owns its process (entry()): the handlers stay until it exits; a run inside a test leaves them alone."""
    if _OWNED and threading.current_thread() is threading.main_thread():
        for sig in STOPPING:
            if not ignored(sig):
                signal.signal(sig, _Said(code, record))


def ignored(sig: int) -> bool:
    """Whether `sig` is SIGINT and this process inherited it ignored (SIG_IGN: a `cmd &` job of a script, or
    nohup's): the shell's Ctrl-C is then meant for others, and it was ignored while the run started (Python
    leaves an ignored SIGINT so), so it is ignored throughout, never stopping the run later on. SIGTERM is
    the scheduler's, and always stops the run."""
    return sig == signal.SIGINT and signal.getsignal(signal.SIGINT) is signal.SIG_IGN


def after_the_run(why: str, code: int, record: bool) -> str:
    if record:
        return f"clustercheck: {why} after the run had finished: its record and reports stand (exit {code})"
    return f"clustercheck: {why} after the run had ended: its exit code stands (exit {code})"


def _raising(during: str) -> Callable[[int, FrameType | None], None]:
    def stop(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt(f"clustercheck: {signal.Signals(signum).name} {during}")

    return stop


@contextmanager
def term_stops_like_ctrl_c(during: str) -> Iterator[None]:
    """Before pytest's own handling (while the node agents are awaited, or objects made for them), SIGTERM
    ends the wait as Ctrl-C does, so that what was opened or made is closed and the run says why it stopped
    instead of dying by the signal."""
    previous = signal.signal(signal.SIGTERM, _raising(during))
    try:
        yield
    finally:
        if not isinstance(signal.getsignal(signal.SIGTERM), _Said):  # finished(): it stays to the exit
            signal.signal(signal.SIGTERM, previous)


@contextmanager
def deferred() -> Iterator[None]:
    """SIGINT and SIGTERM wait until the block is done, then reach the handlers they would have reached.
    For what must not be cut in two (an object the API made but whose answer is not yet read would never
    be deleted). Blocking the signals with pthread_sigmask is not enough: the kernel hands them to any
    thread that does not block them (the store's), and Python then runs the handler in this thread."""
    if threading.current_thread() is not threading.main_thread():
        yield  # handlers run in the main thread only: nothing here to defer
        return
    arrived: list[int] = []
    previous = {sig: signal.signal(sig, lambda signum, frame: arrived.append(signum)) for sig in STOPPING}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for signum in dict.fromkeys(arrived):
            signal.raise_signal(signum)


def stopped_by(exc: KeyboardInterrupt) -> str:
    """What stopped the run: the signal a handler here named, or "interrupted" for Python's own Ctrl-C."""
    return str(exc).removeprefix("clustercheck: ") or "interrupted"


def not_started(why: str) -> str:
    """The one line for a run stopped by Ctrl-C or SIGTERM before any check ran (no record to say it in)."""
    return f"clustercheck: INCOMPLETE: {why}: stopped before any check ran; nothing was measured and no node is cleared"


def interruptible(call: Callable[[], T]) -> T:
    """`call()`, a C call that may block for seconds (c10d's TCPStore client retries its connect inside
    C++, 5-10 s against an address nobody listens at), run in a daemon thread while the main thread waits
    in Python: a signal's handler runs at once, not when the call returns. A handler that raises leaves
    the call to end with the process (an agent SIGTERMed while it tries the controller: hosts.close)."""
    done: list[tuple[bool, Any]] = []

    def run() -> None:
        try:
            done.append((True, call()))
        except BaseException as exc:
            done.append((False, exc))

    thread = threading.Thread(target=run, name="clustercheck-interruptible", daemon=True)
    thread.start()
    while thread.is_alive():
        thread.join(0.1)
    ok, value = done[0]
    if not ok:
        raise value
    return value
