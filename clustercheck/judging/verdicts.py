"""One verdict shape for numeric limits and probe expectations, and the one place that turns a verdict
into text. A verdict judged against a `Limit` has a number, an operator and a margin; one judged against
an `Expectation` (a probe's) has what was found, what was expected and the probe's own explanation.
Reports read verdicts from the run record (`VerdictEntry`), so the text helpers take those."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence, TypedDict

from clustercheck.judging.limits import Limit
from clustercheck.units import fmt, fmt_unit, out_of_domain

LIMIT, EXPECT = "limit", "expect"
_MISS = {">=": "<", ">": "<=", "<=": ">", "<": ">=", "==": "!="}


class VerdictEntry(TypedDict, total=False):
    """One verdict: a numeric limit (`kind: limit`, with `op` and a number in `limit`) or a probe's
    expectation (`kind: expect`, `op` empty, `limit` the expected value as text)."""
    kind: str
    metric: str
    measured: float | str
    unit: str
    op: str
    limit: float | str
    passed: bool
    margin: float | None
    expression: str
    source: str
    origin: str
    spec_sources: list[str]
    worst: str | None
    subject: str | None
    detail: str | None


@dataclass(frozen=True)
class Expectation:
    """What a probe expected of one property, and where the expectation came from."""

    check: str
    what: str
    expected: str  # "-" when the probe judges on its own (no expectation was given)
    origin: str  # the profile's expect: block, or the probe's built-in rule
    source: str = ""


@dataclass(frozen=True)
class Verdict:
    metric: str
    measured: float | str
    unit: str
    rule: Limit | Expectation
    passed: bool
    margin: float | None = None
    worst: str | None = None
    subject: str | None = None  # the GPU, pair or rank this verdict is about, when not the whole check
    detail: str | None = None  # a probe's own one-line explanation

    @property
    def kind(self) -> str:
        return LIMIT if isinstance(self.rule, Limit) else EXPECT

    def as_dict(self) -> VerdictEntry:
        entry: VerdictEntry = {"kind": self.kind, "metric": self.metric, "measured": self.measured,
                               "unit": self.unit, "passed": self.passed, "margin": self.margin,
                               "worst": self.worst, "subject": self.subject, "detail": self.detail}
        rule = self.rule
        entry["op"] = rule.op if isinstance(rule, Limit) else ""
        entry["limit"] = rule.value if isinstance(rule, Limit) else rule.expected
        entry["expression"] = rule.expression if isinstance(rule, Limit) else rule.expected
        entry["source"], entry["origin"] = rule.source, rule.origin
        entry["spec_sources"] = list(rule.spec_sources) if isinstance(rule, Limit) else []
        return entry

    def line(self) -> str:
        return line(self.as_dict())


def of_limit(metric: str, measured: float, limit: Limit, worst: str | None = None,
             subject: str | None = None) -> Verdict:
    """A number judged against a limit (already in the limit's unit)."""
    return Verdict(metric, measured, limit.unit, limit, limit.passes(measured), limit.margin(measured), worst,
                   subject, out_of_domain(measured, limit.unit))


# -- text, from record entries ----------------------------------------------------------------------

def is_expectation(v: Mapping[str, Any]) -> bool:
    """Records written before verdicts had a `kind` mark expectations by an empty operator."""
    return v.get("kind") == EXPECT or (not v.get("kind") and not v.get("op"))


def measured_text(v: Mapping[str, Any]) -> str:
    return fmt_unit(v["measured"], v.get("unit"))


def rule_text(v: Mapping[str, Any]) -> str:
    """`>= 430 GB/s` for a limit; `expected NV18` for an expectation."""
    if is_expectation(v):
        return f"expected {v.get('limit') or '-'}"
    return f"{v['op']} {fmt_unit(v['limit'], v.get('unit'))}"


def fmt_margin(margin: float | None, limit: float | str | None) -> str:
    """Relative when the limit is a non-zero number; absolute at 0; '-' without a numeric limit."""
    if margin is None or isinstance(limit, str) or limit is None:
        return "-"
    return f"{margin * 100:+.1f}%" if limit else f"{margin:+g}"


def margin_text(v: Mapping[str, Any]) -> str:
    return "-" if is_expectation(v) else fmt_margin(v.get("margin"), v.get("limit"))


def word(v: Mapping[str, Any]) -> str:
    return "pass" if v["passed"] else "FAIL"


def provenance(v: Mapping[str, Any]) -> str:
    """Where the rule came from: the expression and file:line of a limit, with its stated source."""
    if is_expectation(v):
        return f"expected {v.get('limit') or '-'} ({v.get('origin') or ''})"
    text = f"{v.get('expression')!r} ({v.get('origin')})"
    return text + (f"; {v['source']}" if v.get("source") else "")


def line(v: Mapping[str, Any]) -> str:
    """One line a person acts on: who, what was measured, the rule, the margin and the worst rank."""
    who = f"{v['subject']} " if v.get("subject") else ""
    if is_expectation(v) or v.get("detail") is not None:
        where = f"{v['subject']}: " if v.get("subject") else ""
        return f"{where}{v['metric']}: {v.get('detail') or ''}".rstrip(": ")
    state = "meets" if v["passed"] else "misses"
    worst = f"; worst {v['worst']}" if v.get("worst") and not v["passed"] and not v.get("subject") else ""
    return (f"{who}{v['metric']} {measured_text(v)} {state} the limit {rule_text(v)} "
            f"(margin {margin_text(v)}){worst}")


def brief(v: Mapping[str, Any]) -> str:
    """The shortest form, for an exclusion reason or a node table: `busbw 301 < 430 GB/s`."""
    who = f"{v['subject']} " if v.get("subject") else ""
    if is_expectation(v):
        return f"{who}{v['metric']} {fmt(v['measured'])}".strip()
    op = v["op"] if v["passed"] else _MISS.get(v["op"], "!")
    return f"{who}{v['metric']} {fmt(v['measured'])} {op} {fmt(v['limit'])} {v.get('unit') or ''}".strip()


def failure_text(failed: Sequence[Verdict]) -> str:
    """1-3 lines: the failed verdicts (the first and last of many), then where their rules come from."""
    lines = [v.line() for v in failed]
    entries = [v.as_dict() for v in failed]
    sources = dict.fromkeys(provenance(e) if is_expectation(e) else f"limit from {provenance(e)}" for e in entries)
    lines.append("; ".join(sources))
    return "\n".join(lines[:3] if len(failed) <= 2 else [lines[0], f"... and {len(failed) - 1} more", lines[-1]])


def finite_margin(v: Mapping[str, Any]) -> bool:
    m = v.get("margin")
    return isinstance(m, (int, float)) and math.isfinite(m)
