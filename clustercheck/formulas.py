"""nccl-tests bandwidth arithmetic (src/<coll>.cu *GetBw, doc/PERFORMANCE.md).

GB means 1e9 bytes. algbw = S / t; busbw = algbw x factor, where S is the bytes the collective's
buffers really moved and t the time per operation, averaged across ranks *before* dividing.
"""

from __future__ import annotations

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
    """(mean time in s, algbw GB/s, busbw GB/s) from each rank's time per operation."""
    t = mean_time(per_rank_seconds)
    alg = algbw_gbs(nbytes, t)
    return t, alg, alg * busbw_factor(collective, len(per_rank_seconds))
