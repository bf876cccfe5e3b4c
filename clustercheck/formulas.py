"""nccl-tests bandwidth arithmetic (src/<coll>.cu *GetBw, doc/PERFORMANCE.md).

GB means 1e9 bytes. algbw = S / t; busbw = algbw x factor, where S is the bytes the collective's
buffers really moved and t the time per operation, averaged across ranks *before* dividing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import fmean


def busbw_factor(collective: str, nranks: int) -> float:
    n = nranks
    if collective == "all_reduce":
        return 2 * (n - 1) / n
    if collective in ("all_gather", "reduce_scatter", "alltoall", "gather", "scatter"):
        return (n - 1) / n
    if collective in ("broadcast", "reduce", "sendrecv", "hypercube"):
        return 1.0
    raise ValueError(f"no busbw factor for {collective!r}")


def algbw_gbs(nbytes: int, seconds: float) -> float:
    return nbytes / seconds / 1e9 if seconds > 0 else float("nan")


def mean_time(per_rank_seconds: list[float]) -> float:
    """nccl-tests `-a 1` (default): arithmetic mean of the per-rank times."""
    return fmean(per_rank_seconds)


def bandwidths(collective: str, nbytes: int, per_rank_seconds: list[float]) -> tuple[float, float, float]:
    """(mean time in s, algbw GB/s, busbw GB/s) from each rank's time per operation; all NaN when a rank's
    time is not a positive number (a broken timer), which a mean over the others would hide."""
    if not all(math.isfinite(s) and s > 0 for s in per_rank_seconds):
        return math.nan, math.nan, math.nan
    t = mean_time(per_rank_seconds)
    alg = algbw_gbs(nbytes, t)
    return t, alg, alg * busbw_factor(collective, len(per_rank_seconds))


# Placements torch offers per collective: its all_reduce, broadcast and reduce are in-place only;
# alltoall and sendrecv have no in-place form that is safe on NCCL.
PLACEMENTS = {
    "all_reduce": ("in",), "broadcast": ("in",), "reduce": ("in",),
    "all_gather": ("out", "in"), "reduce_scatter": ("out", "in"),
    "alltoall": ("out",), "sendrecv": ("out",),
}
_PER_RANK = ("all_gather", "reduce_scatter", "alltoall", "gather", "scatter", "hypercube")


@dataclass(frozen=True)
class Layout:
    """Buffer sizes for one requested size, as nccl-tests' GetCollByteCount computes them."""

    param_count: int  # the `count` column: per-rank count for all_gather, reduce_scatter, alltoall
    send_count: int
    recv_count: int
    algbw_bytes: int  # S in algbw = S / t: the bytes the buffers really moved
    size: int  # the `size` column: max(send, recv) bytes


def layout(collective: str, size: int, elt: int, nranks: int) -> Layout:
    count = size // elt
    if collective in _PER_RANK:
        # per-rank counts are rounded down to a multiple of 16 bytes: (count/nranks) & ~(16/eltSize-1)
        base = (count // nranks) & ~(max(1, 16 // elt) - 1)
        send, recv = {"all_gather": (base, base * nranks), "reduce_scatter": (base * nranks, base),
                      "alltoall": (base * nranks, base * nranks)}[collective]
        return Layout(base, send, recv, base * elt * nranks, max(send, recv) * elt)
    return Layout(count, count, count, count * elt, count * elt)


# The correctness check (measure/collectives.py _wrong) compares a chunk at a time: a bool mask of the
# chunk, and the int64 copy of it that sum() makes before reducing (measured on an H100: 144 MiB over a
# 256 MiB buffer with 16 Mi-element chunks, docs/validation/2026-11-25-h100-sxm.md): 9 bytes an element,
# 16 MiB at most. The rank side chunks by it; the memory need of a collective counts it.
CHECK_BYTES_PER_ELEMENT = 9
CHECK_CHUNK = 16 << 20  # bytes of those temporaries at most
CHECK_ELEMENTS = CHECK_CHUNK // CHECK_BYTES_PER_ELEMENT  # elements compared at once


def check_temporaries(count: int) -> int:
    """Bytes the correctness check of a `count`-element buffer holds beside it."""
    return min(count, CHECK_ELEMENTS) * CHECK_BYTES_PER_ELEMENT
