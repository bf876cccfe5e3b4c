"""Nodes that stopped answering (record/exclude.py): each is listed, its own fault and not its peers', unless
every node that took part in the run did, more than one: then the controller's network or store is the likelier
cause (run/join.py `over()` stops such a run live; the list read back from a record, as `verify` reads it,
names none of them either)."""

from __future__ import annotations

from typing import Any, cast

from clustercheck.record.exclude import breaker, excluded, unproven
from clustercheck.record.schema import ResultEntry

SILENT = "stopped answering (no heartbeat: unreachable or dead)"


def _item(check: str, node: str, outcome: str = "error", **extra: Any) -> ResultEntry:
    return cast(ResultEntry, {"check": check, "name": f"{check}[{node}]", "scope": "node", "node": node, "nodes": [node],
            "outcome": outcome, "verdicts": [], "message": "", **extra})


def _lost(check: str, node: str, message: str = "", **extra: Any) -> ResultEntry:
    return _item(check, node, unreachable=[node], message=message or f"rank 0 ({node}) was lost", **extra)


def test_every_node_that_took_part_stopped_answering_lists_none() -> None:
    assert excluded([_lost("a", "h1"), _lost("a", "h2")]) == {}
    assert unproven([_lost("a", "h1"), _lost("a", "h2")]) == {}


def test_nodes_that_never_joined_do_not_keep_the_rest_listed() -> None:
    absent = _item("a", "h3", absent=["h3"], message="not run: h3 never joined")
    assert excluded([_lost("a", "h1"), _lost("a", "h2"), absent]) == {}


def test_a_node_still_answering_keeps_the_silent_ones_listed() -> None:
    results = [_lost("a", "h1"), _lost("a", "h2"), _item("a", "h3", "passed")]
    assert excluded(results) == {"h1": f"a: {SILENT}", "h2": f"a: {SILENT}"}


def test_one_node_silent_alone_is_listed() -> None:
    assert excluded([_lost("a", "h1")]) == {"h1": f"a: {SILENT}"}
    assert excluded([_lost("a", "h1"), _item("a", "h2", "passed")]) == {"h1": f"a: {SILENT}"}


def test_a_node_listed_by_evidence_or_the_scheduler_keeps_every_silent_one_listed() -> None:
    """Only nodes listed for nothing but their silence are left out, and only all of them together: a node the
    scheduler said failed, or one that failed a check, is evidence that the nodes themselves went down."""
    said = _lost("a", "h1", "h1 failed (srun: node failure); not measured: the job's step ended, so the run stopped")
    assert excluded([said, _lost("a", "h2")]) == {"h1": "a: the scheduler said it failed (srun: node failure)",
                                                  "h2": f"a: {SILENT}"}
    failed = _item("b", "h1", "failed", verdicts=[{"passed": False, "metric": "busbw", "measured": 0.1,
                                                   "limit": ">= 1", "unit": "GB/s"}])
    listed = excluded([failed, _lost("a", "h1"), _lost("a", "h2")])
    assert set(listed) == {"h1", "h2"} and listed["h2"] == f"a: {SILENT}"


def test_the_breaker_still_counts_nodes_that_stopped_answering() -> None:
    results = [_lost("a", "h1"), _lost("a", "h2"), _item("a", "h3", "passed"), _item("a", "h4", "passed")]
    tripped = breaker(results, excluded(results), 4, 0.25)
    assert tripped is not None and "2 of 4 nodes (50%) stopped answering" in tripped


def test_a_node_lost_before_the_others_went_at_once_stays_listed() -> None:
    """h1 stopped answering in check a; h2 and h3, all that were left, in check b together: h1 is its own loss
    (listed), h2 and h3 the controller's side (not listed). Two losses in two checks are each their own."""
    results = [_lost("a", "h1"), _item("a", "h2", "passed"), _item("a", "h3", "passed"),
               _lost("b", "h1"), _lost("b", "h2"), _lost("b", "h3")]
    assert excluded(results) == {"h1": f"a: {SILENT}"}
    one_by_one = [_lost("a", "h1"), _item("a", "h2", "passed"), _lost("b", "h1"), _lost("b", "h2")]
    assert excluded(one_by_one) == {"h1": f"a: {SILENT}", "h2": f"b: {SILENT}"}
    in_repetitions = [_lost("a", "h1", repeat=1), _item("a", "h2", "passed", repeat=1), _lost("a", "h2", repeat=2)]
    assert excluded(in_repetitions) == {"h1": f"a in repetition 1: {SILENT}", "h2": f"a in repetition 2: {SILENT}"}
