"""Compare two saved runs: per item and metric, did the measured value get worse beyond a tolerance?

Items are matched by their stable JUnit id (`<suite stem>::<check id>[<node/GPU/pair>]`); metrics are
those with a limit, and the limit's operator gives the direction: `>=`/`>` means higher is better,
`<=`/`<` lower is better. `==` limits (e.g. `wrong == 0`) have no direction and are left to the
verdict itself. Pure: no pytest, no torch."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from clustercheck.errors import UserError
from clustercheck.record.io import RecordError, read_record
from clustercheck.judging.verdicts import VerdictEntry
from clustercheck.record.schema import SCHEMA_VERSION, ResultEntry, RunHeader, item_id
from clustercheck.units import fmt

HIGHER, LOWER = "higher", "lower"
_DIRECTION = {">=": HIGHER, ">": HIGHER, "<=": LOWER, "<": LOWER}
DEFAULT_TOLERANCE = 0.05


@dataclass(frozen=True)
class Run:
    path: Path  # the run.jsonl
    header: RunHeader
    results: list[ResultEntry]

    def describe(self) -> str:
        return f"{self.header.get('platform', '?')}, started {self.header.get('started', '?')}"


@dataclass(frozen=True)
class Change:
    item: str  # testcase id
    metric: str  # with the subject it is about, e.g. h2d[GPU3]
    unit: str
    direction: str  # HIGHER or LOWER is better
    baseline: float
    current: float
    change: float  # (current - baseline) / |baseline|; +-inf from a zero baseline
    kind: str  # "regression", "improvement" or "same"
    name: str = ""  # the metric alone
    subject: str | None = None

    def percent(self) -> str:
        return f"{self.change * 100:+.1f}%" if math.isfinite(self.change) else ("+inf%" if self.change > 0 else "-inf%")

    def line(self) -> str:
        return (f"{self.item} {self.metric}: {fmt(self.baseline)} -> {fmt(self.current)} {self.unit} "
                f"({self.percent()}; {self.direction} is better)")


@dataclass(frozen=True)
class Comparison:
    baseline: Run
    current: Run
    tolerance: float
    changes: list[Change] = field(default_factory=list)
    not_compared: list[tuple[str, str]] = field(default_factory=list)  # (item, why)

    @property
    def regressions(self) -> list[Change]:
        return [c for c in self.changes if c.kind == "regression"]

    @property
    def improvements(self) -> list[Change]:
        return [c for c in self.changes if c.kind == "improvement"]


def resolve_run(arg: str | Path, history: Path = Path("clustercheck-out")) -> Path:
    """A run directory, its run.jsonl, or the name of a run directory under `history`."""
    path = Path(arg)
    if not path.exists() and not path.is_absolute() and (history / path).exists():
        path = history / path
    return path / "run.jsonl" if path.is_dir() else path


def load_run(arg: str | Path, history: Path = Path("clustercheck-out")) -> Run:
    record = resolve_run(arg, history)
    if not record.is_file():
        raise UserError(f"no run record at {record}")
    try:
        header, results, _ = read_record(record)
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{record}: not a run record ({exc.__class__.__name__})") from None
    except RecordError as exc:
        raise UserError(f"{record}: not a run record ({exc})") from None
    if header.get("type") != "run":
        raise UserError(f"{record}: not a run record (no 'run' header line)")
    if header.get("schema") != SCHEMA_VERSION:
        raise UserError(f"{record}: run record schema {header.get('schema')!r}; this clustercheck reads "
                        f"schema {SCHEMA_VERSION}")
    return Run(record, header, results)


def classify(direction: str, change: float, tolerance: float) -> str:
    worse = -change if direction == HIGHER else change
    if worse >= tolerance - 1e-12:
        return "regression"
    if -worse >= tolerance - 1e-12:
        return "improvement"
    return "same"


def relative(baseline: float, current: float) -> float:
    if baseline == current:
        return 0.0
    if baseline == 0:
        return math.copysign(math.inf, current)
    return (current - baseline) / abs(baseline)


def _directional(verdicts: list[VerdictEntry] | None) -> dict[str, VerdictEntry]:
    """Directional verdicts by metric, and by subject where there is one (`h2d[GPU3]`)."""
    return {v["metric"] + (f"[{v['subject']}]" if v.get("subject") else ""): v
            for v in verdicts or [] if v.get("op") in _DIRECTION}


def match(item: str, baseline: list[VerdictEntry] | None, current: list[VerdictEntry] | None,
          tolerance: float) -> tuple[list[Change], list[tuple[str, str]]]:
    """One item's verdicts against the baseline's: a Change per metric judged the same way in both, and
    (item, why) for each that cannot be compared. `compare` reports both; `--compare` judges the changes."""
    old_v, new_v = _directional(baseline), _directional(current)
    changes: list[Change] = []
    skipped: list[tuple[str, str]] = []
    for key, v in new_v.items():
        o = old_v.get(key)
        if o is None:
            skipped.append((item, f"{key} not judged in the baseline"))
            continue
        if o["unit"] != v["unit"]:
            skipped.append((item, f"{key} in {o['unit']} in the baseline, {v['unit']} now"))
            continue
        direction = _DIRECTION[v["op"]]
        if _DIRECTION[o["op"]] != direction:
            skipped.append((item, f"{key}: limit direction changed ({o['op']} -> {v['op']})"))
            continue
        before, now = float(o["measured"]), float(v["measured"])
        change = relative(before, now)
        changes.append(Change(item, key, v["unit"], direction, before, now, change,
                              classify(direction, change, tolerance), v["metric"], v.get("subject")))
    return changes, skipped


def compare(baseline: Run, current: Run, tolerance: float = DEFAULT_TOLERANCE) -> Comparison:
    if not tolerance >= 0 or not math.isfinite(tolerance):
        raise UserError(f"tolerance must be a finite fraction >= 0, got {tolerance!r}")
    before = {item_id(r): r for r in baseline.results}
    changes: list[Change] = []
    not_compared: list[tuple[str, str]] = []
    seen = set()
    for r in current.results:
        item = item_id(r)
        seen.add(item)
        old = before.get(item)
        if old is None:
            not_compared.append((item, "not in the baseline"))
            continue
        has_old, has_new = bool(_directional(old.get("verdicts"))), bool(_directional(r.get("verdicts")))
        if has_old and not has_new:
            not_compared.append((item, f"no measurement in this run ({r['outcome']})"))
            continue
        if has_new and not has_old:
            not_compared.append((item, f"no measurement in the baseline ({old['outcome']})"))
            continue
        found, skipped = match(item, old.get("verdicts"), r.get("verdicts"), tolerance)
        changes += found
        not_compared += skipped
    not_compared += [(item, "not in this run") for item in before if item not in seen]
    return Comparison(baseline, current, tolerance, changes, not_compared)


def report_lines(c: Comparison, show_same: bool = False) -> list[str]:
    """Regressions first, then improvements (and unchanged with show_same), then what was not compared."""
    rows = [("REGRESSION", ch) for ch in c.regressions] + [("improved", ch) for ch in c.improvements]
    if show_same:
        rows += [("same", ch) for ch in c.changes if ch.kind == "same"]
    table = [(kind, ch.item, ch.metric, f"{fmt(ch.baseline)} -> {fmt(ch.current)} {ch.unit}", ch.percent(),
              f"{ch.direction} is better") for kind, ch in rows]
    lines = []
    if table:
        widths = [max(len(row[i]) for row in table) for i in range(5)]
        lines += ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)) + "  " + row[-1] for row in table]
    lines += [f"not compared  {item}: {why}" for item, why in c.not_compared]
    lines.append(f"{len(c.changes)} metric(s) compared at tolerance {c.tolerance * 100:g}%: "
                 f"{len(c.regressions)} regression(s), {len(c.improvements)} improvement(s), "
                 f"{len(c.not_compared)} not compared")
    return lines


def parse_tolerance(text: str) -> float:
    """`0.05` or `5%`; for argparse (`type=`)."""
    import argparse

    try:
        value = float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a fraction such as 0.05 or a percentage such as 5%, "
                                         f"got {text!r}") from None
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"tolerance must be >= 0, got {text!r}")
    return value
