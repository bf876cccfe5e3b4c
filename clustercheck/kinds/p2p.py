"""`measure: p2p`: every ordered GPU pair of a node, one pair at a time: the source rank copies into a
buffer on the destination GPU (nvbandwidth's device_to_device_memcpy_write_ce), and with `bidirectional`
both GPUs of a pair at once. Judged as a matrix: per ordered pair its bandwidth and ratio to the node
median, per unordered pair the bidirectional sum, node-wide the slowest pair, the median, their ratio and
the worst asymmetry. Ranks: clustercheck.measure.copies:p2p."""

from __future__ import annotations

import math
from statistics import median
from typing import Any, Mapping

from clustercheck.errors import HarnessError, show
from clustercheck.judging.measurement import Measurement, evaluate
from clustercheck.judging.verdicts import Verdict
from clustercheck.kinds.base import FRACTION, NON_NEGATIVE, Answers, Kind, Rules, device_need
from clustercheck.kinds.params import copy_parser
from clustercheck.kinds.subjects import merged, natural
from clustercheck.schema import Fields
from clustercheck.units import is_number

METRICS = {"unidirectional": "GB/s", "bidirectional": "GB/s", "p2p_min": "GB/s", "p2p_median": "GB/s",
           "p2p_min_ratio": "ratio", "asymmetry_max": "ratio", "ratio_to_median": "ratio"}


def _bidirectional(f: Fields, params: dict[str, Any]) -> None:
    params["bidirectional"] = f.get("bidirectional", bool, True)


def need(params: Mapping[str, Any], n: int, gpu: bool) -> tuple[int, int, int]:
    return device_need(n * params["size"], params["size"], n, gpu)  # its source and one target per other rank


def reduce_p2p(per_rank: list[dict[str, Any]], units_of: dict[str, str], gpus: int | None = None,
               where: str = "p2p") -> Measurement:
    """The p2p matrix: per ordered pair its bandwidth and ratio to the node median, per unordered pair the
    bidirectional sum and asymmetry; node-wide min, median, min/median and the worst asymmetry.

    Every ordered pair of the item's `gpus` GPUs (GPU<i>->GPU<j>, the ranks' local ranks; the ranks answering
    when not given) must be there: a pair missing is a HarnessError naming it, never a matrix judged without
    it (`where` names the item). A pair that is no bandwidth (NaN, infinite, 0 or below, not a number) makes the node-wide figures NaN
    with that pair the worst: min() and median() skip a NaN by where it stands, and a 0 divides by zero."""
    found = merged(per_rank)
    uni = {s: _bandwidth(v["unidirectional"]) for s, v in found.items() if "unidirectional" in v}
    n = len(per_rank) if gpus is None else gpus
    wanted = [f"GPU{i}->GPU{j}" for i in range(n) for j in range(n) if i != j]
    missing = [pair for pair in wanted if pair not in uni]
    if missing or not uni:
        raise HarnessError(f"{where}: no bandwidth of {len(missing)} of the {len(wanted)} ordered pair(s) of {n} GPU(s) "
                           f"in the ranks' answers ({', '.join(missing[:8])}{' ...' if len(missing) > 8 else ''}): "
                           f"the matrix is not judged without them")
    bad = [s for s, b in uni.items() if not (math.isfinite(b) and b > 0)]
    good = [b for s, b in uni.items() if s not in bad]
    # a pair's ratio is to the median of the pairs that gave a bandwidth, so one dead pair fails itself
    # (its own ratio NaN) and not every healthy pair beside it
    mid = median(good) if good else math.nan
    subjects: dict[str, dict[str, float]] = {
        s: {"unidirectional": b, "ratio_to_median": b / mid if s not in bad else math.nan} for s, b in uni.items()}
    # -5 beside 90 summed to 85 and True to 91, both passing; a pair missing a share was left out unjudged
    shares = {s[:-len(":bidir")]: _bandwidth(v.get("share")) for s, v in found.items() if s.endswith(":bidir")}
    unshared = [f"{s} {show(_median(found[f'{s}:bidir'].get('share')), 40) if f'{s}:bidir' in found else 'none'}"
                for s in uni if shares and not (math.isfinite(shares.get(s, math.nan)) and shares.get(s, math.nan) > 0)]
    asym = []
    for s, b in uni.items():
        a, _, c = s.partition("->")
        back = uni.get(f"{c}->{a}")
        if back is not None and natural(a) < natural(c):
            asym.append(abs(b - back) / max(b, back) if s not in bad and f"{c}->{a}" not in bad else math.nan)
            if shares:  # a bidirectional run: every pair's sum, NaN (a failed verdict) where a share is no bandwidth
                both = [shares.get(f"{a}->{c}", math.nan), shares.get(f"{c}->{a}", math.nan)]
                ok = all(math.isfinite(x) and x > 0 for x in both)
                subjects[f"{a}<->{c}"] = {"bidirectional": sum(both) if ok else math.nan}
    rows = [{"subject": s, "metric": "unidirectional", **v["unidirectional"],
             "peer_access": v.get("peer_access")} for s, v in found.items() if "unidirectional" in v]
    if bad:
        worst, nan = bad[0], math.nan
        metrics = {"p2p_min": nan, "p2p_median": nan, "p2p_min_ratio": nan, "asymmetry_max": nan}
    else:
        worst = min(uni, key=uni.__getitem__)
        metrics = {"p2p_min": uni[worst], "p2p_median": mid, "p2p_min_ratio": uni[worst] / mid,
                   "asymmetry_max": max(asym, default=0.0)}
    notes = (f"bidirectional NaN (failing any limit) where a direction's share is no bandwidth: "
             f"{'; '.join(unshared[:4])}{' ...' if len(unshared) > 4 else ''}",) if unshared else ()
    return Measurement(metrics=metrics, units=dict(units_of), rows=rows, worst=worst, subjects=subjects,
                       notes=notes)


def _median(value: Any) -> Any:
    return value.get("median") if isinstance(value, Mapping) else value


def _bandwidth(value: Any) -> float:
    """A pair's median bandwidth, or NaN where the rank gave no number for it (a bool and text are none)."""
    median_ = _median(value)
    return float(median_) if is_number(median_) and isinstance(value, Mapping) else math.nan


def judge(a: Answers, rules: Rules) -> tuple[Measurement, list[Verdict]]:
    hosts = ", ".join(sorted(set(a.hosts)))
    m = reduce_p2p(a.per_rank, METRICS, len(a.ranks), f"p2p {a.check.id} on {hosts}")
    return m, evaluate(m, dict(rules.limits))


PROVIDES = (Kind("p2p", ("gpu-pair",), METRICS, copy_parser("256MiB", 16, _bidirectional),
                 "every ordered GPU pair: copy bandwidth one pair at a time, both directions at once, ratios",
                 "clustercheck.measure.copies:p2p", judge, gpu_only=True, min_ranks=2, figure="matrix", memory=need,
                 domains={"p2p_min_ratio": FRACTION, "asymmetry_max": FRACTION, "ratio_to_median": NON_NEGATIVE}),)
