"""Judging on the controller: which rules apply to a check, its kind's verdicts from the ranks' answers,
and, with `--compare`, one verdict per metric against the same item of a saved run."""

from __future__ import annotations

import difflib
from dataclasses import replace
from typing import Any, Mapping, Sequence

import hostlist

from clustercheck.errors import HarnessError, NoThreshold, Skip, UserError
from clustercheck.judging.fabric import RunFabric, multi_node
from clustercheck.judging.limits import Limit, domain_problem
from clustercheck.judging.measurement import Outcome
from clustercheck.judging.thresholds import Profile
from clustercheck.judging.verdicts import Expectation, Verdict, of_limit
from clustercheck.kinds import KINDS
from clustercheck.kinds.base import Answers, Rules
from clustercheck.paths import display
from clustercheck.record.burnin import folded
from clustercheck.record.compare import REPEATED, load_run
from clustercheck.record.likeness import measured_elsewhere
from clustercheck.record.match import UNJUDGED, Change, band, matched
from clustercheck.record.schema import ResultEntry, item_id
from clustercheck.kinds.base import CheckSpec
from clustercheck.units import UNITS, convert, fmt


def applicable_limits(check: CheckSpec, profile: Profile) -> tuple[dict[str, Limit], str]:
    """The limits that judge `check`, and why there are none when there are none. The most specific rule
    wins: the profile's `checks.<check id>`; else the entry the suite names (`limits: <check id>`); else
    `defaults.<measure kind>` when the check fits its `when:`. Each Limit's origin says which rule it is."""
    own = profile.limits_for(check.id)
    if own is not None:
        return own, ""
    if check.limits:
        named = profile.limits_for(check.limits)
        if named is None:
            raise _unknown_limits(check, profile)
        via = f", named by {check.file}:{check.limits_line} limits"
        return {m: replace(lim, check=check.id, origin=lim.origin + via) for m, lim in named.items()}, ""
    default = profile.defaults.get(check.measure)
    if default is None:
        return {}, ""
    why = default.misfit(check.params)
    if why:
        return {}, f"; defaults.{check.measure} ({profile.file}:{default.line}) {why}"
    return {m: replace(lim, check=check.id) for m, lim in default.limits.items()}, ""


def _unknown_limits(check: CheckSpec, profile: Profile) -> UserError:
    known = ", ".join(sorted(profile.limits)) or "none"
    return UserError(f"check {check.id!r} names limits {check.limits!r}, which platform {profile.name!r} "
                     f"({profile.file}) does not have under checks: (it has: {known})",
                     file=check.file, line=check.limits_line or check.line, key="limits")


def check_profile(profile: Profile) -> None:
    """What can be checked of a profile without a suite (`run` before any check, `platforms show`): every
    `defaults.<kind>` names a measure kind, and metrics it reports in a fitting unit and domain; every
    `checks.<id>.<metric>` is a metric some kind reports (which kind a check id is, only a suite says)."""
    _check_defaults(profile)
    _check_reported(profile)


def _check_defaults(profile: Profile) -> None:
    for kind, default in profile.defaults.items():
        if kind not in KINDS:
            hint = difflib.get_close_matches(kind, sorted(KINDS), n=1)
            raise UserError(f"no measure kind {kind!r}" + (f"; did you mean {hint[0]!r}?" if hint else "")
                            + f" (known: {', '.join(sorted(KINDS))})",
                            file=profile.file, line=default.line or None, key=f"defaults.{kind}")
        _fits(kind, default.limits)


def _check_reported(profile: Profile) -> None:
    reported = sorted({metric for kind in KINDS.values() for metric in kind.metrics})
    for limits in profile.limits.values():
        for metric, limit in limits.items():
            if metric not in reported:  # `bsubw` would never judge anything, and no check would say so
                hint = difflib.get_close_matches(metric, reported, n=1)
                raise UserError(f"no measure kind reports a metric {metric!r}"
                                + (f"; did you mean {hint[0]!r}?" if hint else ""),
                                file=limit.file or None, line=limit.line or None, key=limit.key or None)


