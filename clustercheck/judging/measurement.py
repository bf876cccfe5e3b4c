"""What one item measured and how it came out: the `Measurement` a kind's judge reduces the ranks'
answers to (headline metrics, per-size rows, per-subject values), `evaluate`, which judges it against
limits, and the `Outcome` (measurement, verdicts, the pool that measured) the session records."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from clustercheck import units
from clustercheck.errors import NotMeasured
from clustercheck.judging.limits import Limit
from clustercheck.judging.verdicts import Verdict, of_limit


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
    comm: dict[str, Any] = field(default_factory=dict)  # collectives: the library and what it said (fabric/comm.py)
    notes: tuple[str, ...] = ()  # what the check did not judge, by its own parameters: the item's notes (Outcome)


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


@dataclass(frozen=True)
class Outcome:
    """One item's measurement, its verdicts and the pool that measured it."""

    measurement: Measurement
    verdicts: list[Verdict]
    pool: dict[str, Any]
    answers: list[dict[str, Any]] | None = None  # what the ranks answered, as the judge read it (for verify)
    # what was not judged because the node has not got it (`<node>: <what>`: a GPU without ECC, a node
    # without InfiniBand): said in the record and every report, never an error and never silence
    notes: tuple[str, ...] = ()
    # nodes that stopped answering in an item failed by another node's counter window (windows.despite): the
    # result names them `unreachable`, as an Unreachable error's would
    unreachable: tuple[str, ...] = ()
