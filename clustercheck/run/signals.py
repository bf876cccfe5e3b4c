"""SIGINT and SIGTERM during a run. The first signal stops the run the way Ctrl-C does (pytest unwinds,
the record gets its end line and the reports are written, INCOMPLETE); SIGTERM is what Slurm and
Kubernetes send on a time-out or preemption, so it is treated the same. A second signal, or any signal
while the run is already finishing, never interrupts the writing of the record: it kills the ranks at
once so that what is left takes a moment, and the record stays whole."""

from __future__ import annotations

import signal
from types import FrameType
from typing import Any, Callable

STOPPING = (signal.SIGINT, signal.SIGTERM)


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
