"""`measure: p2p`: every ordered GPU pair of a node, one pair at a time: the source rank copies into a
buffer on the destination GPU (nvbandwidth's device_to_device_memcpy_write_ce), and with `bidirectional`
both GPUs of a pair at once. Judged as a matrix: per ordered pair its bandwidth and ratio to the node
median, per unordered pair the bidirectional sum, node-wide the slowest pair, the median, their ratio and
the worst asymmetry. Ranks: clustercheck.measure.copies:p2p."""

from __future__ import annotations

from statistics import median
from typing import Any, Mapping

from clustercheck.judging.measurement import Measurement, evaluate
from clustercheck.judging.verdicts import Verdict
from clustercheck.kinds.base import FRACTION, NON_NEGATIVE, Answers, Kind, Rules, device_need
from clustercheck.kinds.params import copy_parser
from clustercheck.kinds.subjects import merged, natural
from clustercheck.schema import Fields

METRICS = {"unidirectional": "GB/s", "bidirectional": "GB/s", "p2p_min": "GB/s", "p2p_median": "GB/s",
           "p2p_min_ratio": "ratio", "asymmetry_max": "ratio", "ratio_to_median": "ratio"}


def _bidirectional(f: Fields, params: dict[str, Any]) -> None:
    params["bidirectional"] = f.get("bidirectional", bool, True)


def need(params: Mapping[str, Any], n: int, gpu: bool) -> tuple[int, int, int]:
    return device_need(n * params["size"], params["size"], n, gpu)  # its source and one target per other rank


def reduce_p2p(per_rank: list[dict[str, Any]], units_of: dict[str, str]) -> Measurement:
    """The p2p matrix: per ordered pair its bandwidth and ratio to the node median, per unordered pair the
    bidirectional sum and asymmetry; node-wide min, median, min/median and the worst asymmetry."""
    found = merged(per_rank)
    uni = {s: v["unidirectional"]["median"] for s, v in found.items() if "unidirectional" in v}
    mid = median(uni.values())
    subjects: dict[str, dict[str, float]] = {s: {"unidirectional": b, "ratio_to_median": b / mid} for s, b in uni.items()}
    asym = []
    for s, b in uni.items():
        a, _, c = s.partition("->")
        back = uni.get(f"{c}->{a}")
        if back is not None and natural(a) < natural(c):
            asym.append(abs(b - back) / max(b, back))
            share = found.get(f"{a}->{c}:bidir", {}).get("share", {}).get("median")
            share_back = found.get(f"{c}->{a}:bidir", {}).get("share", {}).get("median")
            if share is not None and share_back is not None:
                subjects[f"{a}<->{c}"] = {"bidirectional": share + share_back}
    rows = [{"subject": s, "metric": "unidirectional", **v["unidirectional"],
             "peer_access": v.get("peer_access")} for s, v in found.items() if "unidirectional" in v]
    worst = min(uni, key=uni.__getitem__)
    metrics = {"p2p_min": uni[worst], "p2p_median": mid, "p2p_min_ratio": uni[worst] / mid,
               "asymmetry_max": max(asym, default=0.0)}
    return Measurement(metrics=metrics, units=dict(units_of), rows=rows, worst=worst, subjects=subjects)


def judge(a: Answers, rules: Rules) -> tuple[Measurement, list[Verdict]]:
    m = reduce_p2p(a.per_rank, METRICS)
    return m, evaluate(m, dict(rules.limits))


PROVIDES = (Kind("p2p", ("gpu-pair",), METRICS, copy_parser("256MiB", 16, _bidirectional),
                 "every ordered GPU pair: copy bandwidth one pair at a time, both directions at once, ratios",
                 "clustercheck.measure.copies:p2p", judge, gpu_only=True, min_ranks=2, figure="matrix", memory=need,
                 domains={"p2p_min_ratio": FRACTION, "asymmetry_max": FRACTION, "ratio_to_median": NON_NEGATIVE}),)
