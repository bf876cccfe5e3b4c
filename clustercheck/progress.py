"""The live progress line on stderr: which check, which node, done/total, elapsed and time left (the mean
duration of the checks done so far times those left). Under repetition (--repeat N, --duration T) it shows
the repetition, the item within it and the time left: to the deadline, or the repetitions still to run. On a terminal a daemon thread rewrites the line once
a second (elapsed keeps moving during a long check) and the line ends when the item does; off a terminal
(CI logs) one plain line per item, no carriage returns."""

from __future__ import annotations

import io
import os
import sys
import threading
import time
from typing import Any, Callable, TextIO, cast

CLEAR = "\x1b[K"  # clear to the end of the line: a shorter line leaves nothing of the longer one before it


class Progress:
    def __init__(self, total: int, stream: TextIO | None = None, interval: float = 1.0,
                 stopped: Callable[[], bool] = lambda: False, *, per_repetition: int | None = None,
                 deadline: float | None = None) -> None:
        """`total` items in all (for --duration: one repetition's); `per_repetition` items in each
        repetition of a repeated run; `deadline` (time.monotonic()) the end of a --duration run."""
        self.total, self.done, self.t0 = total, 0, time.monotonic()
        self.per_repetition, self.deadline = per_repetition, deadline
        self._stream, self.interval, self.stopped = stream, interval, stopped
        self._current: tuple[str, str | None, float] | None = None  # check, node, when it started
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self.detail: Callable[[], str] = lambda: ""  # where the running task stands, from its ranks

    @property
    def stream(self) -> TextIO:
        if self._stream is None:  # the terminal itself, not fd 2: pytest's fd capture redirects that per item
            self._stream = os.fdopen(os.dup(sys.stderr.fileno()), "w") if _has_fd(sys.stderr) else sys.stderr
        return self._stream

    @property
    def live(self) -> bool:
        return self.stream.isatty()

    def line(self, check_id: str, where: str | None, started: float | None = None) -> str:
        now = time.monotonic()
        elapsed = now - self.t0
        on = f" on {where}" if where else ""
        this = f" (this {clock(now - started)})" if started is not None else ""
        detail = self.detail() if started is not None else ""
        step = f": {detail}" if detail else ""
        return f"clustercheck [{self._count()}] {check_id}{on}{step}, elapsed {clock(elapsed)}{this}{self._left(now)}"

    def _count(self) -> str:
        n = self.per_repetition
        if not n:
            return f"{self.done + 1}/{self.total}"
        repetition, item = divmod(self.done, n)
        of = "" if self.deadline is not None else f"/{max(1, self.total // n)}"
        return f"repetition {repetition + 1}{of}, {item + 1}/{n}"

    def _left(self, now: float) -> str:
        if self.deadline is not None:  # --duration: the deadline, never a count that runs past it
            left = self.deadline - now
            return f", {clock(left)} left" if left > 0 else ", time is up: finishing this repetition"
        if not self.done:
            return ""
        return f", about {clock((now - self.t0) / self.done * max(0, self.total - self.done))} left"

    def start(self, check_id: str, where: str | None) -> None:
        if not self.live:
            self._write(self.line(check_id, where) + "\n")
            return
        with self._lock:
            self._current = (check_id, where, time.monotonic())
        self._redraw()
        if self._thread is None:
            self._thread = threading.Thread(target=self._tick, name="clustercheck-progress", daemon=True)
            self._thread.start()

    def finished_one(self) -> None:
        with self._lock:
            if self._current is not None:  # end the live line where it stands
                self._write_locked("\r" + self._render(self._current) + CLEAR + "\n")
                self._current = None
            self.done += 1

    def stop(self) -> None:
        """End the thread (it sleeps on an event: stopping wakes it at once)."""
        self.stopped = lambda: True
        self._wake.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _tick(self) -> None:
        while not self._wake.wait(self.interval):  # sleeps: no GIL taken between redraws
            if self.stopped():  # interrupted: teardown will not come, and the summary owns the terminal now
                return
            self._redraw()

    def _redraw(self) -> None:
        with self._lock:
            if self._current is not None:
                self._write_locked("\r" + self._render(self._current) + CLEAR)

    def _render(self, current: tuple[str, str | None, float]) -> str:
        return self.line(*current)

    def _write(self, text: str) -> None:
        with self._lock:
            self._write_locked(text)

    def _write_locked(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):  # the terminal went away: progress is not worth failing a run for
            pass


def _has_fd(stream: TextIO) -> bool:
    try:
        stream.fileno()
    except (OSError, ValueError, AttributeError):
        return False
    return True


def clock(seconds: float) -> str:
    m, s = divmod(max(0, int(seconds)), 60)
    return f"{m // 60}:{m % 60:02d}:{s:02d}" if m >= 60 else f"{m}:{s:02d}"


class ReporterLines(io.TextIOBase):
    """A text stream that hands whole lines to pytest's terminal reporter (which starts each on a line of
    its own, after any dots), for the progress lines of a batch log: no carriage return, no escape code."""

    def __init__(self, reporter: Any) -> None:
        self.reporter = reporter
        self._pending = ""

    def write(self, text: str) -> int:
        self._pending += text
        *lines, self._pending = self._pending.split("\n")
        for line in lines:
            shown = self.reporter.currentfspath
            self.reporter.write_line(line)
            self.reporter.currentfspath = shown  # the dots go on below it, without the suite's path again
        return len(text)

    def flush(self) -> None:
        self.reporter.flush()

    def isatty(self) -> bool:
        return False


def for_run(items: int, repeat: int | None, repeating: bool, duration: float | None, reporter: Any) -> Progress:
    """The live progress of a run of `items` items: a line kept up to date on a terminal; off one (a batch
    log) a line per item, where pytest's own lines go, whole, so that a log never reads "Fclustercheck [2/3]"."""
    log = ReporterLines(reporter) if reporter is not None and not sys.stderr.isatty() else None
    return Progress(items * (repeat or 1), cast("TextIO | None", log), per_repetition=items if repeating else None,
                    deadline=time.monotonic() + duration if duration else None)
