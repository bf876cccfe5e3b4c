"""Matching one item's result against the baseline's, metric by metric: the direction a limit's operator
gives (`>=`/`>`: higher is better; `<=`/`<`: lower is better), the relative change, and whether it
counts: at least the tolerance and beyond the baseline's own spread of that metric, NOISE_CAP at most; a
change for the worse within this run's own spread wider than that is not judged (record/compare.py says
the rule). Pure: no pytest, no torch."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any, Mapping

from clustercheck.judging.verdicts import VerdictEntry
from clustercheck.units import UNITS, convert, fmt, format_size, is_count, is_finite_number

HIGHER, LOWER = "higher", "lower"
_DIRECTION = {">=": HIGHER, ">": HIGHER, "<=": LOWER, "<": LOWER}
NOISE_CVS = 2.0  # a run's own spread of a metric: this many coefficients of variation of its iterations
# the most of a change the baseline's own spread excuses as noise; a run whose own spread of a metric is wider
# than this cannot tell a regression of it from its noise: that metric is not judged (never a pass)
NOISE_CAP = 0.25
UNJUDGED = "not judged"
LATENCY_BYTES = 1 << 20  # below this a collective's time is latency: noise on a shared host, judged by its limit

@dataclass(frozen=True)
class Change:
    item: str  # testcase id
    metric: str  # with the subject it is about, e.g. h2d[GPU3]
    unit: str
    direction: str  # HIGHER or LOWER is better
    baseline: float
    current: float
    change: float  # (current - baseline) / |baseline|; +-inf from a zero baseline (percent() says `from 0`)
    # "regression", "improvement", "same", "noise" (within the baseline's spread), "latency", or UNJUDGED (a
    # change for the worse within this run's own spread, which is wider than NOISE_CAP)
    kind: str
    name: str = ""  # the metric alone
    subject: str | None = None
    noise: float = 0.0  # the baseline's own relative spread of this metric (0: not recorded); NOISE_CAP counts at most
    own: float = 0.0  # this run's own relative spread of this metric

    def percent(self) -> str:
        """`+12.5%`; `from 0` for a change from a baseline of 0, which no percentage (an infinite one) says."""
        return f"{self.change * 100:+.1f}%" if math.isfinite(self.change) else "from 0"

    def bound(self, tolerance: float) -> tuple[str, float, str, float, str]:
        """What a `vs baseline` verdict holds this change to: (op, bound, unit, measured, expression), the
        relative change in % against the tolerance; from a baseline of 0, where a change is no ratio, this
        run's value against the baseline's own bound in its unit (0 x (1 +- tolerance) = 0): finite, never
        an inf%, which results.json could only write as the string "Infinity"."""
        op = ">=" if self.direction == HIGHER else "<="
        if math.isfinite(self.change):
            bound = -tolerance * 100 if op == ">=" else tolerance * 100
            return op, bound, "%", self.change * 100, f"change {op} {bound:+g}%"
        return op, self.baseline, self.unit, self.current, f"{self.name} {op} {fmt(self.baseline)} {self.unit} (from 0)"

    def line(self) -> str:
        return (f"{self.item} {self.metric}: {fmt(self.baseline)} -> {fmt(self.current)} {self.unit} "
                f"({self.percent()}; {self.direction} is better{self.why()})")

    def why(self) -> str:
        """What kept a change from counting, or the spread it stood out of."""
        if self.kind == "latency":
            return "; a latency-bound size: judged by its limit only"
        if self.kind == UNJUDGED:
            return f"; not judged: the run's own spread +-{self.own * 100:.1f}% is too wide to tell a regression"
        if not self.noise:
            return ""
        capped = f" up to {1 + NOISE_CAP:g}x" if self.noise > NOISE_CAP else ""
        return f"; the baseline's own spread +-{self.noise * 100:.1f}%, counted as a factor{capped}: {band(self.noise)}"


def band(spread: float) -> str:
    """The changes a spread excuses, as classify applies it (`-20.0%..+25.0%` for a spread of 25% or more): a
    factor either way, so a drop is excused down to 1/(1 + spread), a rise up to 1 + spread."""
    factor = 1 + min(max(spread, 0.0), NOISE_CAP)
    return f"{(1 / factor - 1) * 100:.1f}%..+{(factor - 1) * 100:.1f}%"


def classify(direction: str, change: float, tolerance: float, noise: float = 0.0, own: float = 0.0) -> str:
    """A change at least `tolerance` (the boundary counts) and beyond `noise`, the baseline's own spread
    (NOISE_CAP at most), is a regression or an improvement by its direction; one within that spread is
    "noise". The spread is compared as a factor either way (a time 1.9x as long is a bandwidth 1/1.9 as
    high): a spread of 0.9 covers changes from /1.9 to x1.9, and NOISE_CAP's 25% from -20% to +25% (band()
    prints it so). Why a factor, not +-25% linearly: the metrics are ratios (bytes over time), whose noise is
    multiplicative, and one slowdown is a time +25% and a bandwidth -20%; a linear band would excuse a drop
    of the bandwidth up to -25% and the same slowdown read off the time only up to +25% (-20% of bandwidth):
    symmetric in log space, the band excuses the same slowdown whichever of the two the limit is on. This run's own spread (`own`) never excuses a
    change: where it is wider than NOISE_CAP, a change for the worse within it cannot be told from its noise
    and is UNJUDGED (never a pass); one that stands out even of it is a regression."""
    worse = -change if direction == HIGHER else change
    if abs(worse) < tolerance - 1e-12:
        return "same"
    if _within(change, min(max(noise, 0.0), NOISE_CAP)):
        return "noise"
    if worse > 0 and own > NOISE_CAP and _within(change, own):
        return UNJUDGED
    return "regression" if worse > 0 else "improvement"


def _within(change: float, spread: float) -> bool:
    return change > -1 and math.isfinite(change) and abs(math.log1p(change)) <= math.log1p(spread)


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
    if is_count(value) and value >= 0:
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
    return float(value) if is_finite_number(value) else None


def spread(entry: Mapping[str, Any], v: Mapping[str, Any], rows: Mapping[tuple[str, str], float] | None = None) -> float:
    """How much this metric varied within its own run, relative to its value: 2 x the coefficient of
    variation of the per-iteration times (collectives: `iter_cv` at the judged size), or, for a per-GPU
    (per-pair) metric, half the min..max range of its samples over their median. 0 when not recorded.
    `rows`: the entry's spreads by (subject, metric), spreads(entry), built once per entry: looking each
    verdict's row up in the list made an item of 8000 per-GPU verdicts quadratic."""
    subject = v.get("subject")
    if subject:
        return (spreads(entry) if rows is None else rows).get((str(subject), str(v.get("metric"))), 0.0)
    cv = _number(((entry.get("metrics") or {}).get("iter_cv") or {}).get("value"))
    return NOISE_CVS * cv if cv is not None and cv >= 0 else 0.0


