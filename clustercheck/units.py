"""Byte sizes and measurement units."""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING

from clustercheck.errors import show  # a user's value quoted briefly, whatever its size

if TYPE_CHECKING:  # for mypy only (annotations are strings here): what is_number tells it of its argument
    from typing_extensions import TypeGuard, TypeIs

# nccl-tests reads "16M" as 16 MiB; we accept that and the explicit KiB/MiB/GiB forms.
_SIZE_RE = re.compile(r"^\s*(\d+)\s*([KMGT]?)(i?B)?\s*$", re.IGNORECASE)
_SIZE_SHIFT = {"": 0, "K": 10, "M": 20, "G": 30, "T": 40}


# The largest size a suite or profile may name (a buffer, a sweep, a file, a size a default judges from): far
# above any GPU's all_reduce sweep or gdsio file, far below a typo like 1TiB or 1000000000GiB.
MAX_SIZE = 256 << 30


def parse_size(value: object) -> int:
    """Return a byte count from an int or text such as '16MiB', '16M', '1GiB', '512', at most MAX_SIZE."""
    if isinstance(value, bool):
        raise ValueError(f"expected a size such as 16MiB, got {show(value)}")
    number = 0
    if isinstance(value, int):
        if value <= 0:
            raise ValueError(f"size must be positive, got {show(value)}")
        number = value
    elif isinstance(value, str) and len(value) <= 40:  # int() of 5,000 digits raises; no size is that long
        m = _SIZE_RE.match(value)
        if m:
            number = int(m.group(1)) << _SIZE_SHIFT[m.group(2).upper()]
    if number <= 0:
        raise ValueError(f"expected a size such as 16MiB, 1GiB or 4096, got {show(value)}")
    if number > MAX_SIZE:
        raise ValueError(f"size {show(value)} is above the {format_size(MAX_SIZE)} limit")
    return number


def format_size(nbytes: int) -> str:
    for suffix, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if nbytes >= 1 << shift and nbytes % (1 << shift) == 0:
            return f"{nbytes >> shift}{suffix}"
    return f"{nbytes}B"


# The element types a suite may name for its buffers, with their size in bytes, and the long name of
# each short one (what the ranks and the record use).
DTYPE_BYTES = {"float32": 4, "fp32": 4, "float16": 2, "fp16": 2, "bfloat16": 2, "bf16": 2}
CANONICAL_DTYPE = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}


# Every unit a threshold may name, with its family and factor to the family's base unit.
UNITS: dict[str, tuple[str, float]] = {
    "GB/s": ("bandwidth", 1e9),
    "MB/s": ("bandwidth", 1e6),
    "Gb/s": ("bandwidth", 1e9 / 8),
    "GiB/s": ("bandwidth", float(1 << 30)),
    "us": ("time", 1e-6),
    "ms": ("time", 1e-3),
    "s": ("time", 1.0),
    "count": ("count", 1.0),
    "ratio": ("ratio", 1.0),
    "%": ("ratio", 0.01),
    "C": ("temperature", 1.0),
    "TFLOP/s": ("flops", 1e12),
    "GT/s": ("transfer rate", 1e9),   # PCIe lane signalling, used by the spec table
    "GB": ("size", 1e9),              # memory capacity, used by the spec table
}


# The families whose numbers are never negative: a negative bandwidth, time, count, rate or size is a broken
# measurement or a broken record, never a reading to compare with a limit (a `<=` limit would pass it).
NON_NEGATIVE = frozenset({"bandwidth", "time", "count", "flops", "transfer rate", "size"})


def unit_domain(unit: str) -> tuple[float, float]:
    """The values a number in `unit` can take, when nothing more is known of what it measures: [0, inf) for the
    families never negative, any number otherwise (a ratio may be a signed change; a kind declares its own)."""
    return (0.0, math.inf) if UNITS.get(unit, ("", 1.0))[0] in NON_NEGATIVE else (-math.inf, math.inf)


