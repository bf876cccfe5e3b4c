"""What an nvbandwidth run printed, as frozen data: its matrices (`Testcase`), devices and the run.

The text reader (`nvbandwidth`) and the `-j` JSON reader (`nvbandwidth_json`) both return `NvbandwidthRun`.
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass

_ARROW = re.compile(r"\(row\)\s*(<->|->|<-)")


@dataclass(frozen=True)
class Testcase:
    """One matrix (or, in SUM-only output, just its SUM) of one nvbandwidth test."""

    name: str                                    # the SUM key (host_to_device_memcpy_ce, ..._total) or Running name
    title: str | None                            # "memcpy CE CPU(row) -> GPU(column) bandwidth"
    unit: str                                    # "GB/s" or "ns" (latency tests)
    columns: tuple[str, ...]
    rows: tuple[tuple[str, tuple[float | None, ...]], ...]   # (row label, one value per column; None = N/A)
    sum: float | None                            # from the SUM line; None when the output has none
    line: int                                    # of the title (or SUM line), 1-based in the file

    @property
    def computed_sum(self) -> float | None:
        """The cells added up (N/A as 0, as nvbandwidth does); None without a matrix."""
        cells = [v for _, vs in self.rows for v in vs if v is not None]
        return round(sum(cells), 6) if self.rows else None

    @property
    def matrix(self) -> dict[str, dict[str, float | None]]:
        return {label: dict(zip(self.columns, values)) for label, values in self.rows}

    def cells(self, off_diagonal: bool = False) -> list[tuple[str, str, float | None]]:
        """(row, column, value); with off_diagonal, a GPU's copy to itself is left out."""
        return [(r, c, v) for r, vs in self.rows for c, v in zip(self.columns, vs) if not (off_diagonal and r == c)]

    @property
    def peer_to_peer(self) -> bool:
        return bool(self.title) and "GPU(row)" in (self.title or "") and "GPU(column)" in (self.title or "")

    @property
    def arrow(self) -> str:
        """The direction the title gives its rows and columns: `->`, `<-` or `<->` (`->` when it says none)."""
        m = _ARROW.search(self.title or "")
        return m.group(1) if m else "->"

    def subjects(self) -> list[tuple[str, float | None]]:
        """(subject, value) per cell a verdict judges, named the one way every report names them: `GPU3` in a
        one-row matrix (host to each GPU), `GPU0->GPU1` (the arrow as the title prints it) for a GPU pair with
        the diagonal left out, `row0->GPU3` in any other matrix."""
        if self.peer_to_peer:
            return [(f"GPU{r}{self.arrow}GPU{c}", v) for r, c, v in self.cells(off_diagonal=True)]
        if len(self.rows) == 1:
            return [(f"GPU{c}", v) for _, c, v in self.cells()]
        return [(f"row{r}{self.arrow}GPU{c}", v) for r, c, v in self.cells()]


@dataclass(frozen=True)
class Device:
    index: int
    name: str
    pci_id: str | None        # "00000009:01:00"; None before v0.6
    host: str | None          # multinode builds print "Process N (host): device M: ..."


@dataclass(frozen=True)
class NvbandwidthRun:
    format: str                               # "text", "sum-only" or "json"
    version: str | None
    cuda_runtime: str | None
    driver: str | None
    devices: tuple[Device, ...]
    testcases: tuple[Testcase, ...]
    ran: tuple[str, ...]                      # every `Running X.` name, in order
    waived: int
    failure: str | None                       # "line N: <text>" for a failed or cut-off run
    failure_line: int | None
    notes: tuple[str, ...]

    def testcase(self, name: str) -> Testcase | None:
        return next((t for t in self.testcases if t.name == name), None)

    def summary(self) -> dict[str, dict[str, float | None]]:
        """Per testcase: the tool's sum (None without a SUM line), the computed sum, and the min, max and median
        cell (off the diagonal for GPU pairs; None without a matrix)."""
        out: dict[str, dict[str, float | None]] = {}
        for t in self.testcases:
            values = [v for _, _, v in t.cells(off_diagonal=t.peer_to_peer) if v is not None]
            out[t.name] = {"sum": t.sum, "computed_sum": t.computed_sum,
                           "min": min(values) if values else None, "max": max(values) if values else None,
                           "median": statistics.median(values) if values else None}
        return out