def check_run(checks: Sequence[CheckSpec], profile: Profile) -> list[str]:
    """`check_metrics` of each check of a run, then its warnings (`near_misses`): a line each, for the summary."""
    for check in checks:
        check_metrics(check, profile)
    return near_misses(checks, profile)


def near_misses(checks: Sequence[CheckSpec], profile: Profile) -> list[str]:
    """A warning for each check of the run judged by `defaults.<kind>` whose id the profile's checks: nearly
    names under an id no check of the run has (`allreduce-swep`): the check then meets the looser default,
    silently. Never a refusal: a profile shared by several suites names checks of the others."""
    out: list[str] = []
    run_ids = {c.id for c in checks}
    for check in {c.id: c for c in checks}.values():
        default = profile.defaults.get(check.measure)
        if default is None or check.limits or profile.limits_for(check.id) is not None:
            continue
        near = profile.near_miss(check.id, run_ids)
        if near is not None and not any(f"names {near!r}," in line for line in out):  # once per run
            out.append(f"warning: check {check.id!r} ({check.where}) is judged by defaults.{check.measure} "
                       f"({profile.file}:{default.line}), and {profile.file}:{profile.lines.get(near, 0)} checks: "
                       f"names {near!r}, which no check of this run has: a misspelling of {check.id!r}?")
    return out


def check_metrics(check: CheckSpec, profile: Profile) -> None:
    """Every limit that judges `check`, and every `defaults:` entry of the profile, names a metric its kind
    reports, in a compatible unit; a suite's `limits:` names an entry the profile has; and `check_profile`."""
    _check_defaults(profile)
    limits, _ = applicable_limits(check, profile)
    borrowed = check.limits and profile.limits_for(check.id) is None
    _fits(check.measure, limits, f" (check {check.id!r} of {check.where} names it in limits:)" if borrowed else "",
          check)
    _check_reported(profile)  # after the check's own limits: those are named with their kind's metrics


def _fits(kind: str, limits: dict[str, Limit], note: str = "", check: CheckSpec | None = None) -> None:
    """Every limit names a metric `kind` reports, in a unit of its family, and can fail and pass within its
    domain; a ceiling on a time can fail within `check`'s timeout (`time_us <= 1e300` judges nothing)."""
    known = KINDS[kind].metrics
    for metric, limit in limits.items():
        key = limit.key or f"checks.{limit.check}.{metric}"
        if metric not in known:
            raise UserError(f"{kind} reports no metric {metric!r} (it reports {', '.join(known) or 'none'}){note}",
                            file=limit.file or None, line=limit.line or None, key=key)
        if UNITS[limit.unit][0] != UNITS[known[metric]][0]:
            raise UserError(f"unit {limit.unit} does not fit {metric}, which is measured in {known[metric]}{note}",
                            file=limit.file or None, line=limit.line or None, key=f"{key}.unit")
        low, high = KINDS[kind].domain(metric)  # `p2p_min_ratio >= 0` passes a dead link; `iter_cv <= 1e300` too
        problem = domain_problem(limit.op, convert(limit.value, limit.unit, known[metric]), low, high)
        if problem:
            raise UserError(f"{metric} ({known[metric]}): {problem}{note}", file=limit.file or None,
                            line=limit.line or None, key=f"{key}.limit")
        if check is not None and (problem := _past_timeout(check, limit, known[metric])):
            raise UserError(f"{metric} ({known[metric]}): {problem}{note}", file=limit.file or None,
                            line=limit.line or None, key=f"{key}.limit")


def _past_timeout(check: CheckSpec, limit: Limit, unit: str) -> str | None:
    """Why a ceiling on a time at or above the check's timeout judges nothing, or None: a measurement that
    long never comes back (the item is a hang, an error), so the ceiling can never fail."""
    if UNITS[unit][0] != "time" or limit.op not in ("<=", "<"):
        return None
    if convert(limit.value, limit.unit, "s") < check.timeout:
        return None
    return (f"'{limit.expression}' ({limit.unit}) is at or above the timeout of check {check.id!r} "
            f"({fmt(check.timeout)} s, {check.where}): a measurement that long is a hang, never a pass, so it judges "
            "nothing")


