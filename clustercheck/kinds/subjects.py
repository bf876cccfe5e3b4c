"""What the per-subject kinds share (host_device, device_memory, host_memory, gemm, and kinds from outside):
each rank answers `{subject: {metric: {median, min, max}}}` for its GPU or itself; the answers are merged
into one row per subject and metric, and each metric's headline is its worst subject."""

from __future__ import annotations

import re
from typing import Any

from clustercheck.errors import HarnessError, show
from clustercheck.judging.measurement import Measurement, evaluate
from clustercheck.judging.verdicts import Verdict
from clustercheck.kinds.base import BOUND_TWICE, Answers, Judge, Rules, every_rank_answered
from clustercheck.units import is_number


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


def checked(a: Answers, units_of: dict[str, str]) -> None:
    """Every rank of the item answered, for subjects of its own, a number (the median) for every metric of the
    kind; else a HarnessError naming the rank, its host and the subject. merged() keeps one of two ranks that
    answered for one GPU (a rank that measured 1e-9 GB/s, hidden behind the other's good number), and a rank
    or a metric missing would leave that GPU unjudged, silently (the fail-closed rule)."""
    what = f"{a.check.measure} {a.check.id}"
    every_rank_answered(a, what)
    owner: dict[str, tuple[str, str]] = {}  # subject -> (the rank that answered it, its host)
    for i, (answer, rank) in enumerate(zip(a.per_rank, a.ranks)):
        host = str(rank.get("host", "?"))
        who = f"rank {rank.get('rank', i)} on {host}"
        subjects = answer.get("subjects") if isinstance(answer, dict) else None
        if not isinstance(subjects, dict) or not subjects:
            raise HarnessError(f"{what}: {who} answered no subject ({show(subjects, 40)}): nothing of it judged")
        for subject, values in subjects.items():
            if not isinstance(subject, str):
                raise HarnessError(f"{what}: {who} answered a subject that is no name ({show(subject, 40)})")
            if subject in owner:
                first, at = owner[subject]
                why = BOUND_TWICE if at == host else "one subject on two nodes cannot be judged apart"
                raise HarnessError(f"{what}: {subject} answered by {first} and by {who}: {why}; "
                                   f"neither is judged")
            owner[subject] = (who, host)
            for metric in units_of:
                value = values.get(metric) if isinstance(values, dict) else None
                median = value.get("median") if isinstance(value, dict) else None
                if not is_number(median):
                    said = (f"no {metric}" if value is None else f"median {show(median, 40)}"
                            if isinstance(value, dict) else show(value, 40))
                    raise HarnessError(f"{what}: {who} answered no number for {subject} {metric} ({said}): "
                                       f"not judged")


def per_subject(units_of: dict[str, str]) -> Judge:
    """The judge of a kind whose ranks answer per subject, with these metrics and units: every limit judged
    per subject that carries its metric, once every rank answered its own subjects in full (checked)."""
    def judge(a: Answers, rules: Rules) -> tuple[Measurement, list[Verdict]]:
        checked(a, units_of)
        m = reduce_subjects(a.per_rank, units_of)
        return m, evaluate(m, dict(rules.limits))
    return judge