def spreads(entry: Mapping[str, Any]) -> dict[tuple[str, str], float]:
    """Each per-subject row's spread (half its min..max range over its median), by (subject, metric): the
    first row of a subject and metric that has the three numbers, in one pass over the rows."""
    out: dict[tuple[str, str], float] = {}
    for row in entry.get("rows") or []:
        # a verdict's subject and metric are text (record/lines.py): a row keyed otherwise matches none
        if not isinstance(row, dict) or not isinstance(row.get("subject"), str) or not isinstance(row.get("metric"), str):
            continue
        key = (row["subject"], row["metric"])
        lo, hi, mid = (_number(row.get(k)) for k in ("min", "max", "median"))
        if key not in out and lo is not None and hi is not None and mid:
            out[key] = max(0.0, (hi - lo) / 2 / abs(mid))
    return out


def _latency(entry: Mapping[str, Any], v: Mapping[str, Any]) -> bool:
    """A time judged at a latency-bound size (the judged size below LATENCY_BYTES)."""
    size = entry.get("judged_at")
    family = UNITS.get(v.get("unit") or "", ("", 0.0))[0]
    return family == "time" and isinstance(size, int) and 0 < size < LATENCY_BYTES


def out_of_domain(entry: Mapping[str, Any], metric: str, value: float, unit: str) -> str | None:
    """Why `value` (in `unit`) is no value of `metric` (units.out_of_domain: a negative bandwidth; the domain
    of the entry's measure kind, KINDS[measure].domain: a p2p_min_ratio above 1), or None when it can be."""
    from clustercheck import units
    from clustercheck.kinds import KINDS

    why = units.out_of_domain(value, unit)
    kind = KINDS.get(str(entry.get("measure") or ""))
    if why or kind is None or metric not in kind.metrics or _family(unit) != _family(kind.metrics[metric]):
        return why
    low, high = kind.domain(metric)
    own = convert(value, unit, kind.metrics[metric])
    return None if low <= own <= high else f"{fmt(own)} {kind.metrics[metric]}, outside {fmt(low)} to {fmt(high)}"


def _family(unit: Any) -> str | None:
    """A unit's family (units.UNITS: values of one family convert); None for a unit clustercheck does not know."""
    return UNITS[unit][0] if isinstance(unit, str) and unit in UNITS else None


