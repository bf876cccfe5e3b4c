"""Localization judges only what some test measured (docs/localize.md, fail-closed): every uplink between the
run's nodes is crossed by a test or the cluster item says which was not, and every link is tested apart from
a failed part or said untested. Real components: the planner, driven through clustercheck.localize.check.localize
with all_reduce answers shaped like the runner's ranks'; the fabric below reads each group's busbw from its
members and the switch tree."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any, Iterable, Iterator

from clustercheck.localize import Planner, Topology, ring_edges
from clustercheck.localize.check import items, localize

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_localize_fail_closed import answers  # noqa: E402

GOOD, SLOW, FLOOR = 2.0, 0.3, 1.0


def fabric(nodes: list[str], topo: Topology, bad_nodes: Iterable[str] = (), bad_links: Iterable[tuple[str, str]] = (),
           bad_uplinks: Iterable[str] = (), max_rounds: int = 4) -> tuple[dict, list[dict[str, Any]]]:
    """Run the check's localization over `nodes` (one rank each) on the tree `topo`: a group reads SLOW when it
    holds a bad node, sends over a bad link or crosses a bad uplink, else GOOD."""
    bad, slow_links, slow_uplinks = set(bad_nodes), [set(x) for x in bad_links], set(bad_uplinks)

    def gbps(members: tuple[str, ...]) -> float:
        if set(members) & bad or any({u, v} in slow_links or set(topo.crossed(u, v)) & slow_uplinks
                                     for u, v in ring_edges(members)):
            return SLOW
        return GOOD

    def run(groups: list[list[int]]) -> dict[int, dict[str, Any]]:
        return answers(groups, lambda g: gbps(tuple(nodes[r] for r in g)))

    return localize(nodes, {n: [i] for i, n in enumerate(nodes)}, FLOOR, run, "fabric", topology=topo,
                    max_rounds=max_rounds)


def three_levels(spines: int, leaf_size: int = 32) -> tuple[list[str], Topology]:
    """Two leaves of `leaf_size` nodes under each spine switch S0, S1, ..., every spine under one core switch C:
    the screening rings (two leaves each, about 64 nodes) stay under one spine, so no ring crosses a spine's
    uplink."""
    nodes = [f"n{i:03d}" for i in range(2 * spines * leaf_size)]
    parent = {f"L{i}": f"S{i // 2}" for i in range(2 * spines)} | {f"S{j}": "C" for j in range(spines)}
    return nodes, Topology.build({n: f"L{i // leaf_size}" for i, n in enumerate(nodes)}, parent)


def crossed(rows: list[dict[str, Any]], topo: Topology) -> set[str]:
    """The uplinks the measured groups crossed."""
    return {s for r in rows if r["busbw"] is not None for u, v in ring_edges(tuple(r["members"]))
            for s in topo.crossed(u, v)}


def failed_subjects(items: dict) -> list[str | None]:
    return [v.subject for v in items[None][0] if not v.passed]


# -- uplinks above the leaves --------------------------------------------------------------------------------

def test_a_slow_spine_uplink_no_screening_ring_crossed_fails_the_cluster_item() -> None:
    """Two spines of two leaves, S0's uplink to the core slow. Each screening ring held one spine's leaves, both
    passed, the planner stopped after round 1 and the cluster item passed ('no link or uplink named'). Now
    cleared nodes of the two spines are paired across them; with two spines their uplinks are always crossed
    together, so the cluster item fails on the one of them the rounds cannot tell apart."""
    nodes, topo = three_levels(2)
    items, rows = fabric(nodes, topo, bad_uplinks=["S0"])
    assert {"S0", "S1"} <= crossed(rows, topo)
    assert failed_subjects(items) == ["one of: switch S0 | switch S1"]
    assert all(items[n][0] and items[n][0][0].passed for n in nodes)  # the nodes passed every ring


def test_three_spines_meet_in_different_pairs_and_the_slow_uplink_is_named_alone() -> None:
    """Three spines, S1's uplink slow: the pairs across spines meet S0-S1, S0-S2 and S1-S2, so S1 is named from
    two failed pairs and S0 and S2 are cleared by the third."""
    nodes, topo = three_levels(3)
    items, rows = fabric(nodes, topo, bad_uplinks=["S1"])
    assert failed_subjects(items) == ["switch S1"]
    assert items[None][1] == ""  # no uplink left unjudged beside it
    assert max(r["round"] for r in rows) == 2


def test_a_healthy_three_level_tree_passes_once_pairs_crossed_the_spines() -> None:
    nodes, topo = three_levels(2)
    items, rows = fabric(nodes, topo)
    assert {"S0", "S1"} <= crossed(rows, topo)
    assert [v.measured for v in items[None][0]] == ["no link or uplink named"] and items[None][0][0].passed
    assert max(r["round"] for r in rows) == 2


def test_a_spine_uplink_no_round_was_left_to_cross_is_not_judged() -> None:
    """One round allowed: nothing crossed S0's or S1's uplink, and the cluster item is an error naming them."""
    nodes, topo = three_levels(2)
    items, _ = fabric(nodes, topo, bad_uplinks=["S0"], max_rounds=1)
    verdicts, message = items[None]
    assert verdicts == [] and message == "not judged: uplink(s) S0, S1 never crossed by any test"


def test_two_levels_still_take_one_round_when_every_ring_passes() -> None:
    """Under one spine each ring crosses its leaves' uplinks: nothing is left to cross, nothing added."""
    nodes = [f"h{i}" for i in range(32)]
    topo = Topology.build({n: f"L{i // 8}" for i, n in enumerate(nodes)}, {f"L{i}": "spine" for i in range(4)})
    items, rows = fabric(nodes, topo)
    assert {r["round"] for r in rows} == {1} and items[None][0][0].passed


