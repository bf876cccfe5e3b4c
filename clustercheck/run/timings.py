"""Where the seconds of a run went (`--timings`, or CLUSTERCHECK_PROFILE=1): the controller's start-up
(interpreter and imports, pytest and its plugins), collection, the platform and record, each rank pool's
start (and, per rank, its wait for the zygote it is forked from, its torch import, store connection,
process group and device), each check, and the reports. The marks cost a clock read each, so they are
taken whether or not anyone asks for them."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

ENV = "CLUSTERCHECK_PROFILE"


def process_age() -> float:
    """Seconds since this process started (Linux: /proc/self/stat's start time against /proc/uptime);
    0.0 where that cannot be read."""
    try:
        with open("/proc/self/stat", encoding="ascii") as fh:
            started = int(fh.read().rpartition(")")[2].split()[19]) / os.sysconf("SC_CLK_TCK")
        with open("/proc/uptime", encoding="ascii") as fh:
            return max(0.0, float(fh.read().split()[0]) - started)
    except (OSError, ValueError, IndexError):
        return 0.0


@dataclass
class Timings:
    """Marks on one clock, the first of them the process's own start."""

    start: float = field(default_factory=lambda: time.monotonic() - process_age())
    marks: list[tuple[str, float]] = field(default_factory=list)
    pools: list[tuple[int, float, list[Mapping[str, Any]]]] = field(default_factory=list)  # number, seconds, ranks
    checks: dict[str, float] = field(default_factory=dict)  # check id -> seconds its items took

    def mark(self, name: str) -> None:
        """`name` ended now; the first mark of a name stands (a repeated run marks once)."""
        if not any(n == name for n, _ in self.marks):
            self.marks.append((name, time.monotonic()))

    def pool(self, number: int, seconds: float, ranks: Sequence[Mapping[str, Any]]) -> None:
        self.pools.append((number, seconds, list(ranks)))

    def check(self, check_id: str, seconds: float) -> None:
        self.checks[check_id] = self.checks.get(check_id, 0.0) + seconds

    def lines(self) -> list[str]:
        """The story of the run in seconds: each phase from the mark before it, then pools and checks."""
        out = []
        last = self.start
        for name, at in self.marks:
            out.append(f"  {at - last:8.3f} s  {name}")
            last = at
        for number, seconds, ranks in self.pools:
            out.append(f"  {seconds:8.3f} s  pool {number} started ({len(ranks)} rank(s)){_rank_parts(ranks)}")
        for check, seconds in self.checks.items():
            out.append(f"  {seconds:8.3f} s  check {check}")
        out.append(f"  {(self.marks[-1][1] if self.marks else time.monotonic()) - self.start:8.3f} s  in all")
        return out


def _rank_parts(ranks: Sequence[Mapping[str, Any]]) -> str:
    """The slowest rank's start-up, part by part (what the pool waited for)."""
    startups = [r["startup"] for r in ranks if isinstance(r.get("startup"), dict)]
    if not startups:
        return ""
    slowest = max(startups, key=lambda s: sum(v for v in s.values() if isinstance(v, (int, float))))
    return "; slowest rank: " + ", ".join(f"{k} {v:.3f} s" for k, v in slowest.items())


TIMINGS = Timings()  # the controller's, from the moment clustercheck is imported


def wanted(flag: bool | None) -> bool:
    return bool(flag) or os.environ.get(ENV, "") not in ("", "0")
