"""The record's lines about items: what the run plans to measure and each item's `result` line, built from
the check that was run and its outcome (docs/run-record.md)."""

from __future__ import annotations

from clustercheck.judging.measurement import Outcome
from clustercheck.record.io import now
from clustercheck.record.rebuild import keeps_answers
from clustercheck.record.schema import PlanItem, ResultEntry
from clustercheck.kinds.base import CheckSpec


def plan_item(check: CheckSpec, where: str | None, nodes: list[str], *, nodeid: str, name: str) -> PlanItem:
    return {"name": name, "nodeid": nodeid, "check": check.id, "measure": check.measure, "scope": check.scope,
            "node": where, "nodes": where.split(",") if where else list(nodes), "suite_file": check.file,
            "line": check.line}


def result_entry(check: CheckSpec, where: str | None, nodes: list[str], *, nodeid: str, name: str, outcome: str,
                 message: str, duration: float, measured: Outcome | None, figure: str) -> ResultEntry:
    """The `result` line of one item (docs/run-record.md)."""
    entry: ResultEntry = {
        **plan_item(check, where, nodes, nodeid=nodeid, name=name), "type": "result",
        "description": check.description, "params": check.params, "outcome": outcome, "message": message,
        "duration": round(duration, 3), "finished": now(), "figure": figure,
    }
    if measured is not None:
        m = measured.measurement
        entry["metrics"] = {k: {"value": v, "unit": m.units[k]} for k, v in m.metrics.items()}
        entry["verdicts"] = [v.as_dict() for v in measured.verdicts]
        entry["rows"], entry["worst"], entry["judged_at"] = m.rows, m.worst, m.judged_at
        entry["pool"] = measured.pool
        if measured.answers is not None and keeps_answers(check.measure):
            entry["answers"] = measured.answers  # what `clustercheck verify` judges again (record/rebuild.py)
        if m.comm:
            entry["comm"] = m.comm
        if measured.notes:
            entry["notes"] = list(measured.notes)
    return entry
