"""One limit on one metric of one check, resolved to a number in its unit, with where it came from. A
leaf: the profile parser (thresholds.py), the kinds' built-in limits and the verdicts all use it."""

from __future__ import annotations

import math
from dataclasses import dataclass

from clustercheck.units import fmt, out_of_domain


def domain_problem(op: str, value: float, low: float, high: float) -> str | None:
    """Why a limit `op value` on a metric whose values lie in [low, high] can never fail (a floor at or below
    the lowest value, a ceiling at or above the highest) or never pass (a bound outside the domain), or None."""
    span = f"[{fmt(low)}, {'inf' if high == math.inf else fmt(high)}]"
    never_fails = (op == ">=" and value <= low or op == ">" and value < low
                   or op == "<=" and value >= high or op == "<" and value > high)
    if never_fails:
        return f"'{op} {fmt(value)}' passes every value of a metric in {span}: it judges nothing"
    never_passes = (op in (">=", ">", "==") and value > high or op in ("<=", "<", "==") and value < low
                    or op == ">" and value == high or op == "<" and value == low)
    if never_passes:
        return f"'{op} {fmt(value)}' fails every value of a metric in {span}"
    return None


@dataclass(frozen=True)
class Limit:
    """One limit on one metric of one check, resolved to a number in `unit`."""

    check: str
    metric: str
    op: str
    value: float
    unit: str
    expression: str
    source: str
    origin: str  # where the rule is and which it is: "thresholds/x.yaml:12 checks.<id>.<metric>"
    spec_sources: tuple[str, ...] = ()
    file: str = ""  # the profile the limit was read from, and the line of its `limit:` (0: not from a file)
    line: int = 0
    key: str = ""  # the rule's key path in that profile: checks.<id>.<metric> or defaults.<kind>.<metric>

    def passes(self, measured: float) -> bool:
        """Whether `measured` is inside the limit: never a NaN, an infinity or a negative bandwidth, time or
        count (units.out_of_domain), whichever way the operator points."""
        if out_of_domain(measured, self.unit):
            return False
        return {">=": measured >= self.value, "<=": measured <= self.value, ">": measured > self.value,
                "<": measured < self.value, "==": measured == self.value}[self.op]

    def margin(self, measured: float) -> float:
        """Signed distance to the limit, relative to it when it is not 0; positive means inside."""
        diff = measured - self.value if self.op in (">=", ">") else self.value - measured
        if self.op == "==":
            diff = -abs(measured - self.value)
        return (diff / abs(self.value) if self.value else diff) + 0.0  # + 0.0 turns -0.0 into 0.0

    def describe(self) -> str:
        return f"{self.op} {fmt(self.value)} {self.unit}"
