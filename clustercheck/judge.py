"""Judging on the controller: which rules apply to a check, its kind's verdicts from the ranks' answers,
and, with `--compare`, one verdict per metric against the same item of a saved run."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from clustercheck.checks import KINDS, Answers, Rules
from clustercheck.compare import HIGHER, Change, load_run, match
from clustercheck.errors import NoThreshold, UserError
from clustercheck.paths import display
from clustercheck.record import ResultEntry, item_id
from clustercheck.results import Measurement
from clustercheck.suite import CheckSpec
from clustercheck.thresholds import Limit, Profile
from clustercheck.units import UNITS, fmt
from clustercheck.verdicts import Verdict, of_limit


@dataclass(frozen=True)
class Outcome:
    """One item's measurement, its verdicts and the pool that measured it."""

    measurement: Measurement
    verdicts: list[Verdict]
    pool: dict[str, Any]


def check_metrics(check: CheckSpec, profile: Profile) -> None:
    """Every limit the profile sets for `check` names a metric its kind reports, in a compatible unit."""
    known = KINDS[check.measure].metrics
    for metric, limit in (profile.limits_for(check.id) or {}).items():
        file, _, line = limit.origin.rpartition(":")
        if metric not in known:
            raise UserError(f"{check.measure} reports no metric {metric!r} (it reports {', '.join(known)})",
                            file=file, line=int(line), key=f"checks.{check.id}.{metric}")
        if UNITS[limit.unit][0] != UNITS[known[metric]][0]:
            raise UserError(f"unit {limit.unit} does not fit {metric}, which is measured in {known[metric]}",
                            file=file, line=int(line), key=f"checks.{check.id}.{metric}.unit")


def rules_for(check: CheckSpec, profile: Profile) -> Rules:
    """The profile's limits for `check`; a kind judged by limits with none is an error, never a pass."""
    limits = profile.limits_for(check.id) or {}
    if KINDS[check.measure].limited and not limits:
        raise NoThreshold(f"no threshold for check {check.id!r} on platform {profile.name!r} "
                          f"({profile.file}); add one under checks.{check.id}")
    origin = f"{profile.file} expect" if profile.expect else "the probe's built-in expectation"
    return Rules(limits, origin)


def judge(answers: Answers, rules: Rules, pool: dict[str, Any]) -> Outcome:
    measurement, verdicts = KINDS[answers.check.measure].judge(answers, rules)
    return Outcome(measurement, verdicts, pool)


class Baseline:
    """A saved run that each item is also judged against (`--compare`)."""

    def __init__(self, arg: str, history: Any, tolerance: float) -> None:
        run = load_run(arg, history)
        self.items: dict[str, ResultEntry] = {item_id(r): r for r in run.results}
        self.origin = f"--compare {display(run.path)}"
        self.tolerance = tolerance

    def regressions(self, check: CheckSpec, item: str, verdicts: list[Verdict]) -> list[Verdict]:
        """One verdict per directional metric that the baseline judged the same way: the relative change,
        failing when it got worse by the tolerance or more."""
        old = self.items.get(item)
        if old is None:
            return []
        changes, _ = match(item, old.get("verdicts"), [v.as_dict() for v in verdicts], self.tolerance)
        return [self._verdict(check, c) for c in changes]

    def _verdict(self, check: CheckSpec, c: Change) -> Verdict:
        op, bound = (">=", -self.tolerance) if c.direction == HIGHER else ("<=", self.tolerance)
        limit = Limit(check.id, f"{c.name} vs baseline", op, bound, "ratio", f"change {op} {bound:+.0%}",
                      f"baseline measured {fmt(c.baseline)}", self.origin)
        verdict = of_limit(limit.metric, c.change, limit, subject=c.subject)
        # the tolerance is the boundary itself: exactly 5% worse is a regression (compare.classify)
        return Verdict(verdict.metric, verdict.measured, verdict.unit, limit, c.kind != "regression",
                       verdict.margin, subject=c.subject)
