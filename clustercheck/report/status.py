"""The run's verdict as every report states it: PASS, FAIL, ERROR, SKIPPED or INCOMPLETE, with the items
that never ran and the nodes nothing measured. A gate is judged by its worst case, so a run that did not
finish is INCOMPLETE whatever its finished items say, and one that left a node unmeasured is no PASS."""

from __future__ import annotations

from typing import Any

from clustercheck.record.exclude import untested
from clustercheck.record.io import Record
from clustercheck.record.schema import counts, item_id


def run_status(rec: Record) -> dict[str, Any]:
    why = rec.incomplete()
    c = counts(rec.results)
    nodes = list(rec.header.get("nodes") or [])
    # what the results show, and what the exclude line adds (it may know more): an exclude line that says
    # less must not clear a node the results left unmeasured (an edited one turned an ERROR run into PASS)
    recorded = (rec.exclude or {}).get("untested") or []
    unmeasured = list(dict.fromkeys([*untested(nodes, rec.results), *recorded]))
    if why:
        verdict = "INCOMPLETE"
    elif c["failed"]:
        verdict = "FAIL"
    elif c["error"]:
        verdict = "ERROR"  # the harness could not measure something: never a pass
    elif not c["passed"]:
        verdict = "SKIPPED"  # nothing applied here: nothing was measured, nothing is cleared
    elif unmeasured:
        verdict = "ERROR"  # others passed, but every item that covered these nodes was skipped: never a pass
    else:
        verdict = "PASS"
    not_run = rec.not_run()
    return {
        "verdict": verdict,
        "incomplete": None if why is None else {"reason": why, "not_run": len(not_run),
                                                "planned": len(rec.plan or []),
                                                "items": [item_id(p) for p in not_run]},
        "untested": unmeasured,
    }


def untested_text(node: str) -> str:
    """What junit.xml and ctrf.json say of a node no item measured, as the failure of its own each gives it."""
    return f"untested: no item measured {node}; it is not cleared"
