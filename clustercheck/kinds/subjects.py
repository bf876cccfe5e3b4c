"""What the per-subject kinds share (host_device, device_memory, host_memory, gemm, and kinds from outside):
each rank answers `{subject: {metric: {median, min, max}}}` for its GPU or itself; the answers are merged
into one row per subject and metric, and each metric's headline is its worst subject."""

from __future__ import annotations

import re
from typing import Any

from clustercheck.judging.measurement import Measurement, evaluate
from clustercheck.judging.verdicts import Verdict
from clustercheck.kinds.base import Answers, Judge, Rules


def merged(per_rank: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Every rank's subjects in one mapping, in natural order (GPU2 before GPU10)."""
    out: dict[str, dict[str, Any]] = {}
    for result in per_rank:
        for subject, values in result["subjects"].items():
            out.setdefault(subject, {}).update(values)
    return dict(sorted(out.items(), key=lambda kv: natural(kv[0])))


def natural(text: str) -> list[Any]:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", text)]


def reduce_subjects(per_rank: list[dict[str, Any]], units_of: dict[str, str]) -> Measurement:
    """Per-GPU (or per-rank) medians with their spread; the headline of each metric is its worst subject
    (all these metrics are higher-is-better)."""
    found = merged(per_rank)
    subjects = {s: {k: v["median"] for k, v in values.items() if isinstance(v, dict)} for s, values in found.items()}
    rows = [{"subject": s, "metric": k, **v} for s, values in found.items() for k, v in values.items()
            if isinstance(v, dict)]
    metrics = {k: min(vals[k] for vals in subjects.values() if k in vals)
               for k in units_of if any(k in vals for vals in subjects.values())}
    first = next(iter(metrics), None)
    worst = min(subjects, key=lambda s: subjects[s].get(first, float("inf"))) if first else None
    return Measurement(metrics=metrics, units=dict(units_of), rows=rows, worst=worst, subjects=subjects)


def per_subject(units_of: dict[str, str]) -> Judge:
    """The judge of a kind whose ranks answer per subject, with these metrics and units: every limit judged
    per subject that carries its metric."""
    def judge(a: Answers, rules: Rules) -> tuple[Measurement, list[Verdict]]:
        m = reduce_subjects(a.per_rank, units_of)
        return m, evaluate(m, dict(rules.limits))
    return judge