def _key(v: Mapping[str, Any]) -> str:
    return v["metric"] + (f"[{v['subject']}]" if v.get("subject") else "")


def bus_ids(entry: Mapping[str, Any]) -> dict[str, str]:
    """Each per-GPU subject's PCI bus id, as its rows give it (the first row of the subject that has one)."""
    out: dict[str, str] = {}
    for row in entry.get("rows") or []:
        if isinstance(row, dict) and isinstance(row.get("subject"), str) and isinstance(row.get("bus_id"), str) \
                and row["bus_id"]:
            out.setdefault(row["subject"], row["bus_id"])
    return out


@dataclass(frozen=True)
class Cards:
    """Which of the baseline's subjects a subject of this run is: the same card, by its PCI bus id where both runs
    give one (GPU<local_rank> is an index: with CUDA_VISIBLE_DEVICES reordered, GPU0 now is another card than GPU0
    in the baseline, and two swapped cards compared by index read `same`), else by index."""
    before: dict[str, str]  # subject -> bus id, the baseline's
    now: dict[str, str]  # this run's
    card: dict[str, str]  # bus id -> the baseline's subject: one look-up a verdict, linear in an item's GPUs

    @classmethod
    def of(cls, baseline: Mapping[str, Any], current: Mapping[str, Any]) -> Cards:
        before = bus_ids(baseline)
        return cls(before, bus_ids(current), {bus: subject for subject, bus in reversed(before.items())})

    def subject(self, subject: Any) -> Any:
        """The baseline's subject of the card `subject` names now; None where the baseline did not measure that
        card (its bus id is not in the baseline, whose subject of that index has another)."""
        bus = self.now.get(subject) if isinstance(subject, str) else None
        if bus is None:
            return subject
        there = self.card.get(bus)
        if there is not None:
            return there
        return None if self.before.get(subject) is not None else subject  # no bus id there: by index

    def key(self, v: Mapping[str, Any]) -> str | None:
        """The baseline's key (`busbw[GPU0]`) of the verdict `v` of this run, None for a card it did not measure."""
        if not v.get("subject"):
            return _key(v)
        there = self.subject(v["subject"])
        return None if there is None else _key({**v, "subject": there})

    def named(self, v: Mapping[str, Any]) -> str:
        """`busbw[GPU1]`, or `busbw[GPU1 = 0000:19:00.0, GPU0 in the baseline]` for a card at another index now."""
        there = self.subject(v.get("subject")) if v.get("subject") else None
        if there is None or there == v["subject"]:
            return _key(v)
        return f"{v['metric']}[{v['subject']} = {self.now[v['subject']]}, {there} in the baseline]"

    def gone(self, key: str, v: Mapping[str, Any]) -> str:
        """Why the baseline's verdict `v` (its key `key`) has none now: `not in this run`, naming the card."""
        bus = self.before.get(str(v.get("subject")))
        if bus is None or not self.now:
            return f"{key}: not in this run"
        here = self.now.get(v["subject"])
        return f"{key}: card {bus} not in this run" + (f" ({v['subject']} is {here} now)" if here else "")


def failed_now(item: str, baseline: Mapping[str, Any], current: Mapping[str, Any]) -> list[tuple[str, str]]:
    """What got worse whatever the tolerance: a verdict that passed in the baseline and fails now (an `==`
    limit too), a `#wrong` count that rose, or an item that passed and now fails."""
    old = {_key(v): v for v in baseline.get("verdicts") or [] if isinstance(v.get("metric"), str)}
    cards = Cards.of(baseline, current)
    out = []
    for v in current.get("verdicts") or []:
        if not isinstance(v.get("metric"), str):
            continue
        o = old.get(cards.key(v) or "")  # the same card's verdict, by its bus id where both runs give one
        if o is None:
            continue
        before, now = _number(o.get("measured")), _number(v.get("measured"))
        if o.get("passed") is True and v.get("passed") is not True:
            out.append((item, f"{cards.named(v)} passed in the baseline ({fmt(o.get('measured'))}), fails now "
                              f"({fmt(v.get('measured'))} {v.get('unit', '')}, {v.get('expression') or v.get('op')})"))
        elif v["metric"] == "wrong" and before is not None and now is not None and now > before:
            out.append((item, f"{cards.named(v)} rose: {fmt(before)} -> {fmt(now)} wrong element(s)"))
    if not out and baseline.get("outcome") == "passed" and current.get("outcome") == "failed":
        out.append((item, "passed in the baseline, fails now"))
    return out