def rules_for(check: CheckSpec, profile: Profile, run: RunFabric | None = None) -> Rules:
    """The profile's limits for `check`; a kind judged by limits with none is an error, never a pass.

    A collective whose items span several nodes (`run` says how many the run has) is bounded by the
    network: the profile's one-node floors (defaults:) never judge it, the fabric floor does
    (judging/fabric.py), unless the profile names the check itself under checks: or the suite borrows
    an entry with limits:."""
    expect = dict(run.expect) if run is not None else dict(profile.expect)
    multi = run is not None and multi_node(check.scope, run.nodes)
    if run is not None and by_fabric_floor(check, profile, run.nodes):
        limits, why = {"busbw": _fabric_floor(check, profile, run)}, ""
    else:
        limits, why = applicable_limits(check, profile)
    if KINDS[check.measure].limited and not limits:
        raise NoThreshold(f"no threshold for check {check.id!r} on platform {profile.name!r} ({profile.file}){why}; "
                          f"add one under checks.{check.id} or defaults.{check.measure}")
    origin = f"{profile.file} expect" if profile.expect else "the probe's built-in expectation"
    default = profile.defaults.get(check.measure)
    from_defaults = default is not None and bool(limits) and all(lim.key.startswith("defaults.")
                                                                  for lim in limits.values())
    at = f"{profile.file}:{default.line}" if default is not None and from_defaults else ""
    return Rules(limits, origin, expect, multi, at)


def by_fabric_floor(check: CheckSpec, profile: Profile, nodes: int) -> bool:
    """Whether the fabric floor judges `check` on a run of `nodes` nodes: a collective whose items span several
    nodes, with no limits of its own (the profile's checks.<id>, or an entry the suite borrows with limits:)."""
    explicit = profile.limits_for(check.id) is not None or bool(check.limits)
    return multi_node(check.scope, nodes) and check.measure in COLLECTIVES and not explicit


def fabric_of_header(header: Mapping[str, Any], profile: Profile) -> RunFabric:
    """A recorded run's fabric context, as its session had it: its nodes' facts, backend and --expect."""
    from clustercheck.judging.fabric import run_fabric

    nodes = header.get("node_facts") or {str((header.get("facts") or {}).get("host") or "node"): header.get("facts") or {}}
    expect = {**profile.expect, **(header.get("expect") or {})}
    return run_fabric(nodes, str(header.get("backend") or "gloo"), expect, profile.fabric)


COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "alltoall", "broadcast", "reduce", "sendrecv")


def _fabric_floor(check: CheckSpec, profile: Profile, run: RunFabric) -> Limit:
    """The fabric floor of a multi-node collective; NoThreshold ('not judged: ...') when it has none."""
    from clustercheck import units
    from clustercheck.judging.fabric import FabricRule, floor, line_rate, ring_problem

    rule = profile.fabric or FabricRule()
    limit = floor(rule, check.measure, line_rate(run.expect, rule, run.node_rate), check.id)
    if isinstance(limit, str):
        raise NoThreshold(f"{check.id}: {limit}")
    judged = check.params.get("judge_at")
    if isinstance(judged, int) and judged < rule.min_size:
        raise NoThreshold(f"{check.id}: not judged: judged at {units.format_size(judged)}, below the "
                          f"{units.format_size(rule.min_size)} the fabric rule ({rule.origin}) judges at, where busbw "
                          f"has reached its plateau; judge the check at a larger size or set the rule's min_size")
    problem = ring_problem(check.measure, run.backend, dict(check.env))
    if problem:
        raise NoThreshold(f"{check.id}: {problem}")
    return limit


# What a kind's judge raises on answers it cannot read (a rank's answer without a key, a string for a number,
# no first answer for next()): evidence/rejudge.py catches the same on a recorded run
UNREADABLE = (KeyError, TypeError, ValueError, IndexError, AttributeError, ZeroDivisionError, StopIteration)


