"""The live progress line on stderr: which check, which node, done/total, elapsed and time left (the mean
duration of the checks done so far times those left). On a terminal a daemon thread rewrites the line once
a second (elapsed keeps moving during a long check) and the line ends when the item does; off a terminal
(CI logs) one plain line per item, no carriage returns."""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Callable, TextIO

CLEAR = "\x1b[K"  # clear to the end of the line: a shorter line leaves nothing of the longer one before it


class Progress:
    def __init__(self, total: int, stream: TextIO | None = None, interval: float = 1.0,
                 stopped: Callable[[], bool] = lambda: False) -> None:
        self.total, self.done, self.t0 = total, 0, time.monotonic()
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
        left = f", about {clock(elapsed / self.done * (self.total - self.done))} left" if self.done else ""
        on = f" on {where}" if where else ""
        this = f" (this {clock(now - started)})" if started is not None else ""
        detail = self.detail() if started is not None else ""
        step = f": {detail}" if detail else ""
        return f"clustercheck [{self.done + 1}/{self.total}] {check_id}{on}{step}, elapsed {clock(elapsed)}{this}{left}"

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
    m, s = divmod(int(seconds), 60)
    return f"{m // 60}:{m % 60:02d}:{s:02d}" if m >= 60 else f"{m}:{s:02d}"
