"""Whether one placement's time, algbw and busbw can be one measurement: the rule the nccl-tests text reader
(`nccl_tests`) and the `-J` JSON reader (`nccl_tests_json`) share, so a row one of them refuses the other
refuses too.

nccl-tests computes both bandwidths from the one time it prints (src/*.cu `GetBw`, src/common.cu
`BenchTime`): algbw = bytes / time and busbw = algbw x a bus factor. So a time of 0 with a bandwidth, a
busbw above 2 x algbw or an algbw above size / time is no number the tool printed: an edited, garbled or
fabricated row, which must not reach a busbw floor as a measurement.

Bounds, as the tool's own history allows:
- busbw <= 2 x algbw: the largest bus factor of any nccl-tests collective is all_reduce's 2(n-1)/n < 2
  (NCCL 1.x test/single's reduce_scatter and all_gather print busbw = algbw x (n-1): a `bytes N` table of
  that era is not bounded, `bus_bound=False`);
- algbw <= size / time: `bytes` is the printed size for every collective since 2020-06 (nccl-tests ec1b5e2);
  before it all_gather and reduce_scatter used size x (n-1)/n, and hypercube still does, so an algbw
  *below* size / time is a real capture and only the upper bound is a rule. A low algbw cannot pass a
  floor its time would fail: busbw <= 2 x algbw <= 2 x size / time either way.
- the printed rounding is allowed for, per value: nccl-tests prints time %.2f below 100 us (or 10000 us),
  %.1f, %.0f, and from 2025 (util.cu getFloatStr) %.1e past 7 characters (2 digits: 5 %); the bandwidths
  %.2f, %.1f past 999.99; the first nccl-tests and NCCL 1.x print the time in ms %.3f (0.5 us). The text
  reader gives the half unit of each printed token (`half_unit`); the JSON reader the rounding the
  table of the same run prints (`as_table`).
- `cputime` tables print the CPU time while the bandwidths come from the GPU time (common.cu:
  `timeUsec = report_cputime ? cputimeSec : deltaSec`), so size / time bounds nothing there.
"""

from __future__ import annotations

from dataclasses import dataclass

from clustercheck.toolout.nccl_run import Placement


@dataclass(frozen=True)
class Printed:
    """Half a unit in the last printed digit of each value (the most its printing may have moved it)."""

    time_us: float
    algbw: float
    busbw: float


def printed(tokens: list[str], time_ms: bool = False) -> Printed:
    """The rounding of a text row's `time algbw busbw` tokens (time in ms in NCCL 1.x `res` tables)."""
    return Printed(half_unit(tokens[0], 1000.0 if time_ms else 1.0), half_unit(tokens[1]), half_unit(tokens[2]))


def _float_str_half_unit(value: float, width: int) -> float:
    """Half a unit in the last digit nccl-tests' util.cu getFloatStr prints `value` with in `width` columns
    (%.2f, else %.1f, else %.0f, else %.1e / %.0e)."""
    for digits in (2, 1, 0):
        if len(f"{value:.{digits}f}") <= width:
            return 0.5 * 10.0 ** -digits
    return half_unit(f"{value:.{1 if width >= 7 else 0}e}")


def as_table(p: Placement) -> Printed:
    """The rounding the table of the same run prints `p` with: the JSON's %lf doubles are held to no
    stricter a rule than the text of the same run, so one run reads alike whichever output was kept."""
    return Printed(_float_str_half_unit(p.time_us, 7), _float_str_half_unit(p.algbw, 6),
                   _float_str_half_unit(p.busbw, 6))


def half_unit(token: str, scale: float = 1.0) -> float:
    """Half a unit in the last digit of a printed number: "47535" -> 0.5, "180.71" -> 0.005,
    "1.2e+07" -> 5e5; `scale` converts its unit (1000 for a time printed in ms)."""
    low = token.lower()
    mantissa, _, exponent = low.partition("e")
    digits = len(mantissa.partition(".")[2])
    try:
        power = int(exponent) if exponent else 0
    except ValueError:
        power = 0
    return 0.5 * 10.0 ** (power - digits) * scale


def implausible(place: str, p: Placement, size: int, printed: Printed, cpu_time: bool = False,
                bus_bound: bool = True) -> str | None:
    """Why the placement's three numbers cannot come from one nccl-tests measurement of `size` bytes, or
    None. Values below 0 or not finite are the readers' own domain checks, made before this one."""
    bandwidth = max(p.algbw, p.busbw)
    if p.time_us <= 0 and bandwidth > 0:
        return (f"{place} time {p.time_us:g} us with a bandwidth of {bandwidth:g} GB/s: nothing is moved in no "
                f"time, no tool measured that")
    if bus_bound and p.busbw - printed.busbw > 2 * (p.algbw + printed.algbw):
        return (f"{place} busbw {p.busbw:g} GB/s above 2 x its algbw {p.algbw:g} GB/s: no collective's bus "
                f"factor exceeds 2, no tool measured that")
    if cpu_time or p.time_us <= 0:
        return None
    shortest = p.time_us - printed.time_us
    most = size / (shortest * 1e3) if shortest > 0 else float("inf")
    if p.algbw - printed.algbw > most * (1 + 1e-9):
        return (f"{place} algbw {p.algbw:g} GB/s above what {size} B in {p.time_us:g} us moves "
                f"({size / (p.time_us * 1e3):.4g} GB/s): the time and the bandwidth are not one measurement")
    return None