def judge(answers: Answers, rules: Rules, pool: dict[str, Any]) -> Outcome:
    try:
        measurement, verdicts = KINDS[answers.check.measure].judge(answers, rules)
    except UNREADABLE as exc:  # one line for this item, never a traceback in every report: the harness could not judge
        where = hostlist.collect_hostlist(sorted(set(answers.hosts))) or "no host"
        raise HarnessError(f"{answers.check.id} on {where}: the ranks' answers cannot be judged "
                           f"({type(exc).__name__}: {str(exc)[:80]})") from None
    verdicts = [_in_domain(answers.check.measure, v) for v in verdicts]
    hosts = hostlist.collect_hostlist(sorted(set(answers.hosts))) if measurement.notes else ""
    return Outcome(measurement, verdicts, pool, answers.per_rank, tuple(f"{hosts}: {n}" for n in measurement.notes))


def _in_domain(kind: str, v: Verdict) -> Verdict:
    """A measured number outside what its metric can take (a p2p_min_ratio of 1.5: the worst pair above the
    median) is a broken measurement, never a pass, as a NaN or a negative bandwidth is (units.out_of_domain)."""
    metrics = KINDS[kind].metrics
    if not isinstance(v.rule, Limit) or not isinstance(v.measured, (int, float)) or v.metric not in metrics:
        return v
    low, high = KINDS[kind].domain(v.metric)
    value = convert(v.measured, v.unit, metrics[v.metric])
    if not low <= value <= high:  # a NaN fails here too; its limit verdict failed already
        return replace(v, passed=False, margin=None, detail=v.detail or f"{fmt(value)} {metrics[v.metric]} is out of "
                       f"the domain of {v.metric} ({fmt(low)} to {fmt(high)}): a broken measurement")
    return v


