"""Compare two saved runs: per item and metric, did the measured value get worse beyond a tolerance and
beyond the two runs' own measured spread?

Items are matched by their stable JUnit id (`<suite stem>::<check id>[<node/GPU/pair>]`); metrics are
those with a limit, and the limit's operator gives the direction: `>=`/`>` means higher is better,
`<=`/`<` lower is better. `==` limits (e.g. `wrong == 0`) have no direction and are left to the
verdict itself: a verdict that passed in the baseline and fails now, or a `#wrong` count that rose, is a
regression whatever the tolerance. A change counts only when it is at least the tolerance *and* larger
than the spread each run measured for that metric (2 x the coefficient of variation of the per-iteration
times, or half the min..max range of a per-GPU metric's samples): two runs of a noisy machine differ by
their noise, and that is not a regression. The time of a collective at a latency-bound size (below
1 MiB) is judged by its limit only. Pure: no pytest, no torch."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from typing import Any, Mapping

from clustercheck.errors import UserError
from clustercheck.record.burnin import folded
from clustercheck.record.io import Record, RecordError, load
from clustercheck.judging.verdicts import VerdictEntry
from clustercheck.record.schema import ResultEntry, RunHeader, item_id
from clustercheck.record.statement import versions
from clustercheck.record.tolerance import parse_fraction, parse_tolerance  # noqa: F401  (their old home)
from clustercheck.units import UNITS, fmt, format_size

HIGHER, LOWER = "higher", "lower"
_DIRECTION = {">=": HIGHER, ">": HIGHER, "<=": LOWER, "<": LOWER}
DEFAULT_TOLERANCE = 0.05
NOISE_CVS = 2.0  # a run's own spread of a metric: this many coefficients of variation of its iterations
LATENCY_BYTES = 1 << 20  # below this a collective's time is latency: noise on a shared host, judged by its limit


@dataclass(frozen=True)
class Run:
    path: Path  # the run.jsonl
    header: RunHeader
    results: list[ResultEntry]
    incomplete: str | None = None  # why the run did not finish (record.io.Record.incomplete), None when it did
    verdict: str = ""  # the run's verdict as its reports state it: the caller's, from report/status.run_status(record)
    record: Record | None = field(default=None, compare=False, repr=False)

    def describe(self) -> str:
        return f"{self.header.get('platform', '?')}, started {self.header.get('started', '?')}"

    def suites(self) -> list[str]:
        return sorted({item_id(r).split("::")[0] for r in self.results})

    def platform(self) -> str:
        return str(self.header.get("platform") or "?")


@dataclass(frozen=True)
class Change:
    item: str  # testcase id
    metric: str  # with the subject it is about, e.g. h2d[GPU3]
    unit: str
    direction: str  # HIGHER or LOWER is better
    baseline: float
    current: float
    change: float  # (current - baseline) / |baseline|; +-inf from a zero baseline
    kind: str  # "regression", "improvement", "same", "noise" (within the runs' spread) or "latency"
    name: str = ""  # the metric alone
    subject: str | None = None
    noise: float = 0.0  # the larger of the two runs' own relative spread of this metric (0: not recorded)

    def percent(self) -> str:
        return f"{self.change * 100:+.1f}%" if math.isfinite(self.change) else ("+inf%" if self.change > 0 else "-inf%")

    def line(self) -> str:
        return (f"{self.item} {self.metric}: {fmt(self.baseline)} -> {fmt(self.current)} {self.unit} "
                f"({self.percent()}; {self.direction} is better{self.why()})")

    def why(self) -> str:
        """What kept a change from counting, or the spread it stood out of."""
        if self.kind == "latency":
            return "; a latency-bound size: judged by its limit only"
        return f"; runs' own spread +-{self.noise * 100:.1f}%" if self.noise else ""


@dataclass(frozen=True)
class Comparison:
    baseline: Run
    current: Run
    tolerance: float
    changes: list[Change] = field(default_factory=list)
    not_compared: list[tuple[str, str]] = field(default_factory=list)  # (item, why)
    failed_now: list[tuple[str, str]] = field(default_factory=list)  # (item, what): passed before, fails now
    unmeasured_now: list[tuple[str, str]] = field(default_factory=list)  # (item, why): an error now, or passed and skipped
    failing: list[tuple[str, str]] = field(default_factory=list)  # (item, why): fails now, not in failed_now
    other_suites: int = 0  # items of a suite only one of the runs ran: counted, not listed one by one
    software: list[tuple[str, str | None, str | None]] = field(default_factory=list)  # (name, before, now)

    @property
    def regressions(self) -> list[Change]:
        return [c for c in self.changes if c.kind == "regression"]

    @property
    def worse(self) -> bool:
        """A regression, a verdict that became failed, a #wrong that rose, or any item of this run that
        failed (in the baseline too, or not in it): compare exits 1."""
        return bool(self.regressions or self.failed_now or self.failing)

    @property
    def compared(self) -> bool:
        """Anything at all was compared (compare exits 5 otherwise)."""
        return bool(self.changes or self.failed_now)

    @property
    def improvements(self) -> list[Change]:
        return [c for c in self.changes if c.kind == "improvement"]


def resolve_run(arg: str | Path, history: Path = Path("clustercheck-out")) -> Path:
    """A run directory, its run.jsonl, or the name of a run directory under `history`."""
    path = Path(arg)
    if not path.exists() and not path.is_absolute() and (history / path).exists():
        path = history / path
    return path / "run.jsonl" if path.is_dir() else path


def available(history: Path, shown: int = 8) -> str:
    """`; runs in DIR: a, b, c` (the newest `shown`, oldest first), to follow a name that is not a run."""
    try:
        runs = sorted(p.name for p in history.iterdir() if (p / "run.jsonl").is_file() and not p.is_symlink())
    except OSError:
        return f" (and no run history at {history}; --out DIR names another)"
    if not runs:
        return f" (no runs in {history} yet)"
    more = f"{len(runs) - shown} older, " if len(runs) > shown else ""
    return f"; runs in {history}: {more}{', '.join(runs[-shown:])}"


def load_run(arg: str | Path, history: Path = Path("clustercheck-out")) -> Run:
    record = resolve_run(arg, history)
    if not record.is_file():
        raise UserError(f"no run record at {record}{available(history)}")
    try:
        rec = load(record)
    except OSError as exc:
        raise UserError(f"{record}: cannot read the run record: {exc.strerror or type(exc).__name__}") from None
    except RecordError as exc:
        raise UserError(f"{record}: not a run record ({exc})") from None
    if rec.header.get("type") != "run":
        raise UserError(f"{record}: not a run record (no 'run' header line)")
    return Run(record, rec.header, rec.results, rec.incomplete(), record=rec)


def classify(direction: str, change: float, tolerance: float, noise: float = 0.0) -> str:
    """A change at least `tolerance` (the boundary counts) and beyond `noise`, the runs' own spread, is
    a regression or an improvement by its direction; one within the spread is "noise". The spread is
    compared as a factor either way (a time 1.9x as long is a bandwidth 1/1.9 as high): `noise` 0.9 covers
    changes from /1.9 to x1.9, so a 10x drop of a rate stands out of a spread of +-90% in its times."""
    worse = -change if direction == HIGHER else change
    if abs(worse) < tolerance - 1e-12:
        return "same"
    if change > -1 and math.isfinite(change) and abs(math.log1p(change)) <= math.log1p(noise):
        return "noise"
    return "regression" if worse > 0 else "improvement"


def relative(baseline: float, current: float) -> float:
    if baseline == current:
        return 0.0
    if baseline == 0:
        return math.copysign(math.inf, current)
    return (current - baseline) / abs(baseline)


def _directional(verdicts: list[VerdictEntry] | None) -> dict[str, VerdictEntry]:
    """Directional verdicts by metric, and by subject where there is one (`h2d[GPU3]`)."""
    return {_key(v): v for v in _own(verdicts) if v.get("op") in _DIRECTION}


def _own(verdicts: list[VerdictEntry] | None) -> list[VerdictEntry]:
    """The verdicts of the item's own measurement: not those a --compare run judged against its baseline."""
    return [v for v in verdicts or [] if isinstance(v, dict) and isinstance(v.get("metric"), str)
            and not str(v.get("origin") or "").startswith("--compare ")]


