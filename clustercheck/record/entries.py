"""The record's lines about items: what the run plans to measure and each item's `result` line, built from
the check that was run and its outcome (docs/run-record.md), and the ones the run writes of its own: the
planned items of a node that never joined, and a failed `gpu-count` item for a node short of GPUs."""

from __future__ import annotations

from typing import Callable, Mapping

from clustercheck.judging.measurement import Outcome
from clustercheck.record.io import now
from clustercheck.record.rebuild import keeps_answers
from clustercheck.record.schema import PlanItem, ResultEntry, item_name
from clustercheck.judging.verdicts import Expectation, Verdict
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
        if where is None and measured.pool.get("nodes"):  # measured on the nodes left once some were lost mid-run
            entry["nodes"] = list(measured.pool["nodes"])
        if measured.answers is not None and keeps_answers(check.measure):
            entry["answers"] = measured.answers  # what `clustercheck verify` judges again (record/rebuild.py)
        if m.comm:
            entry["comm"] = m.comm
        if measured.notes:
            entry["notes"] = list(measured.notes)
    return entry


def absent_plan(checks: list[CheckSpec], absent: Mapping[str, str],
                items: Callable[[CheckSpec], list[str | None]]) -> list[PlanItem]:
    """The items that nodes which never joined would have had, planned and never run: every item of a full
    run (`items`: a check's items over the planned nodes, absent ones included, named as a full run names
    them) that covers an absent node: its node, GPU and localize items, and each node pair (link) with it.
    JUnit, results.json and the terminal then list each as not run, naming the node(s) that never joined."""
    unique = {c.id: c for c in checks}.values()
    return [plan_item(c, where, [], nodeid=f"{c.file}::{item_name(c.id, where)}", name=item_name(c.id, where))
            for c in unique for where in items(c) if where is not None and not absent.keys().isdisjoint(where.split(","))]


def short_node_results(short: dict[str, tuple[int, int]], per_node: int) -> list[ResultEntry]:
    """A failed `gpu-count[node]` item for each node with fewer usable GPUs than the others: the run had
    to use as many ranks per node as it has, so the others' extra GPUs went unmeasured because of it."""
    out: list[ResultEntry] = []
    for node, (count, most) in short.items():
        rule = Expectation("gpu-count", "usable GPUs", str(most), "the most GPUs any node of this run has")
        detail = (f"ranks see {count} GPU(s) here, {most} on other nodes: the run used {per_node} rank(s) per node, "
                  f"so GPU(s) beyond {per_node} on the other nodes went unmeasured")
        out.append({"type": "result", "name": f"gpu-count[{node}]", "nodeid": f"gpu-count[{node}]",
                    "check": "gpu-count", "measure": "layout", "scope": "node", "node": node, "nodes": [node],
                    "suite_file": "clustercheck", "line": 0, "outcome": "failed",
                    "message": f"{node}: {detail}", "duration": 0.0, "finished": now(),
                    "verdicts": [Verdict("usable GPUs", count, "", rule, False, subject=node, detail=detail).as_dict()]})
    return out
