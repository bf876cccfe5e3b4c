"""Localization on small fabrics an audit found wrong: what a switch finding names, and that no healthy node is
named and nothing not cleared passes (docs/localize.md: no healthy node named; a part named by a single failed
reading is tested again first; ties are suspects, never blamed). Real components: the planner, driven through
clustercheck.localize.check.localize with all_reduce answers shaped like the runner's ranks', and the record's
exclusion rules; the fabric below reads each group's busbw from its members."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Iterable

from clustercheck.localize import Topology, ring_edges
from clustercheck.localize.check import localize
from clustercheck.localize.model import link
from clustercheck.record.exclude import excluded

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_localize_fail_closed import answers, records  # noqa: E402

GOOD, SLOW, FLOOR = 2.0, 0.3, 1.0


def fabric(nodes: list[str], leaf_of: dict[str, str], bad_nodes: Iterable[str] = (),
           bad_links: Iterable[tuple[str, str]] = (), bad_uplinks: Iterable[str] = (),
           noisy: dict[tuple[int, frozenset[str]], float] | None = None) -> tuple[dict, list[dict[str, Any]]]:
    """Run the check's localization over `nodes` (one rank each) under leaves `leaf_of` (one spine above them
    when there are several): a group reads SLOW when it holds a bad node, sends over a bad link or crosses a bad
    uplink, else GOOD; `noisy[(round, members)]` overrides one group's reading (NaN: no result)."""
    bad = set(bad_nodes)
    slow_links = [set(x) for x in bad_links]
    leaves = set(leaf_of.values())
    topo = Topology.build(leaf_of, {leaf: "spine" for leaf in leaves} if len(leaves) > 1 else {})
    round_ = [0]

    def gbps(members: list[str]) -> float:
        if noisy and (round_[0], frozenset(members)) in noisy:
            return noisy[(round_[0], frozenset(members))]
        if set(members) & bad:
            return SLOW
        for u, v in ring_edges(tuple(members)):
            if {u, v} in slow_links or set(topo.crossed(u, v)) & set(bad_uplinks):
                return SLOW
        return GOOD

    def run(groups: list[list[int]]) -> dict[int, dict[str, Any]]:
        round_[0] += 1
        return answers(groups, lambda g: gbps([nodes[r] for r in g]))

    return localize(nodes, {n: [i] for i, n in enumerate(nodes)}, FLOOR, run, "fabric", topology=topo)


def record(items: dict, nodes: list[str]) -> Any:
    """The record's result entries for the items (test_localize_fail_closed.records, typed loosely there)."""
    return records(items, nodes)


def cluster_subjects(items: dict) -> list[str | None]:
    return [v.subject for v in items[None][0] if not v.passed]


def test_a_slow_uplink_is_named_by_its_switch_with_the_nodes_below_it() -> None:
    """Three leaves of two under one spine, L1's uplink slow: the finding is `switch L1` and its nodes are
    L1's two. It listed every node (each one's path up shares the spine) and the subject was
    `switch h0 <-> h1 <-> ... h5`, which never said which switch."""
    nodes = [f"h{i}" for i in range(6)]
    items, _ = fabric(nodes, {n: f"L{i // 2}" for i, n in enumerate(nodes)}, bad_uplinks=["L1"])
    (verdict,) = [v for v in items[None][0] if not v.passed]
    assert verdict.subject == "switch L1"
    assert "(nodes below it: h2, h3)" in verdict.detail, verdict.detail
    assert all(items[n][0][0].passed for n in nodes)
    assert excluded(record(items, nodes)) == {}


def test_a_link_between_dashed_hostnames_says_which_two() -> None:
    """`a-1` and `a-2` joined by "-" read `a-1-a-2`, which `a-1-a` and `2` would read too."""
    assert link("a-2", "a-1").name == "a-1 <-> a-2"
    nodes = ["a-1", "a-2", "a-3", "a-1-a", "b"]
    items, _ = fabric(nodes, {n: "L0" for n in nodes}, bad_links=[("a-1", "a-2")])
    assert cluster_subjects(items) == ["link a-1 <-> a-2"]
    assert "link a-1 <-> a-2 (a-1, a-2) named bad" in items[None][0][0].detail
