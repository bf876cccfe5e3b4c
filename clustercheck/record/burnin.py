"""Burn-in summaries: a suite repeated (`--repeat N`, `--duration 4h`) gives each item one result per
repetition (`repeat` in the result line); this module folds them into one summary per item: how many
repetitions, how many passed, the pass ratio, the judged metric's min/median/max over the repetitions and
its trend (the last quarter's mean against the first quarter's). An item passes burn-in only when every
repetition passed: one bad hour in four is a bad node (`pass_ratio` below 1 fails it, never averages it
away). No torch, no pytest: reports and plugins read it."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from clustercheck.record.schema import item_id
from clustercheck.units import is_finite_number, is_number


@dataclass(frozen=True)
class ItemSummary:
    item: str                       # <suite stem>::<check id>[<where>]
    node: str | None
    repetitions: int
    passed: int
    failed: int
    errors: int
    skipped: int
    metric: str | None              # the first verdict's metric (the one the check is judged by)
    unit: str
    values: tuple[float, ...]       # that metric per repetition that measured it, in order
    outcomes: tuple[str, ...]       # per repetition, in order
    measured_in: tuple[int, ...] = ()  # the repetition of each value (an errored one has none)
    repeats: tuple[int, ...] = ()   # the repetition of each outcome
    covers: tuple[str, ...] = ()    # a cluster item's nodes (`nodes` of its result; it names no node of its own)

    @property
    def counted(self) -> int:
        """The pass ratio's denominator: every repetition, a skipped one too, once any repetition was
        measured (a repetition skipped beside measured ones is one not judged, never left out); none when
        every repetition skipped (the item was never measured)."""
        return 0 if self.skipped == self.repetitions else self.repetitions

    @property
    def pass_ratio(self) -> float:
        return self.passed / self.counted if self.counted else 0.0

    @property
    def outcome(self) -> str:
        """The item's burn-in outcome: its worst repetition (a failure, else an error), an error when some
        repetitions skipped and others were measured (not judged: a repetition skipped is no pass), a pass
        only when every repetition passed, a skip only when every repetition skipped."""
        if self.failed:
            return "failed"
        if self.errors or (self.skipped and self.skipped < self.repetitions):
            return "error"
        return "passed" if self.passed else "skipped"

    @property
    def spread(self) -> tuple[float, float, float] | None:
        """(min, median, max) of the metric over the repetitions that measured a number (a NaN failed its
        repetition, which the outcomes say; min() and median() would put it anywhere); None when none did."""
        values = [v for v in self.values if math.isfinite(v)]
        if not values:
            return None
        return min(values), statistics.median(values), max(values)

    @property
    def trend(self) -> float | None:
        """Relative change of the last quarter's mean against the first quarter's (4 or more values):
        a card that slows as it heats shows here before it misses its limit."""
        values = [v for v in self.values if math.isfinite(v)]
        n = len(values)
        if n < 4:
            return None
        q = max(1, n // 4)
        first, last = statistics.fmean(values[:q]), statistics.fmean(values[-q:])
        return (last - first) / abs(first) if first else None

    def as_dict(self) -> dict[str, Any]:
        spread = self.spread
        return {"item": self.item, "node": self.node, "repetitions": self.repetitions, "passed": self.passed,
                "failed": self.failed, "errors": self.errors, "skipped": self.skipped, "counted": self.counted,
                "pass_ratio": round(self.pass_ratio, 6), "outcome": self.outcome, "metric": self.metric,
                "unit": self.unit, "values": list(self.values), "outcomes": list(self.outcomes),
                "measured_in": list(self.measured_in),
                "min": spread[0] if spread else None, "median": spread[1] if spread else None,
                "max": spread[2] if spread else None, "trend": self.trend}


def _missing(s: ItemSummary, started: int) -> list[int]:
    """The repetitions, of those the run started, that the item has no result in (the run was cut off:
    every repetition runs the same items)."""
    return sorted(set(range(1, started + 1)) - set(s.repeats or range(1, s.repetitions + 1)))


def _started(summaries: Sequence[ItemSummary]) -> int:
    return max((max(s.repeats or (s.repetitions,)) for s in summaries), default=0)


def repeated(results: Sequence[Mapping[str, Any]]) -> bool:
    """Whether the results come from a repeated run (any result carries its repetition number)."""
    return any(r.get("repeat") for r in results)


def grouped(results: Sequence[Any]) -> dict[str, list[Any]]:
    """item -> its results in repetition order, items in the order they first appear (one pass)."""
    by_item: dict[str, list[Any]] = {}
    for r in results:
        by_item.setdefault(item_id(r), []).append(r)
    return {item: sorted(runs, key=lambda r: r.get("repeat") or 0) for item, runs in by_item.items()}


def summarize(results: Sequence[Mapping[str, Any]]) -> list[ItemSummary]:
    """One summary per item, in the order items first appear."""
    return [_summary(item, runs) for item, runs in grouped(results).items()]


def _summary(item: str, runs: Sequence[Mapping[str, Any]]) -> ItemSummary:
    metric, unit, points = _series(runs)
    outcomes = tuple(str(r.get("outcome")) for r in runs)
    return ItemSummary(item, runs[0].get("node"), len(runs), outcomes.count("passed"), outcomes.count("failed"),
                       outcomes.count("error"), outcomes.count("skipped"), metric, unit,
                       tuple(v for _, v in points), outcomes, tuple(k for k, _ in points),
                       tuple(int(r.get("repeat") or k) for k, r in enumerate(runs, 1)),
                       tuple(str(n) for n in runs[0].get("nodes") or ()))


def _series(runs: Sequence[Mapping[str, Any]]) -> tuple[str | None, str, list[tuple[int, float]]]:
    metric = next((v.get("metric") for r in runs for v in r.get("verdicts") or () if _measure(v)), None)
    if metric is None:
        return None, "", []
    values: list[tuple[int, float]] = []
    unit = ""
    for k, r in enumerate(runs, 1):  # the check's own verdict, else its worst subject's (per-GPU kinds judge each GPU)
        found = [v for v in r.get("verdicts") or ()
                 if v.get("metric") == metric and is_number(v.get("measured"))]
        if found:
            pick = next((v for v in found if not v.get("subject")), None) or _worst(found)
            values.append((int(r.get("repeat") or k), float(pick["measured"])))
            unit = str(pick.get("unit") or unit)
    return metric, unit, values


def _measure(v: Mapping[str, Any]) -> bool:
    """Whether a verdict can name the item's series: a limit on a measured number, not windows.despite's
    `measurement: not judged` (an item that skipped or errored in a failed counter window puts it first) and
    not a counter window's verdict (`kernel.xid.79` on `<host> <device>`: what rose, not what the check
    measures), which would leave the repetitions that measured without a spread or a trend."""
    from clustercheck.counters.allowances import FAMILIES
    from clustercheck.record.exclude import not_judged

    measured, metric = v.get("measured"), str(v.get("metric") or "")
    counter = "." in metric and metric.split(".")[0] in FAMILIES and v.get("unit") == "count" and bool(v.get("subject"))
    return v.get("kind") != "expect" and is_number(measured) and not not_judged(v) and not counter


def _worst(verdicts: list[Mapping[str, Any]]) -> Mapping[str, Any]:
    """The subject furthest on the wrong side of the limit: the lowest under a floor, the highest under a
    ceiling, a NaN before any number. The first subject was taken: for burn's `relative`, the fastest GPU
    is 1.0 by definition, so a GPU that slowed as it heated never showed in the spread or the trend."""
    floor = verdicts[0].get("op") in (">=", ">")
    return min(verdicts, key=lambda v: (not math.isnan(v["measured"]), v["measured"] if floor else -v["measured"]))


def by_node(summaries: Sequence[ItemSummary], incomplete: bool = False) -> dict[str, dict[str, Any]]:
    """node -> its items' repetitions and the pass ratio over all of them (a node passes burn-in only at 1),
    and `not_cleared`: the cluster items that covered it and failed or were not judged in some repetition,
    naming no node (a cluster item without `nodes` covers every node): such a node is never cleared."""
    out: dict[str, dict[str, Any]] = {}
    started = _started(summaries)
    for s in summaries:
        if not s.node and s.outcome in ("failed", "error"):
            for node in s.covers or [n for t in summaries for n in (t.node or "").split(",") if n]:
                bad = out.setdefault(node, {"items": 0, "repetitions": 0, "passed": 0, "judged": 0})
                bad.setdefault("not_cleared", [])
                if s.item not in bad["not_cleared"]:
                    bad["not_cleared"].append(s.item)
        for node in (s.node or "").split(","):
            if not node:
                continue
            entry = out.setdefault(node, {"items": 0, "repetitions": 0, "passed": 0, "judged": 0})
            entry.setdefault("not_cleared", [])
            entry["not_run"] = entry.get("not_run", 0) + len(_missing(s, started))
            entry["items"] += 1
            entry["repetitions"] += s.repetitions
            entry["passed"] += s.passed
            entry["judged"] += s.counted
            entry["skipped"] = entry.get("skipped", 0) + (s.skipped if s.counted else 0)
    for entry in out.values():
        # an item of it was cut off in a repetition, or the run stopped (between repetitions, it cut off none)
        entry["incomplete"] = incomplete or bool(entry.setdefault("not_run", 0))
        entry["pass_ratio"] = round(entry["passed"] / entry["judged"], 6) if entry["judged"] else 0.0
    return out


def lines(summaries: Sequence[ItemSummary], incomplete: bool = False) -> list[str]:
    """The terminal's burn-in section: one line per item, worst first, a node verdict per node (never
    `passes` for a run that did not finish: it passed what ran, not the burn-in asked for)."""
    from clustercheck.units import fmt

    order = {"failed": 0, "error": 1, "passed": 2, "skipped": 3}
    started = _started(summaries)
    whole = min((s.repetitions for s in summaries), default=0)
    out = [f"burn-in: INCOMPLETE: {whole} whole repetition(s) ran ({started} started), fewer than asked"
           if incomplete else f"burn-in: {started} repetition(s)"]
    for s in sorted(summaries, key=lambda s: (order.get(s.outcome, 4), s.item)):
        spread = s.spread
        shown = (f"{s.metric} min {fmt(spread[0])} median {fmt(spread[1])} max {fmt(spread[2])} {s.unit}"
                 if spread else "no metric")
        trend = f", trend {s.trend:+.1%}" if s.trend is not None else ""
        out.append(f"  {s.outcome.upper():<7} {s.item}  pass ratio {s.passed}/{s.counted}"
                   f" ({s.pass_ratio:.0%}); {shown}{trend}{_cut(s, started)}")
    of = {s.item: s for s in summaries}
    for node, entry in sorted(by_node(summaries).items()):
        cluster = [f"cluster check {c} {of[c].outcome if of[c].failed else 'not judged'} in repetition(s) "
                   f"{', '.join(str(k) for k, o in zip(of[c].repeats, of[c].outcomes) if o != 'passed')}"
                   for c in entry.get("not_cleared") or ()]
        failed, errors = (sum(getattr(s, k) for s in summaries if node in (s.node or "").split(","))
                          for k in ("failed", "errors"))
        # FAILS only for a repetition that failed; an error is the harness's, never the node's; never `passes`
        # for a repetition not judged, nor for a node whose every repetition skipped (it was not measured)
        # an item skipped in some repetitions and measured in others was not judged in those: never `passes`
        skipped = entry.get("skipped", 0)
        word = ("FAILS burn-in" if failed else f"burn-in not judged ({errors} repetition(s) errored)" if errors
                else f"burn-in not judged ({skipped} repetition(s) skipped)" if skipped
                else f"not cleared: {'; '.join(cluster)}, naming no node" if cluster
                else "burn-in not measured (every repetition skipped)" if not entry["judged"]
                else "INCOMPLETE burn-in" if incomplete else "passes burn-in")
        out.append(f"  node {node} {word}: {entry['passed']} of {entry['judged']} item repetitions passed"
                   + (" (the run did not finish)" if incomplete and not failed else ""))
    return out


def folded(results: Sequence[Any]) -> list[Any]:
    """A repeated run's results, one per item (a CI page or a terminal table lists each item once): the
    worst repetition's result, with the item's burn-in outcome, its summary under `burn_in`, the
    repetitions' total time and each verdict judged over every repetition (merged()). Results of a run
    that did not repeat are returned as they are."""
    if not repeated(results):
        return list(results)
    worst = {"failed": 0, "error": 1, "skipped": 2, "passed": 3}
    started = max(int(r.get("repeat") or 0) for r in results)
    out = []
    for item, runs in grouped(results).items():
        s = _summary(item, runs)
        pick = min(runs, key=lambda r: worst.get(r["outcome"], 4))
        entry = {**pick, "outcome": s.outcome, "message": _note(s, runs, pick, started),
                 "duration": round(sum(float(r.get("duration") or 0.0) for r in runs), 3), "burn_in": s.as_dict()}
        if "verdicts" in pick:  # (a repetition that measured nothing, errored or skipped, shows no verdicts)
            entry["verdicts"] = merged([pick, *(r for r in runs if r is not pick)])
        out.append(entry)
    return out


def _key(v: Mapping[str, Any]) -> tuple[Any, ...]:
    return v.get("metric"), v.get("subject"), v.get("unit"), v.get("op")


def merged(runs: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """An item's verdicts over its repetitions (the worst one first: its order), one per (metric, subject,
    unit, op): passed only when it passed in every repetition that judged it, measuring its worst value there (what compare judges: the lowest
    under a floor, the highest under a ceiling, a value that is no number first; else, without a direction,
    the first failed repetition's). The worst repetition's verdicts alone showed GPU6 as a pass when GPU4
    failed in repetition 1 and GPU6 only in repetition 3."""
    seen: dict[tuple[Any, ...], list[Mapping[str, Any]]] = {}
    for r in runs:
        for v in r.get("verdicts") or ():
            if isinstance(v, dict):
                seen.setdefault(_key(v), []).append(v)
    out = []
    for vs in seen.values():
        pick = _WORSE.get(str(vs[0].get("op")))
        measured = _worst_of([v.get("measured") for v in vs], pick) if pick else None
        shown = (next(v for v in vs if v.get("measured") is measured or v.get("measured") == measured) if pick
                 else next((v for v in vs if v.get("passed") is False), vs[0]))
        out.append({**shown, "passed": all(v.get("passed") is True for v in vs)})
    return out


def _note(s: ItemSummary, runs: Sequence[Any], pick: Mapping[str, Any], started: int) -> str:
    """The folded item's message, built from its burn-in outcome: `passed all N repetitions` only when
    every repetition passed; a skip in every repetition, or in some beside measured ones, says so with the
    reason (the skipped repetition's message); an item the run was cut off before in a repetition says so;
    a failure or an error gives each bad repetition's message (its failed subjects named, where its message
    does not name them), so that a GPU that failed only in a later repetition is named too."""
    def which(*outcomes: str) -> str:
        return ", ".join(str(r.get("repeat")) for r in runs if r["outcome"] in outcomes)

    reason, cut = pick.get("message") or "", _cut(s, started)
    if s.outcome == "passed":
        return f"passed all {s.repetitions} repetitions{' it ran' if cut else ''}{cut}"
    if s.outcome == "skipped":
        return f"skipped in all {s.repetitions} repetitions{cut}: {reason}".rstrip(": ")
    skipped = f"skipped in repetition(s) {which('skipped')} of {s.repetitions}" if s.skipped else ""
    if not (s.failed or s.errors):
        return f"not judged: {skipped} (pass ratio {s.pass_ratio:.3g}){cut}: {reason}".rstrip(": ")
    note = f"{s.outcome} in repetition(s) {which('failed', 'error')} of {s.repetitions} (pass ratio {s.pass_ratio:.3g})"
    bad = [r for r in runs if r["outcome"] in ("failed", "error")]
    reasons = [_reason(r) for r in bad]
    if len(bad) > 1:  # each bad repetition's own: the worst one's alone named only the subjects it failed
        reasons = [f"repetition {r.get('repeat')}: {why}" if why else "" for r, why in zip(bad, reasons)]
    return f"{note}{'; ' + skipped if skipped else ''}{cut}: {'; '.join(filter(None, reasons))}".rstrip(": ")


def _reason(r: Mapping[str, Any]) -> str:
    """A bad repetition's message, with the subjects its failed verdicts name that the message does not."""
    message = str(r.get("message") or "")
    failed = {f"{v['subject']} {v.get('metric')}": str(v["subject"]) for v in r.get("verdicts") or ()
              if isinstance(v, dict) and v.get("passed") is False and v.get("subject")}
    missing = [named for named, subject in failed.items() if subject not in message]
    return "; ".join(filter(None, [message, f"failed: {', '.join(missing)}" if missing else ""]))


def _cut(s: ItemSummary, started: int) -> str:
    """`; not run in repetition(s) K` for an item the run was cut off before in a repetition it started."""
    missing = _missing(s, started)
    return f"; not run in repetition(s) {', '.join(map(str, missing))} (the run did not finish)" if missing else ""


_WORSE = {">=": min, ">": min, "<=": max, "<": max}  # a directional limit's operator -> its worst value


def _worst_of(seen: list[Any], pick: Any) -> Any:
    return pick(seen) if all(map(is_finite_number, seen)) else next(x for x in seen if not is_finite_number(x))
