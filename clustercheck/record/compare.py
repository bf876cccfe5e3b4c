"""Compare two saved runs: per item and metric, did the measured value get worse beyond a tolerance and
beyond the baseline's own measured spread?

Items are matched by their stable JUnit id (`<suite stem>::<check id>[<node/GPU/pair>]`); metrics are
those with a limit, and the limit's operator gives the direction: `>=`/`>` means higher is better,
`<=`/`<` lower is better. `==` limits (e.g. `wrong == 0`) have no direction and are left to the
verdict itself: a verdict that passed in the baseline and fails now, or a `#wrong` count that rose, is a
regression whatever the tolerance. A change counts only when it is at least the tolerance *and* larger
than the spread the baseline measured for that metric (2 x the coefficient of variation of the per-iteration
times, or half the min..max range of a per-GPU metric's samples), counted up to NOISE_CAP (25%): two runs of
a noisy machine differ by their noise, and that is not a regression. This run's own spread never excuses
a change: where it is wider than NOISE_CAP, a change for the worse within it is not judged (compare exits
3 for it, never 0), and one that stands out even of it is a regression. The time of a collective at a latency-bound size (below
1 MiB) is judged by its limit only. Pure: no pytest, no torch."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from clustercheck.errors import UserError
from clustercheck.record.burnin import folded
from clustercheck.record.io import Record, RecordError, load
from clustercheck.record.likeness import measured_elsewhere
from clustercheck.record.schema import ResultEntry, RunHeader, item_id
from clustercheck.record.statement import versions
from clustercheck.record.match import UNJUDGED, Change, _directional, failed_now, matched

DEFAULT_TOLERANCE = 0.05
REPEATED = "each item is compared with its worst repetition, each metric with its worst value of them all"  # what a report says of a repeated run compared


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
class Comparison:
    baseline: Run
    current: Run
    tolerance: float
    changes: list[Change] = field(default_factory=list)
    not_compared: list[tuple[str, str]] = field(default_factory=list)  # (item, why)
    failed_now: list[tuple[str, str]] = field(default_factory=list)  # (item, what): passed before, fails now
    unmeasured_now: list[tuple[str, str]] = field(default_factory=list)  # (item, why): an error now, or passed and skipped or missing now
    failing: list[tuple[str, str]] = field(default_factory=list)  # (item, why): fails now, not in failed_now
    # items of a suite only one of the runs ran: counted, not listed one by one; but an item that passed in the
    # baseline, of a suite this run did not run, is in unmeasured_now (what passed is not known to pass still)
    other_suites: int = 0
    software: list[tuple[str, str | None, str | None]] = field(default_factory=list)  # (name, before, now)
    # (item, why): not compared, for the baseline is no like-for-like reference for it (it failed or errored
    # there, or was measured on other nodes, ranks or hardware: record/likeness.py): in not_compared too, and compare never exits 0 for one
    no_reference: list[tuple[str, str]] = field(default_factory=list)
    # (item, why): not compared, and in not_compared too, though the baseline judged it: a metric or GPU's verdict
    # missing now, or now of another unit family or limit direction (match.Matched.lost); what was judged there
    # and not now is never a pass: compare exits 3 for it, as for an item not measured now
    lost: list[tuple[str, str]] = field(default_factory=list)

    @property
    def other_platform(self) -> bool:
        """The baseline is of another platform: no reference for a pass (compare exits 3 at best)."""
        return self.baseline.platform() != self.current.platform()

    @property
    def regressions(self) -> list[Change]:
        return [c for c in self.changes if c.kind == "regression"]

    @property
    def worse(self) -> bool:
        """A regression, a verdict that became failed, a #wrong that rose, or any item of this run that
        failed (in the baseline too, or not in it): compare exits 1."""
        return bool(self.regressions or self.failed_now or self.failing)

    @property
    def unjudged(self) -> list[Change]:
        """Changes for the worse within this run's own spread, too wide to tell a regression: compare exits 3."""
        return [c for c in self.changes if c.kind == UNJUDGED]

    @property
    def compared(self) -> bool:
        """Anything was judged against the baseline (compare exits 5 otherwise): a change of a metric that is
        not a latency (a latency-bound time is left to its limit, so it judges nothing here), or a failure now."""
        return any(c.kind != "latency" for c in self.changes) or bool(self.failed_now or self.failing)

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
    if twice := rec.repeated_result():
        raise UserError(f"{record}: not a run record ({twice})")
    return Run(record, rec.header, rec.results, rec.incomplete(), record=rec)


def compare(baseline: Run, current: Run, tolerance: float = DEFAULT_TOLERANCE) -> Comparison:
    if not tolerance >= 0 or not math.isfinite(tolerance):
        raise UserError(f"tolerance must be a finite fraction >= 0, got {tolerance!r}")
    # a repeated run (a burn-in) is each item's worst repetition and each directional metric its worst value
    # of them all (burnin.folded), the baseline's and this run's alike: the last repetition of a baseline
    # would read an item that failed in repetition 2 as passed, the first a drop in repetition 2 as the same
    before = {item_id(r): r for r in folded(baseline.results)}
    now_results = folded(current.results)
    both = set(baseline.suites()) & set(current.suites())
    changes: list[Change] = []
    not_compared: list[tuple[str, str]] = []
    worse: list[tuple[str, str]] = []
    unmeasured: list[tuple[str, str]] = []
    no_reference: list[tuple[str, str]] = []
    lost: list[tuple[str, str]] = []
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
        if old.get("outcome") in ("failed", "error"):  # what failed there is no reference for a pass now
            no_reference.append((item, f"{old['outcome']} in the baseline: a baseline failure is no reference"))
            continue
        if elsewhere := measured_elsewhere(old, r, baseline.header, current.header):  # no like-for-like reference
            no_reference.append((item, elsewhere))
            continue
        has_old, has_new = bool(_directional(old.get("verdicts"))), bool(_directional(r.get("verdicts")))
        # neither has a directional metric: match still names what the baseline judged and this run did not
        if has_old and not has_new:  # what the baseline judged, nothing measured now
            lost.append((item, f"no measurement in this run ({r['outcome']})"))
            not_compared.append(lost[-1])
            continue
        if has_new and not has_old:
            not_compared.append((item, f"no measurement in the baseline ({old['outcome']})"))
            continue
        m = matched(item, old, r, tolerance)
        changes += m.changes
        lost += m.lost
        not_compared += m.lost + m.skipped
    for item in [i for i in before if i not in seen]:
        passed = before[item].get("outcome") == "passed"
        # a node, item or whole suite never measured now is no pass of it: a suite dropped from the run (a CI
        # edit, a renamed suite file) as much as an item left out of a suite both ran, selected out or not
        if passed and item.split("::")[0] not in both:
            unmeasured.append((item, "passed in the baseline, in a suite this run did not run"))
        elif item.split("::")[0] not in both:
            other += 1  # failed, errored or skipped there: no pass is lost, counted in the `suites differ` line
        elif passed:
            unmeasured.append((item, "passed in the baseline, not in this run"))
        else:
            not_compared.append((item, f"not in this run ({before[item].get('outcome')} in the baseline)"))
    # an item of this run that fails is never a pass of compare, whatever the baseline said of it
    named = {item for item, _ in worse}
    failing = [(item_id(r), _failing(r, before.get(item_id(r)), both)) for r in now_results
               if r.get("outcome") == "failed" and item_id(r) not in named]
    return Comparison(baseline, current, tolerance, changes, not_compared + no_reference, worse, unmeasured,
                      failing=failing, other_suites=other, software=software_changes(baseline, current),
                      no_reference=no_reference, lost=lost)


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


