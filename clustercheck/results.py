"""Measurements: what ranks returned, reduced to headline metrics, per-size rows and per-subject values,
and judged against limits (`evaluate`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from statistics import fmean, median, pstdev
from typing import Any

from clustercheck import formulas, units
from clustercheck.errors import NotMeasured
from clustercheck.thresholds import Limit
from clustercheck.verdicts import Verdict, of_limit


COLLECTIVE_UNITS = {"busbw": "GB/s", "algbw": "GB/s", "time_us": "us", "avg_busbw": "GB/s", "wrong": "count",
                    "iter_cv": "ratio"}


@dataclass(frozen=True)
class Measurement:
    """What one check measured: headline metrics (value, unit) plus the per-size table."""

    metrics: dict[str, float]
    units: dict[str, str]
    rows: list[dict[str, Any]] = field(default_factory=list)
    worst: str | None = None  # the slowest rank at the judged size, e.g. "rank 1 (node7)"
    worst_of: dict[str, str] = field(default_factory=dict)  # a metric whose culprit is not the slowest rank
    judged_at: int | None = None
    subjects: dict[str, dict[str, float]] = field(default_factory=dict)  # e.g. GPU3 -> {h2d: 52.1}
    comm: dict[str, Any] = field(default_factory=dict)  # collectives: the library and what it said (comm.py)


def evaluate(m: Measurement, limits: dict[str, Limit]) -> list[Verdict]:
    """One verdict per limit on a check-wide metric, or one per subject (GPU, pair) on a per-subject one."""
    verdicts: list[Verdict] = []
    for metric, limit in limits.items():
        found: list[tuple[str | None, float]] = [(s, values[metric]) for s, values in m.subjects.items()
                                                  if metric in values]
        if not found and metric in m.metrics:
            found = [(None, m.metrics[metric])]
        if not found:
            raise NotMeasured(f"the limit on {metric!r} ({limit.origin}) has nothing to judge: this run did not "
                              f"measure {metric} (measured: {', '.join(sorted(m.metrics)) or 'per-subject values'})")
        for subject, value in found:
            measured = units.convert(value, m.units[metric], limit.unit)
            verdicts.append(of_limit(metric, measured, limit, m.worst_of.get(metric, m.worst), subject))
    return verdicts


def _summaries(per_rank: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    merged: dict[str, dict[str, Any]] = {}
    for result in per_rank:
        for subject, values in result["subjects"].items():
            merged.setdefault(subject, {}).update(values)
    return dict(sorted(merged.items(), key=lambda kv: _natural(kv[0])))


def _natural(text: str) -> list[Any]:
    import re

    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", text)]


def reduce_subjects(per_rank: list[dict[str, Any]], units_of: dict[str, str]) -> Measurement:
    """Per-GPU (or per-rank) medians with their spread; the headline of each metric is its worst subject
    (all these metrics are higher-is-better)."""
    merged = _summaries(per_rank)
    subjects = {s: {k: v["median"] for k, v in values.items() if isinstance(v, dict)} for s, values in merged.items()}
    rows = [{"subject": s, "metric": k, **v} for s, values in merged.items() for k, v in values.items()
            if isinstance(v, dict)]
    metrics = {k: min(vals[k] for vals in subjects.values() if k in vals)
               for k in units_of if any(k in vals for vals in subjects.values())}
    first = next(iter(metrics), None)
    worst = min(subjects, key=lambda s: subjects[s].get(first, float("inf"))) if first else None
    return Measurement(metrics=metrics, units=dict(units_of), rows=rows, worst=worst, subjects=subjects)


def reduce_p2p(per_rank: list[dict[str, Any]], units_of: dict[str, str]) -> Measurement:
    """The p2p matrix: per ordered pair its bandwidth and ratio to the node median, per unordered pair the
    bidirectional sum and asymmetry; node-wide min, median, min/median and the worst asymmetry."""
    merged = _summaries(per_rank)
    uni = {s: v["unidirectional"]["median"] for s, v in merged.items() if "unidirectional" in v}
    mid = median(uni.values())
    subjects: dict[str, dict[str, float]] = {s: {"unidirectional": b, "ratio_to_median": b / mid} for s, b in uni.items()}
    asym = []
    for s, b in uni.items():
        a, _, c = s.partition("->")
        back = uni.get(f"{c}->{a}")
        if back is not None and _natural(a) < _natural(c):
            asym.append(abs(b - back) / max(b, back))
            share = merged.get(f"{a}->{c}:bidir", {}).get("share", {}).get("median")
            share_back = merged.get(f"{c}->{a}:bidir", {}).get("share", {}).get("median")
            if share is not None and share_back is not None:
                subjects[f"{a}<->{c}"] = {"bidirectional": share + share_back}
    rows = [{"subject": s, "metric": "unidirectional", **v["unidirectional"],
             "peer_access": v.get("peer_access")} for s, v in merged.items() if "unidirectional" in v]
    worst = min(uni, key=uni.__getitem__)
    metrics = {"p2p_min": uni[worst], "p2p_median": mid, "p2p_min_ratio": uni[worst] / mid,
               "asymmetry_max": max(asym, default=0.0)}
    return Measurement(metrics=metrics, units=dict(units_of), rows=rows, worst=worst, subjects=subjects)


def iteration_stats(per_rank_iters: list[list[float]]) -> dict[str, float]:
    """min/median/max/cv of per-iteration times in us, each iteration taken at its slowest rank
    (as nccl-tests -I takes the max over GPUs); empty when per-iteration times were not kept."""
    if not per_rank_iters or not all(per_rank_iters):
        return {}
    times = [max(column) * 1e6 for column in zip(*per_rank_iters)]
    mean = fmean(times)
    return {"iter_us_min": min(times), "iter_us_median": median(times), "iter_us_max": max(times),
            "iter_cv": pstdev(times) / mean if mean else 0.0, "iter_us": times}


def reduce_collective(collective: str, per_rank: list[dict[str, Any]], hosts: list[str],
                      judge_at: int) -> Measurement:
    """Per-rank times and #wrong -> nccl-tests rows (mean time across ranks, bandwidth from it);
    the headline metrics come from the judged size, the worse placement where there are two."""
    rows = []
    for by_rank in zip(*[r["rows"] for r in per_rank]):
        first = by_rank[0]
        seconds = [r["seconds"] for r in by_rank]
        t, alg, bus = formulas.bandwidths(collective, first["bytes"], seconds)
        rows.append({"size": first["size"], "count": first["count"], "bytes": first["bytes"],
                     "placement": first["placement"], "dtype": per_rank[0]["dtype"], "time_us": t * 1e6,
                     "algbw": alg, "busbw": bus, "wrong": sum(r["wrong"] for r in by_rank),
                     "wrong_ranks": [i for i, r in enumerate(by_rank) if r["wrong"]],
                     "rank_time_us": [s * 1e6 for s in seconds],
                     "slowest_rank": max(range(len(seconds)), key=seconds.__getitem__),
                     **iteration_stats([r["iter_seconds"] for r in by_rank])})
    judged = [r for r in rows if r["size"] == judge_at] or [r for r in rows if r["size"] == rows[-1]["size"]]
    worst_row = min(judged, key=lambda r: r["busbw"])
    worst = worst_row["slowest_rank"]
    return Measurement(
        metrics={"busbw": worst_row["busbw"], "algbw": worst_row["algbw"],
                 "time_us": max(r["time_us"] for r in judged),
                 "avg_busbw": fmean(r["busbw"] for r in rows), "wrong": float(sum(r["wrong"] for r in rows)),
                 "iter_cv": max((r.get("iter_cv", float("nan")) for r in judged), default=float("nan"))},
        units=dict(COLLECTIVE_UNITS),
        rows=rows, worst=f"rank {worst} ({hosts[worst]})", judged_at=worst_row["size"],
        worst_of={"wrong": _wrong_ranks(rows, per_rank, hosts)} if any(r["wrong"] for r in rows) else {})


def _wrong_ranks(rows: list[dict[str, Any]], per_rank: list[dict[str, Any]], hosts: list[str]) -> str:
    """The ranks whose results were wrong (not the slowest one), with their counts and the sizes."""
    counts: dict[int, int] = {}
    sizes: dict[int, list[int]] = {}
    for row, by_rank in zip(rows, zip(*[r["rows"] for r in per_rank])):
        for rank in row["wrong_ranks"]:
            counts[rank] = counts.get(rank, 0) + by_rank[rank]["wrong"]
            sizes.setdefault(rank, []).append(row["size"])
    named = [f"rank {r} ({hosts[r]}): {n} wrong at {', '.join(units.format_size(z) for z in dict.fromkeys(sizes[r]))}"
             for r, n in sorted(counts.items())]
    return "; ".join(named[:8]) + (f"; and {len(named) - 8} more rank(s)" if len(named) > 8 else "")