# -- links between nodes beside bad ones -----------------------------------------------------------------------

def link_fabric(slow_link: bool, max_rounds: int = 4) -> tuple[dict, list[dict[str, Any]], list[str]]:
    """Four leaves of 32 under one spine; n000 and n003 bad, and with `slow_link` the link n001 <-> n002 slow.
    Round 2 pairs n000+n001 and n002+n003 (both fail), so round 3 gives n001 and n002 helpers each and the
    edge n001-n002 runs in no round-3 pair: only the failed screening ring sent over it."""
    nodes = [f"n{i:03d}" for i in range(128)]
    topo = Topology.build({n: f"L{i // 32}" for i, n in enumerate(nodes)}, {f"L{i}": "S" for i in range(4)})
    items, rows = fabric(nodes, topo, bad_nodes=["n000", "n003"], bad_links=[("n001", "n002")] if slow_link else [],
                         max_rounds=max_rounds)
    return items, rows, nodes


def test_a_slow_link_between_two_nodes_beside_bad_ones_is_tested_alone_and_fails_the_cluster_item() -> None:
    """The link was never tested alone, n000 and n003 explained the ring's failure, and the cluster item passed
    ('no link or uplink named'). Once n001 and n002 are cleared the pair runs alone in round 4."""
    items, rows, nodes = link_fabric(slow_link=True)
    alone = [r for r in rows if r["members"] in (["n001", "n002"], ["n002", "n001"])]
    assert [r["outcome"] for r in alone] == ["failed"]
    assert failed_subjects(items) == ["one of: link n001 <-> n002"]  # one reading: confirm names nothing from it
    assert {n for n in nodes if items[n][0] and not items[n][0][0].passed} == {"n000", "n003"}


def test_a_healthy_link_between_nodes_beside_bad_ones_passes_once_tested_alone() -> None:
    items, rows, _ = link_fabric(slow_link=False)
    assert [r["outcome"] for r in rows if set(r["members"]) == {"n001", "n002"} and len(r["members"]) == 2] == ["passed"]
    assert items[None][0][0].passed and items[None][1] == ""


def test_a_link_no_round_was_left_to_test_alone_is_not_judged() -> None:
    """Three rounds: the link is still only in the failed ring, and the cluster item is an error naming it. A
    link with a bad end (n000 <-> n001) is left to the bad node's item: no test of it can pass."""
    items, _, _ = link_fabric(slow_link=True, max_rounds=3)
    verdicts, message = items[None]
    assert verdicts == [] and message == "not judged: link(s) n001 <-> n002 never tested apart from a failed part"


# -- items over many groups that gave no result -------------------------------------------------------------

class Members(tuple[str, ...]):
    """A group's members that count how often items() looks into them (a membership test or a walk)."""

    looks = 0

    def __contains__(self, node: object) -> bool:
        Members.looks += 1
        return super().__contains__(node)

    def __iter__(self) -> Iterator[str]:
        Members.looks += 1
        return super().__iter__()


def test_each_node_gets_its_no_result_groups_from_one_pass_over_them() -> None:
    """Every rank crashed in every round (256 nodes, 4 rounds): each node is not judged, naming exactly its own
    groups in round order, and each group's members are read once. items() scanned every group for every node
    (nodes x groups membership tests: 13.95 s at 8,192 nodes)."""
    nodes = [f"n{i:03d}" for i in range(256)]
    planner = Planner(nodes, Topology.build({n: f"L{i // 32}" for i, n in enumerate(nodes)},
                                            {f"L{i}": "S" for i in range(8)}), threshold=1.0, confirm=True)
    while planner.next_round():
        planner.record({})  # every group gave no result
    v = planner.verdicts()
    expected = {n: [e.group for e in v.no_result if n in e.members] for n in nodes}
    v = dataclasses.replace(v, no_result=tuple(dataclasses.replace(e, members=Members(e.members))
                                               for e in v.no_result))
    Members.looks = 0
    out = items(v, nodes, 1.0, "fabric")
    assert Members.looks <= len(v.no_result), (Members.looks, len(v.no_result))
    for n in nodes:
        verdicts, message = out[n]
        assert verdicts == [] and message.startswith("not judged: its groups gave no result (no answer): ")
        assert message.split(": ", 2)[2] == ", ".join(expected[n][:8]), n