def _size(value: Any) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return re.sub(r"^(\d+)(\D+)$", r"\1 \2", format_size(value))  # 1 MiB
    return "no size" if value is None else fmt(value)


def judged_otherwise(baseline: Mapping[str, Any], current: Mapping[str, Any]) -> str | None:
    """Why two results of one item were measured differently, so that their numbers are not comparable:
    another judged size (`judged at 1 MiB in the baseline, 16 MiB now`) or other params; None if neither."""
    before, now = baseline.get("judged_at"), current.get("judged_at")
    if before != now and (before is not None or now is not None):
        return f"judged at {_size(before)} in the baseline, {_size(now)} now"
    old, new = baseline.get("params"), current.get("params")
    if not isinstance(old, dict) or not isinstance(new, dict):
        return None
    text = {k: (json.dumps(old.get(k), sort_keys=True, default=str), json.dumps(new.get(k), sort_keys=True, default=str))
            for k in sorted(map(str, old.keys() | new.keys()))}
    differ = [f"{k} {was[:40]} -> {now[:40]}" for k, (was, now) in text.items() if was != now]
    return "run with other params than the baseline: " + "; ".join(differ) if differ else None


def _number(value: Any) -> float | None:
    """A measured value that can be compared: a finite number (not a bool, text, NaN or infinity)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def spread(entry: Mapping[str, Any], v: Mapping[str, Any]) -> float:
    """How much this metric varied within its own run, relative to its value: 2 x the coefficient of
    variation of the per-iteration times (collectives: `iter_cv` at the judged size), or, for a per-GPU
    (per-pair) metric, half the min..max range of its samples over their median. 0 when not recorded."""
    subject = v.get("subject")
    if subject:
        for row in entry.get("rows") or []:
            if isinstance(row, dict) and row.get("subject") == subject and row.get("metric") == v.get("metric"):
                lo, hi, mid = (_number(row.get(k)) for k in ("min", "max", "median"))
                if lo is not None and hi is not None and mid:
                    return max(0.0, (hi - lo) / 2 / abs(mid))
        return 0.0
    cv = _number(((entry.get("metrics") or {}).get("iter_cv") or {}).get("value"))
    return NOISE_CVS * cv if cv is not None and cv >= 0 else 0.0


def _latency(entry: Mapping[str, Any], v: Mapping[str, Any]) -> bool:
    """A time judged at a latency-bound size (the judged size below LATENCY_BYTES)."""
    size = entry.get("judged_at")
    family = UNITS.get(v.get("unit") or "", ("", 0.0))[0]
    return family == "time" and isinstance(size, int) and 0 < size < LATENCY_BYTES


def _key(v: Mapping[str, Any]) -> str:
    return v["metric"] + (f"[{v['subject']}]" if v.get("subject") else "")


def failed_now(item: str, baseline: Mapping[str, Any], current: Mapping[str, Any]) -> list[tuple[str, str]]:
    """What got worse whatever the tolerance: a verdict that passed in the baseline and fails now (an `==`
    limit too), a `#wrong` count that rose, or an item that passed and now fails."""
    old = {_key(v): v for v in baseline.get("verdicts") or [] if isinstance(v.get("metric"), str)}
    out = []
    for v in current.get("verdicts") or []:
        if not isinstance(v.get("metric"), str):
            continue
        o = old.get(_key(v))
        if o is None:
            continue
        before, now = _number(o.get("measured")), _number(v.get("measured"))
        if o.get("passed") is True and v.get("passed") is not True:
            out.append((item, f"{_key(v)} passed in the baseline ({fmt(o.get('measured'))}), fails now "
                              f"({fmt(v.get('measured'))} {v.get('unit', '')}, {v.get('expression') or v.get('op')})"))
        elif v["metric"] == "wrong" and before is not None and now is not None and now > before:
            out.append((item, f"{_key(v)} rose: {fmt(before)} -> {fmt(now)} wrong element(s)"))
    if not out and baseline.get("outcome") == "passed" and current.get("outcome") == "failed":
        out.append((item, "passed in the baseline, fails now"))
    return out


def match(item: str, baseline: Mapping[str, Any], current: Mapping[str, Any],
          tolerance: float) -> tuple[list[Change], list[tuple[str, str]]]:
    """One item's result against the baseline's (each a result line, or its verdicts, metrics, rows and
    judged size): a Change per metric judged the same way in both, and (item, why) for each that cannot
    be compared. `compare` reports both; `--compare` judges the changes."""
    old_v, new_v = _directional(baseline.get("verdicts")), _directional(current.get("verdicts"))
    changes: list[Change] = []
    # a verdict (a metric, a GPU's) the baseline had and this run has not: named, never silence
    now_keys = {_key(v) for v in _own(current.get("verdicts"))}
    skipped = [(item, f"{key}: not in this run") for key in dict.fromkeys(map(_key, _own(baseline.get("verdicts"))))
               if key not in now_keys]
    otherwise = judged_otherwise(baseline, current)  # another size or other params: nothing is comparable
    for key, v in new_v.items():
        o = old_v.get(key)
        if o is None:
            skipped.append((item, f"{key}: not judged in the baseline"))
            continue
        if otherwise:
            skipped.append((item, f"{key}: {otherwise}"))
            continue
        if o["unit"] != v["unit"]:
            skipped.append((item, f"{key}: in {o['unit']} in the baseline, {v['unit']} now"))
            continue
        direction = _DIRECTION[v["op"]]
        if _DIRECTION[o["op"]] != direction:
            skipped.append((item, f"{key}: limit direction changed ({o['op']} -> {v['op']})"))
            continue
        before, now = _number(o.get("measured")), _number(v.get("measured"))
        if before is None or now is None:
            bad = "the baseline" if before is None else "this run"
            skipped.append((item, f"{key}: {bad} measured {fmt(o.get('measured') if before is None else v.get('measured'))}, "
                                  "not a number"))
            continue
        if before == 0 and now != 0:  # a change from nothing is no ratio: said, never an infinite percentage
            skipped.append((item, f"{key}: the baseline measured 0 {v['unit']}, nothing to compare a change with"))
            continue
        change = relative(before, now)
        noise = max(spread(baseline, o), spread(current, v))
        kind = "latency" if _latency(current, v) else classify(direction, change, tolerance, noise)
        changes.append(Change(item, key, v["unit"], direction, before, now, change, kind, v["metric"],
                              v.get("subject"), noise))
    return changes, skipped


def compare(baseline: Run, current: Run, tolerance: float = DEFAULT_TOLERANCE) -> Comparison:
    if not tolerance >= 0 or not math.isfinite(tolerance):
        raise UserError(f"tolerance must be a finite fraction >= 0, got {tolerance!r}")
    # a repeated run (a burn-in) is each item's worst repetition (burnin.folded), the baseline's and this
    # run's alike: the last repetition of a baseline would read an item that failed in repetition 2 as passed
    before = {item_id(r): r for r in folded(baseline.results)}
    now_results = folded(current.results)
    both = set(baseline.suites()) & set(current.suites())
    changes: list[Change] = []
    not_compared: list[tuple[str, str]] = []
    worse: list[tuple[str, str]] = []
    unmeasured: list[tuple[str, str]] = []
    other = 0
    seen = set()
    for r in now_results:
        item = item_id(r)
        seen.add(item)
        old = before.get(item)
        in_both = item.split("::")[0] in both
        worse += failed_now(item, old, r) if old is not None and in_both else []
        # an error now is never silence, whatever the baseline said (a failure there proves nothing now), in a
        # suite the baseline did not run too
        if r.get("outcome") == "error" or old and old.get("outcome") == "passed" and r.get("outcome") == "skipped":
            said = str(r.get("message") or "").strip().splitlines()
            was = f"{old['outcome']} in the baseline" if old else \
                "not in the baseline" if in_both else "in a suite the baseline did not run"
            unmeasured.append((item, f"{was}, {r['outcome']} now" + (f": {said[0]}" if said else "")))
            continue  # nothing of it to compare: said once, here
        if not in_both:
            other += 1  # a suite the baseline did not run: said once, in one line, not item by item
            continue
        if old is None:
            not_compared.append((item, "not in the baseline"))
            continue
        has_old, has_new = bool(_directional(old.get("verdicts"))), bool(_directional(r.get("verdicts")))
        # neither has a directional metric: match still names what the baseline judged and this run did not
        if has_old and not has_new:
            not_compared.append((item, f"no measurement in this run ({r['outcome']})"))
            continue
        if has_new and not has_old:
            not_compared.append((item, f"no measurement in the baseline ({old['outcome']})"))
            continue
        found, skipped = match(item, old, r, tolerance)
        changes += found
        not_compared += skipped
    for item in [i for i in before if i not in seen]:
        if item.split("::")[0] in both:
            not_compared.append((item, "not in this run"))
        else:
            other += 1
    # an item of this run that fails is never a pass of compare, whatever the baseline said of it
    named = {item for item, _ in worse}
    failing = [(item_id(r), _failing(r, before.get(item_id(r)), both)) for r in now_results
               if r.get("outcome") == "failed" and item_id(r) not in named]
    return Comparison(baseline, current, tolerance, changes, not_compared, worse, unmeasured, failing=failing,
                      other_suites=other, software=software_changes(baseline, current))


def _failing(r: Mapping[str, Any], old: Mapping[str, Any] | None, both: set[str]) -> str:
    if item_id(r).split("::")[0] not in both:
        return "fails now, in a suite the baseline did not run"
    return "fails now, not in the baseline" if old is None else f"fails now, {old.get('outcome')} in the baseline"


def software_changes(baseline: Run, current: Run) -> list[tuple[str, str | None, str | None]]:
    """What the two runs measured with that differs (record/statement.py `versions`): a regression
    that comes with a new NCCL or driver is first of all that."""
    old = versions(baseline.header, baseline.results)
    new = versions(current.header, current.results)
    return [(name, old.get(name), now) for name, now in new.items() if old.get(name) != now]


def software_line(changes: list[tuple[str, str | None, str | None]], against: str = "") -> str:
    """`software differs{against}: nccl 2.28.9 -> 2.30.7, ...` (software_changes's list)."""
    return f"software differs{against}: " + ", ".join(f"{name} {before or 'unknown'} -> {now or 'unknown'}"
                                                      for name, before, now in changes)


def software_since(baseline: Run, record: Path) -> str | None:
    """The line `run --compare` ends its summary with: the software that differs from the baseline's;
    None where none does, or where this run's record cannot be read now (its reports say why)."""
    try:
        changed = software_changes(baseline, load_run(record))
    except UserError:
        return None
    return software_line(changed, " from the baseline") if changed else None


