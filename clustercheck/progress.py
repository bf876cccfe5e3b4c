"""The live progress line on stderr: which check, which node, done/total, elapsed and time left (the mean
duration of the checks done so far times those left)."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    def __init__(self, total: int, stream: TextIO | None = None) -> None:
        self.total, self.done, self.t0 = total, 0, time.monotonic()
        self.stream = stream or sys.stderr

    def line(self, check_id: str, where: str | None) -> str:
        elapsed = time.monotonic() - self.t0
        left = f", about {clock(elapsed / self.done * (self.total - self.done))} left" if self.done else ""
        on = f" on {where}" if where else ""
        return f"clustercheck [{self.done + 1}/{self.total}] {check_id}{on}, elapsed {clock(elapsed)}{left}"

    def start(self, check_id: str, where: str | None) -> None:
        self.stream.write(self.line(check_id, where) + "\n")
        self.stream.flush()

    def finished_one(self) -> None:
        self.done += 1


def clock(seconds: float) -> str:
    m, s = divmod(int(seconds), 60)
    return f"{m // 60}:{m % 60:02d}:{s:02d}" if m >= 60 else f"{m}:{s:02d}"
