"""What an nccl-tests / rccl-tests run printed, as frozen data, and the numbers a measurement reads from it.

The text reader (`nccl_tests`) and the `-J` JSON reader (`nccl_tests_json`) both return `NcclTestsRun`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from clustercheck import formulas

if TYPE_CHECKING:
    from clustercheck.fabric.transport import ErrorLine

PLACEMENTS = ("out_of_place", "in_place")
# The binaries nccl-tests builds, <collective>_perf (NVIDIA/nccl-tests src/Makefile BIN_FILES_LIST);
# rccl-tests builds the same names. The one list the parsers, probes, expectations and checks use.
NCCL_TESTS_COLLECTIVES = ("all_reduce", "all_gather", "broadcast", "reduce_scatter", "reduce", "alltoall",
                          "alltoallv", "scatter", "gather", "sendrecv", "hypercube")


@dataclass(frozen=True)
class Placement:
    """One placement's columns of one row (out-of-place or in-place)."""

    time_us: float            # converted from ms for the 1.x-era `res` tables
    algbw: float              # GB/s (1e9 bytes)
    busbw: float
    wrong: float | None       # `#wrong` elements; None when N/A (validation off) or the table has no such column
    error: float | None       # the older `error` / `res` column (largest deviation); None when N/A or absent

    @property
    def checked(self) -> bool:
        return self.wrong is not None or self.error is not None


@dataclass(frozen=True)
class Row:
    size: int                 # bytes, as printed
    count: int
    dtype: str
    redop: str | None
    root: int | None
    out_of_place: Placement | None
    in_place: Placement | None
    line: int                 # in the file, 1-based

    def placements(self) -> tuple[tuple[str, Placement], ...]:
        return tuple((n, p) for n, p in (("out_of_place", self.out_of_place), ("in_place", self.in_place)) if p)


@dataclass(frozen=True)
class RankInfo:
    rank: int
    host: str | None          # None in NCCL 1.x tables
    pid: int | None
    device: int
    bus_id: str               # "0000:04:00", "0x04" or rccl's "0000:05:00.0"
    model: str


@dataclass(frozen=True)
class NcclTestsRun:
    tool: str                 # "nccl-tests", "rccl-tests" or "nccl1" (NCCL 1.x test/single)
    format: str               # "wrong", "error", "res" or "json"
    collective: str | None    # binary stem: "all_reduce", "alltoall", ... None when the text does not say
    collective_from: str      # "banner", "binary name", "columns", "busbw/algbw ratio" or "unknown"
    ranks: tuple[RankInfo, ...]
    rows: tuple[Row, ...]
    n_threads: int | None
    n_gpus: int | None
    max_bytes: int | None
    validation: int | None
    out_of_bounds: int | None
    avg_busbw: float | None   # the footer's value; None when there is no footer (never computed)
    avg_busbw_check: str | None   # "OK"/"FAILED" when the tool checked it (NCCL_TESTS_MIN_BW / -c)
    nccl_version: str | None
    tests_version: str | None
    last_error: str | None    # `# error: ...` printed after the footer
    failure: str | None       # "line N: <text>" when the run crashed or stops early
    failure_line: int | None
    failure_kind: str | None  # "crashed" (a failure line), "failed" (the footer's out-of-bounds check) or
    #                           "incomplete" (the table or footer is missing)
    nccl_info_lines: int
    notes: tuple[str, ...]    # elisions and other things a reader should know
    unread_rows: tuple[tuple[int, str], ...] = ()   # (line, why) of table rows that could not be read
    min_bytes: int | None = None
    step: tuple[int, str] | None = None   # (2, "factor") or (1048576, "bytes"), as the header line says
    # every NCCL WARN and nonzero error-return trace in the text (fabric/transport.py errors()); none in JSON
    nccl_errors: tuple[ErrorLine, ...] = ()
    # the header's maxBytes when nccl-tests' `Reducing maxBytes to N due to memory limitation` lowered it
    # (max_bytes is then N, the sweep the tool ran): a run can tell the -e it gave from the tool's own cut
    reduced_from: int | None = None

    def sizes_promised(self) -> int | None:
        """How many sizes the header's minBytes, maxBytes and step promise one sweep (nccl-tests' own loop,
        src/common.cu: size *= factor, or size += bytes, while size <= maxBytes); None when it does not say."""
        if not (self.min_bytes and self.max_bytes and self.step) or self.step[0] < 1:
            return None
        by, how = self.step
        if how == "factor" and by < 2:
            return None
        size, n = self.min_bytes, 0
        while size <= self.max_bytes and n <= 100_000:
            n += 1
            size = size * by if how == "factor" else size + by
        return n if n <= 100_000 else None

    @property
    def nranks(self) -> int | None:
        return len(self.ranks) or None

    @property
    def hosts(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(r.host for r in self.ranks if r.host))

    @property
    def gpu_models(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(r.model for r in self.ranks if r.model))

    def largest(self) -> Row | None:
        """The last row of the largest size (a stress run repeats sizes)."""
        return max(reversed(self.rows), key=lambda r: r.size) if self.rows else None


def version_of(code: int | None) -> str | None:
    """NCCL_VERSION_CODE -> "2.28.7" (X*10000+Y*100+Z from 2.9 on, X*1000+Y*100+Z before)."""
    if not code:
        return None
    if code >= 20900:
        return f"{code // 10000}.{code % 10000 // 100}.{code % 100}"
    return f"{code // 1000}.{code % 1000 // 100}.{code % 100}"



def inferred_ranks(run: NcclTestsRun) -> int | None:
    """Ranks from busbw = algbw x factor(n) when the text has no Rank lines: the one n that reproduces the
    printed busbw of the fastest placement within its 2-decimal rounding; None when ambiguous."""
    if run.nranks:
        return run.nranks
    best = max((p for r in run.rows for _, p in r.placements()), key=lambda p: p.algbw, default=None)
    if run.collective is None or best is None or best.algbw < 1.0:
        return None
    try:
        fits = [n for n in range(2, 1025)
                if abs(best.algbw * formulas.busbw_factor(run.collective, n) - best.busbw)
                <= 0.005 * (1 + formulas.busbw_factor(run.collective, n)) + 1e-9]
    except ValueError:  # a collective without a rank-dependent factor
        return None
    return fits[0] if len(fits) == 1 else None


def per_size(run: NcclTestsRun) -> list[dict[str, float | int | str | None]]:
    """One flat record per row and placement: size, placement, time_us, algbw, busbw, wrong, error."""
    return [{"size": r.size, "placement": name, "time_us": p.time_us, "algbw": p.algbw, "busbw": p.busbw,
             "wrong": p.wrong, "error": p.error} for r in run.rows for name, p in r.placements()]


def headline(run: NcclTestsRun) -> dict[str, float | None]:
    """Numbers at the largest size (out-of-place, else in-place) plus the footer: busbw, algbw, time_us,
    size, avg_busbw, wrong (every row's #wrong added up; NaN when no row was checked), out_of_bounds."""
    row = run.largest()
    head = row.placements()[0][1] if row and row.placements() else None
    checked = [p.wrong for r in run.rows for _, p in r.placements() if p.wrong is not None]
    return {"size": float(row.size) if row else None, "busbw": head.busbw if head else None,
            "algbw": head.algbw if head else None, "time_us": head.time_us if head else None,
            "avg_busbw": run.avg_busbw, "wrong": float(sum(checked)) if checked else math.nan,
            "out_of_bounds": float(run.out_of_bounds) if run.out_of_bounds is not None else None}