class Baseline:
    """A saved run that each item is also judged against (`--compare`)."""

    def __init__(self, arg: str, history: Any, tolerance: float) -> None:
        self.run = run = load_run(arg, history)
        # a repeated baseline (a burn-in) is each item's worst repetition and each metric its worst value
        # (burnin.folded), never its last:
        # an item that failed in repetition 2 and passed in 3 failed in the baseline
        self.items: dict[str, ResultEntry] = {item_id(r): r for r in folded(run.results)}
        self.origin = f"--compare {display(run.path)}"
        self.tolerance = tolerance
        self.now: Mapping[str, Any] = {}  # this run's header, once written: what a like-for-like item shares
        self.unfit: dict[str, str] = {}  # item -> why the baseline is no reference for it (regressions)

    def said(self, platform: str, results: list[ResultEntry]) -> list[str]:
        """What the run's end says of the baseline where it is no like-for-like reference, one line each: a
        verdict that is no PASS (INCOMPLETE, FAIL, ERROR), another platform, no item in common with this
        run (`results`): its numbers are then no reference for a pass; and the items that passed in it and
        that this run lacks (in a suite it ran), which nothing measured now."""
        from clustercheck.record.compare_report import verdict_line

        run = self._judged_run()
        out = [line] if (line := verdict_line(run)) else []
        if reps := max((int(r.get("repeat") or 0) for r in run.results), default=0):
            out.append(f"the baseline repeated ({reps} repetition(s)): {REPEATED}")
        return out + self._unfit(platform, results)

    def judged(self, results: list[ResultEntry]) -> dict[str, Any]:
        """What the record's end line keeps of the baseline (`compare`), which report/status.run_status judges
        the run by, as `clustercheck compare` would: `not_judged`, why it is no reference for a pass (its
        verdict FAIL or ERROR, another platform, no item in common, items that passed in it and are not
        measured now, items not compared against it): the run is an ERROR at best; `incomplete`: the baseline
        did not finish, and the run is INCOMPLETE, as compare exits 2. In the record, so that every report, and
        `clustercheck report` later, says what the exit code says."""
        from clustercheck.record.compare_report import verdict_line

        run, platform = self._judged_run(), str(self.now.get("platform") or "")  # this run's header
        unfit = [line] if run.verdict in ("FAIL", "ERROR") and (line := verdict_line(run)) else []
        return {"baseline": display(run.path.parent), "not_judged": unfit + self._unfit(platform, results),
                **({"incomplete": run.incomplete} if run.incomplete else {})}

    def _judged_run(self) -> Any:
        from clustercheck.report.status import run_status

        run = self.run
        return replace(run, verdict=run_status(run.record)["verdict"]) if run.record is not None and not run.verdict \
            else run

    def _unfit(self, platform: str, results: list[ResultEntry]) -> list[str]:
        run, out = self.run, []
        if platform and run.platform() != platform:
            out.append(f"platforms differ from the baseline: {run.platform()} -> {platform}")
        if results and not any(item_id(r) in self.items for r in results):
            out.append(f"no item of this run is in the baseline ({display(run.path.parent)}): nothing was compared")
        if missing := self.missing(results):  # a node or item the baseline measured and this run did not
            out.append(f"{len(missing)} item(s) passed in the baseline and are not in this run (not measured now): "
                       + ", ".join(missing[:8]) + (", ..." if len(missing) > 8 else ""))
        if self.unfit:  # failed there, or measured on other nodes, ranks or hardware: each item has its note
            out.append(f"{len(self.unfit)} item(s) not compared against the baseline: "
                       + "; ".join(f"{i}: {why}" for i, why in list(self.unfit.items())[:4])
                       + ("; ..." if len(self.unfit) > 4 else ""))
        return out

    def missing(self, results: list[ResultEntry]) -> list[str]:
        """The baseline's items that passed there that this run has no result of, in a suite this run ran or
        not (a suite dropped from the run hides nothing): never measured now, so never a pass of them
        (`clustercheck compare` exits 3 for each)."""
        ids = {item_id(r) for r in results}
        return [i for i, r in self.items.items() if i not in ids and r.get("outcome") == "passed"]

    def skipped_now(self, item: str, exc: Exception) -> Exception:
        """What an item that did not measure raises: a skip of one that passed in the baseline is not judged,
        a harness error (what passed is not known to pass still: `clustercheck compare` exits 3 for it)."""
        old = self.items.get(item)
        if isinstance(exc, Skip) and old is not None and old.get("outcome") == "passed":
            return HarnessError(f"not judged: passed in the baseline ({self.origin}), skipped now: {exc}")
        return exc

    def regressions(self, check: CheckSpec, item: str, outcome: Outcome, nodes: Sequence[str] = ()
                    ) -> tuple[list[Verdict], tuple[str, ...]]:
        """One verdict per directional metric that the baseline judged the same way: the relative change in
        percent, failing when it got worse by the tolerance or more and beyond the baseline's own spread
        (record.compare.match); a latency-bound time is left to its own limit. And a note per thing that
        could not be compared (an item or metric not in the baseline, another judged size or params, a
        value that is not a number), which every report shows on the item: never silence. The item was
        judged by its own limits all the same, so a note, not a failed verdict."""
        old = self.items.get(item)
        if old is None:
            return [], (f"not compared: not in the baseline ({self.origin})",)  # each said as `<nodes>: ...`
        if old.get("outcome") in ("failed", "error"):  # what failed there is no reference for a pass now
            self.unfit[item] = f"{old['outcome']} in the baseline: a baseline failure is no reference"
            return [], (f"not compared: {old['outcome']} in the baseline ({self.origin}): a baseline failure is no "
                        "reference",)
        platform = str(self.now.get("platform") or "")
        if platform and self.run.platform() != platform:  # as `clustercheck compare` (record/likeness.py)
            return [], (f"not compared: the baseline is of another platform ({self.run.platform()} -> {platform}; "
                        f"{self.origin})",)
        # the ranks it measured with (its pool's): a node's all_reduce over 8 ranks then and 2 now is not compared
        here = {"nodes": list(nodes), "node": old.get("node"), "scope": check.scope, "pool": outcome.pool}
        if self.now and (elsewhere := measured_elsewhere(old, here, self.run.header, self.now)):  # type: ignore[arg-type]
            self.unfit[item] = elsewhere
            return [], (f"not compared: {elsewhere} ({self.origin})",)
        m = outcome.measurement
        now = {"verdicts": [v.as_dict() for v in outcome.verdicts], "rows": m.rows, "judged_at": m.judged_at,
               "measure": check.measure,
               "params": dict(check.params),
               "metrics": {k: {"value": v, "unit": m.units.get(k, "")} for k, v in m.metrics.items()}}
        seen = matched(item, old, now, self.tolerance)
        # a latency-bound time is judged by its limit only: said on the item, as compare counts it, never dropped
        latency = [f"{c.metric}: latency-bound size ({c.percent()}), judged by its limit only"
                   for c in seen.changes if c.kind == "latency"]
        notes = tuple(dict.fromkeys(f"not compared with the baseline: {why}" for why in [*(w for _, w in seen.skipped),
                                                                                            *latency]))
        verdicts = [self._verdict(check, c) for c in seen.changes if c.kind not in ("latency", UNJUDGED)]
        return verdicts + self._unjudged(check, item, outcome, verdicts, seen.changes, [w for _, w in seen.lost]), notes

    def _unjudged(self, check: CheckSpec, item: str, outcome: Outcome, verdicts: list[Verdict],
                  changes: list[Change], lost: list[str]) -> list[Verdict]:
        """A change for the worse within the run's own spread, too wide to tell a regression, and what the
        baseline judged that this run cannot be held to (a metric or GPU missing now, another unit family):
        never a pass. The item is a harness error (`not judged: ...`, as `clustercheck compare` exits 3 for
        either), unless it fails already: then a `not judged` verdict says so beside the failure."""
        noisy = [f"{c.metric}: {fmt(c.baseline)} -> {fmt(c.current)} {c.unit} ({c.percent()}){c.why()}"
                 for c in changes if c.kind == UNJUDGED]
        gone = [f"{why} (judged in the baseline)" for why in lost]
        if not noisy and not gone:
            return []
        if all(v.passed for v in [*outcome.verdicts, *verdicts]):
            raise HarnessError(f"{item}: not judged against the baseline ({self.origin}): {'; '.join(noisy + gone)}")
        told = Expectation(check.id, "vs baseline", "a change told from the run's own noise", self.origin)
        held = Expectation(check.id, "vs baseline", "what the baseline judged, judged now", self.origin)
        return [Verdict("vs baseline", "not judged", "", rule, False, detail=why)
                for rule, said in ((told, noisy), (held, gone)) for why in said]

    def _verdict(self, check: CheckSpec, c: Change) -> Verdict:
        op, bound, unit, measured, expression = c.bound(self.tolerance)  # from 0: this run's value, in its unit
        limit = Limit(check.id, f"{c.name} vs baseline", op, bound, unit, expression,
                      f"baseline measured {fmt(c.baseline)} {c.unit}", self.origin)
        verdict = of_limit(limit.metric, measured, limit, subject=c.subject)
        # the tolerance is the boundary itself: exactly 5% worse is a regression (match.classify); a change
        # within the baseline's own spread is noise, not a regression, and its row says so (the terminal shows
        # the detail up to its first " (": the spread goes before it)
        noise = f", within the baseline's spread ({band(c.noise)})" if c.kind == "noise" else ""
        return Verdict(verdict.metric, verdict.measured, verdict.unit, limit, c.kind != "regression",
                       None if noise and (verdict.margin or 0) < 0 else verdict.margin,  # none beyond the bound
                       subject=c.subject,
                       detail=f"{fmt(c.baseline)} -> {fmt(c.current)} {c.unit}{noise} ({c.percent()}; {c.direction} "
                              f"is better, at most {self.tolerance * 100:g}% worse allowed{c.why()})")
