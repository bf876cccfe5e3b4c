"""A tolerance or a share given on the command line: `0.05` or `5%` (compare's --tolerance, run's
--compare-tolerance and --drain-max)."""

from __future__ import annotations

import math


def parse_tolerance(text: str) -> float:
    """`0.05` or `5%`, below 100%; for argparse (`type=`). A higher-is-better metric falls by 100% at most
    (to zero), so a tolerance of 100% or more would let every drop short of zero pass as no regression."""
    import argparse

    value = parse_fraction(text)
    if value >= 1:
        raise argparse.ArgumentTypeError(f"tolerance {text!r} is 100% or more: a higher-is-better metric falls by "
                                         f"100% at most, so no drop short of zero would count; give less, e.g. 5%")
    return value


def parse_fraction(text: str) -> float:
    """`0.05` or `5%` (--drain-max's share too, which may be 100%). A bare number of 1 or more is refused:
    `5` would be 500%, which nobody means; write `5%` or `0.05`."""
    import argparse

    percent = text.strip().endswith("%")
    try:
        value = float(text.strip()[:-1]) / 100 if percent else float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a fraction such as 0.05 or a percentage such as 5%, "
                                         f"got {text!r}") from None
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"tolerance must be >= 0, got {text!r}")
    if not percent and value >= 1:
        raise argparse.ArgumentTypeError(f"{text!r} is ambiguous: write {text}% for a percentage, or a fraction "
                                         f"below 1 such as 0.05")
    return value