@dataclass(frozen=True)
class Matched:
    """One item matched against the baseline: the changes, and (item, why) for each thing not compared."""
    changes: list[Change]
    skipped: list[tuple[str, str]]  # nothing the baseline judged is lost: new in this run, measured otherwise
    # what the baseline judged and this run cannot be held to: a verdict missing now, one in another unit family
    # or with its limit's direction turned; never a pass (compare exits 3 for it, as for an item not measured now)
    lost: list[tuple[str, str]]


def matched(item: str, baseline: Mapping[str, Any], current: Mapping[str, Any], tolerance: float) -> Matched:
    """One item's result against the baseline's (each a result line, or its verdicts, metrics, rows and
    judged size): a Change per metric judged the same way in both, and (item, why) for each that cannot
    be compared, lost (the baseline judged it) or not. `compare` reports them; `--compare` judges the changes."""
    old_v, new_v = _directional(baseline.get("verdicts")), _directional(current.get("verdicts"))
    changes: list[Change] = []
    skipped: list[tuple[str, str]] = []
    cards = Cards.of(baseline, current)  # a GPU is the card its bus id names, where both runs give one
    # a verdict (a metric, a GPU's) the baseline had and this run has not: named, never silence, never a pass
    now_keys = {cards.key(v) for v in _own(current.get("verdicts"))}
    had = {_key(v): v for v in reversed(_own(baseline.get("verdicts")))}
    lost = [(item, cards.gone(key, had[key])) for key in dict.fromkeys(map(_key, _own(baseline.get("verdicts"))))
            if key not in now_keys]
    otherwise = judged_otherwise(baseline, current)  # another size or other params: nothing is comparable
    rows_before, rows_now = spreads(baseline), spreads(current)  # once per entry: linear in its verdicts
    for v in new_v.values():
        there, key = cards.key(v), cards.named(v)
        o = old_v.get(there) if there is not None else None
        if o is None:
            card = f" (card {cards.now.get(str(v['subject']))})" if there is None else ""
            skipped.append((item, f"{key}: not judged in the baseline{card}"))
            continue
        if otherwise:
            skipped.append((item, f"{key}: {otherwise}"))
            continue
        family = _family(o["unit"])
        if o["unit"] != v["unit"] and (family is None or family != _family(v["unit"])):  # GB/s and GiB/s convert
            lost.append((item, f"{key}: in {o['unit']} in the baseline, {v['unit']} now"))
            continue
        direction = _DIRECTION[v["op"]]
        if _DIRECTION[o["op"]] != direction:
            lost.append((item, f"{key}: limit direction changed ({o['op']} -> {v['op']})"))
            continue
        before, now = _number(o.get("measured")), _number(v.get("measured"))
        # a broken value of this run is what the baseline judged and this run cannot be held to (lost: exit 3,
        # never a pass); one of the baseline's gives nothing to compare with, as a metric it did not judge
        if before is None or now is None:
            bad, value = ("this run", v.get("measured")) if now is None else ("the baseline", o.get("measured"))
            (lost if now is None else skipped).append((item, f"{key}: {bad} measured {fmt(value)}, not a number"))
            continue
        if o["unit"] != v["unit"]:
            before = convert(before, o["unit"], v["unit"])  # the baseline's value in this run's unit
        outside = [(name, why) for name, entry, value, u in (("this run", current, now, v["unit"]),
                                                             ("the baseline", baseline, before, v["unit"]))
                   if (why := out_of_domain(entry, v["metric"], value, u))]
        if outside:  # a broken measurement (a negative bandwidth): never compared as within the tolerance
            (lost if outside[0][0] == "this run" else skipped).append(
                (item, f"{key}: {outside[0][0]} measured {outside[0][1]}: out of its domain"))
            continue
        # from 0 a change is no ratio: one for the worse (throttled 0 s -> 45 s) is beyond every tolerance and
        # spread, a regression `from 0` (relative() gives +-inf, Change.bound judges it in the metric's unit);
        # one for the better has nothing to compare it with: said, never an infinite improvement
        if before == 0 and now != 0 and (now > 0) == (direction == HIGHER):
            skipped.append((item, f"{key}: the baseline measured 0 {v['unit']}, nothing to compare a change with"))
            continue
        change = relative(before, now)
        # the band of noise is the baseline's spread alone: a run's own noise never excuses its regression
        noise, own = spread(baseline, o, rows_before), spread(current, v, rows_now)
        kind = "latency" if _latency(current, v) else classify(direction, change, tolerance, noise, own)
        changes.append(Change(item, key, v["unit"], direction, before, now, change, kind, v["metric"],
                              v.get("subject"), noise, own))
    return Matched(changes, skipped, lost)