def is_number(value: object) -> TypeIs[int | float]:
    """An int or a float, never a bool (True would read as 1): what a measurement, a count or a limit must be."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def is_count(value: object) -> TypeIs[int]:
    """An int, never a bool (`true` is not one GPU). Any sign: a caller that needs a bound compares itself."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_finite_number(value: object) -> TypeGuard[int | float]:
    """A number (is_number) that is neither NaN nor an infinity: what a limit or a comparable measurement must be.
    An int too large for a float (10**400 in a hand-edited record) is not one: no limit or measurement is, and
    math.isfinite of it raises OverflowError. A TypeGuard, not a TypeIs: a False says nothing of the type (NaN
    is a float), so mypy must not narrow the other branch."""
    if not is_number(value):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def out_of_domain(value: float, unit: str) -> str | None:
    """Why `value` cannot be a measurement in `unit` (not a number at all: a bool, where True would read as 1,
    or a string; not a finite number; negative in a family that never is), or None when it can."""
    if not is_number(value):
        return f"{show(value, 40)} is not a number"
    if not math.isfinite(value):
        return f"{fmt(value)} is not a finite number"
    if value < 0 and UNITS.get(unit, ("", 1.0))[0] in NON_NEGATIVE:
        return f"a {UNITS[unit][0]} cannot be negative ({fmt(value)} {unit})"
    return None


# The most TFLOP/s one device can do, for years to come: 1e6 TFLOP/s = 1 EFLOP/s per device, about 65x the
# dense FP4 peak of the largest GPU today (Blackwell Ultra: 15 PFLOP/s) and ~500x its dense BF16. A rank
# answering more (or 0, or less) measured no work done: a timer that read ~0 s, a flop count of work never
# run. Such a number is the harness's fault, never a measurement a floor could pass (1e308 passed `>= 500`).
DEVICE_TFLOPS_MAX = 1e6


def device_tflops_problem(value: object) -> str | None:
    """Why `value` cannot be one device's measured TFLOP/s (not a finite number, at or below 0, or above
    DEVICE_TFLOPS_MAX), or None when it can. The one rule of every kind whose ranks answer TFLOP/s."""
    if not is_finite_number(value):
        return f"{show(value, 40)} is not a finite number"
    if value <= 0:
        return f"{value:.4g} TFLOP/s is no rate of work done (at or below 0)"
    if value > DEVICE_TFLOPS_MAX:
        return (f"{value:.4g} TFLOP/s is above {fmt(DEVICE_TFLOPS_MAX)} (1 EFLOP/s), more than any device "
                f"does: a timer or harness fault")
    return None


def convert(value: float, from_unit: str, to_unit: str) -> float:
    """Convert between units of one family; ValueError when they differ in kind."""
    if from_unit == to_unit:
        return value
    fam_a, fa = UNITS[from_unit]
    fam_b, fb = UNITS[to_unit]
    if fam_a != fam_b:
        raise ValueError(f"cannot convert {from_unit} to {to_unit}")
    return value * fa / fb


def fmt(value: float | str | None) -> str:
    """A number as people read it: integers whole, others to 4 significant digits; text as it is
    (a probe's measured value may be 'NV12' or 'ReqRedir+')."""
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    if value != value:  # NaN
        return "nan"
    if value in (float("inf"), float("-inf")):  # a hand-edited or broken record: shown, never an OverflowError
        return "inf" if value > 0 else "-inf"
    if value == int(value) and abs(value) < 1e9:
        return str(int(value))
    return f"{value:.4g}" if abs(value) < 1e5 else f"{value:.0f}"


BYTES_UNITS = ("B", "bytes")


def format_bytes(nbytes: float) -> str:
    """A byte count as people read it: `22.7 GiB`, `512 B` (binary prefixes, as free and nvidia-smi use)."""
    for suffix, shift in (("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if abs(nbytes) >= 1 << shift:
            return f"{fmt(round(nbytes / (1 << shift), 1))} {suffix}"
    return f"{fmt(nbytes)} B"


def fmt_unit(value: float | str | None, unit: str | None) -> str:
    """A value with its unit, formatted by the unit, the one place every report formats a number with one:
    bytes in KiB/MiB/GiB, a percentage as `+12.5%`, seconds and everything else to 4 significant digits
    (never `90.89299999999999 s`)."""
    if not is_number(value):
        return f"{fmt(value)} {unit or ''}".rstrip()
    if unit in BYTES_UNITS:
        return format_bytes(value)
    if unit == "%":
        return f"{fmt(value)}%"
    return f"{fmt(value)} {unit or ''}".rstrip()


def plural(count: int, word: str, words: str | None = None) -> str:
    """`1 row`, `3 rows`."""
    return f"{count} {word if count == 1 else (words or word + 's')}"
