"""The localization planner on simulated clusters (benchmarks/localize_sim.py), its topology parser and
its edge cases. The planner is pure: no ranks, no torch."""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path
from typing import Callable

import pytest

from clustercheck.errors import HarnessError, UserError
from clustercheck.localize import Planner, Topology, exercised, load_topology, parse_topology_conf, ring_edges
from clustercheck.localize.drive import all_reduce_busbw, drive, group_outcomes, rank_groups
from clustercheck.localize.model import link, node, uplink

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import localize_sim as sim  # noqa: E402

# The EXAMPLE of Slurm's topology.conf(5), topology/tree part (SchedMD/slurm doc/man/man5/topology.conf.5).
MAN_EXAMPLE = """\
##################################################################
# Slurm's network topology configuration file for use with the
# topology/tree plugin
##################################################################
SwitchName=s0 Nodes=dev[0-5]
SwitchName=s1 Nodes=dev[6-11]
SwitchName=s2 Nodes=dev[12-17]
SwitchName=s3 Switches=s[0-2]
"""


def config(**kw: object) -> dict[str, object]:
    cfg: dict[str, object] = dict(nodes=1024, leaf_size=32, bad_nodes=10, dead_nodes=2, bad_links=2, bad_switches=1,
                                  transients=0, noise=0.05, outliers=0.0, link_pool="neighbours")
    cfg.update(kw)
    return cfg


def wrong(r: dict[str, object]) -> dict[str, object]:
    """What the planner got wrong, by kind: (named but not faulty, faulty but not named)."""
    out = {}
    for k in ("nodes", "links", "switches"):
        found = {json.dumps(x) for x in r[f"found_{k}"]}  # type: ignore[attr-defined]
        true = {json.dumps(x) for x in r[f"true_{k}"]}  # type: ignore[attr-defined]
        if found != true:
            out[k] = (sorted(found - true), sorted(true - found))
    return out


def test_1024_nodes_10_bad_2_links_1_uplink_every_seed_within_3_rounds() -> None:
    for seed in range(20):
        nodes, topo, faults = sim.setup(config(), seed)
        assert len(faults.nodes) == 10 and len(faults.links) == 2 and len(faults.switches) == 1
        r = sim.run_planner(nodes, topo, faults)
        assert wrong(r) == {}, (seed, wrong(r))  # every fault named, as its own kind; nothing healthy named
        # 3, 11 and 13 put bad nodes at both ends of two neighbouring round-2 pairs (c0 and c3): the edge c1-c2
        # between them runs alone in round 4, once round 3 cleared both its ends
        assert r["rounds"] <= (4 if seed in (3, 11, 13) else 3), seed


def test_8192_nodes_80_bad_within_4_rounds() -> None:
    for seed in (0, 7, 9):  # 7 and 9 put two bad nodes in one round-2 pair (9: twice): they take round 4
        nodes, topo, faults = sim.setup(config(nodes=8192, bad_nodes=80, bad_links=0, bad_switches=0), seed)
        r = sim.run_planner(nodes, topo, faults)
        assert wrong(r) == {} and r["rounds"] == (3 if seed == 0 else 4), (seed, r["rounds"], wrong(r))


@pytest.mark.parametrize("bad_nodes, bad_links, named", [
    ({"n00002": 0.4, "n00003": 0.4}, {}, {("node", "n00002"), ("node", "n00003")}),
    ({"n00003": 0.4}, {("n00001", "n00002"): 0.4}, {("link", "n00001 <-> n00002"), ("node", "n00003")}),
    ({"n00002": 0.4}, {("n00003", "n00004"): 0.4}, {("link", "n00003 <-> n00004"), ("node", "n00002")}),
])
def test_two_faults_in_one_round_2_pair_tie_after_3_rounds_and_round_4_tells_them_apart(
        bad_nodes: dict[str, float], bad_links: dict[tuple[str, str], float], named: set[tuple[str, str]]) -> None:
    """Round 2 pairs n2 with n3 and round 3 pairs each with its other neighbour: these three truths fail
    exactly the same tests, so after 3 rounds no part may be blamed; round 4 gives n2 and n3 new partners."""
    nodes, topo = sim.cluster(128, 32)
    verdicts = []
    for cap in (3, 4):
        faults = sim.Faults(bad_nodes, bad_links, {}, {}, 0.0, 0.0, random.Random(0))
        planner = Planner(nodes, topo, threshold=sim.THRESHOLD, max_rounds=cap)
        while groups := planner.next_round():
            planner.record({g.id: sim.measure(faults, topo, g.members, g.round) for g in groups})
        verdicts.append(planner.verdicts())
    tied, told = verdicts
    assert tied.rounds == 3 and tied.findings == () and len(tied.suspects) == 1
    assert set(tied.suspects[0]) == {node("n00002"), node("n00003"), link("n00001", "n00002"), link("n00003", "n00004")}
    assert told.rounds == 4 and {(f.kind, f.name) for f in told.findings} == named and told.suspects == ()


def test_transient_slowdowns_are_not_blamed_once_confirmed() -> None:
    """A node slow during one round looks like a link in that round; the confirmation round retests
    every part only one failed test points at, and a transient then passes."""
    for seed in range(5):
        nodes, topo, faults = sim.setup(config(transients=2), seed)
        planner = Planner(nodes, topo, threshold=sim.THRESHOLD, confirm=True)
        while groups := planner.next_round():
            planner.record({g.id: sim.measure(faults, topo, g.members, g.round) for g in groups})
        v = planner.verdicts()
        assert {f.name for f in v.named("node")} == set(faults.nodes), seed
        assert {f.nodes for f in v.named("link")} == set(faults.links), seed
        assert v.rounds <= 4


@pytest.mark.parametrize("reading, rounds, named", [(78.0, 4, False), (50.0, 3, True)])
def test_a_link_named_from_one_marginal_reading_is_tested_again(reading: float, rounds: int, named: bool) -> None:
    """One test of the healthy pair n5-n6 reads `reading` against a threshold of 80 (noise, once): 78 is
    within 10% of the threshold, so without confirm=True the last round tests the link again, it passes,
    and nothing is named; 50 is no noise, and the link is named in 3 rounds. Node n9 is really slow."""
    nodes, topo = sim.cluster(64, 32)
    planner = Planner(nodes, topo, threshold=sim.THRESHOLD)
    once = {"left": 1}

    def measure(members: tuple[str, ...]) -> float:
        if "n00009" in members:
            return 40.0
        if set(members) >= {"n00005", "n00006"} and once["left"]:  # the screening ring, then the pair: once each
            if len(members) == 2:
                once["left"] = 0
            return reading
        return 100.0
    while groups := planner.next_round():
        planner.record({g.id: measure(g.members) for g in groups})
    v = planner.verdicts()
    assert v.rounds == rounds and {f.name for f in v.named("node")} == {"n00009"}
    assert bool(v.named("link")) is named, [f.name for f in v.named("link")]
    # the one low reading of the pair is left unexplained (noise), never pinned on a part
    assert len(v.unexplained) == (0 if named else 1)


def test_two_pass_pairs_cannot_tell_a_link_from_a_transient() -> None:
    """Google's two passes (random pairs, then each failed node with a passed one) give the same
    answer for a slow link and for a node that was slow only during pass 1."""
    nodes, topo = sim.cluster(64, 32)
    order = list(nodes)
    random.Random(0 + 7).shuffle(order)  # run_two_pass's pass-1 pairing for seed 0
    u, v = order[0], order[1]
    quiet = dict(nodes={}, switches={}, noise=0.0, outliers=0.0)
    slow_link = sim.Faults(links={(min(u, v), max(u, v)): 0.4}, transients={}, rng=random.Random(1), **quiet)  # type: ignore[arg-type]
    transient = sim.Faults(links={}, transients={u: (1, 0.4)}, rng=random.Random(1), **quiet)  # type: ignore[arg-type]
    a, b = sim.run_two_pass(nodes, topo, slow_link, 0), sim.run_two_pass(nodes, topo, transient, 0)
    assert a["found_links"] == b["found_links"] == [sorted([u, v])] and a["rounds"] == b["rounds"] == 2


def test_no_bad_node_takes_one_round_and_blames_nothing() -> None:
    nodes, topo, faults = sim.setup(config(bad_nodes=0, bad_links=0, bad_switches=0), 3)
    r = sim.run_planner(nodes, topo, faults)
    assert r["rounds"] == 1 and not r["found_nodes"] and not r["found_links"] and not r["found_switches"]


def test_every_group_failing_blames_nobody() -> None:
    nodes, topo = sim.cluster(128, 32)
    planner = Planner(nodes, topo, threshold=1e9)  # a threshold no test meets: a shared cause, not the nodes
    while groups := planner.next_round():
        planner.record({g.id: 100.0 for g in groups})
    v = planner.verdicts()
    assert v.every_test_failed and v.findings == () and v.rounds <= 4


@pytest.mark.parametrize("n", [1000, 97, 5])
def test_node_counts_that_are_not_powers_of_two(n: int) -> None:
    for seed in range(3):
        cfg = config(nodes=n, bad_nodes=max(1, n // 100), bad_links=1 if n > 32 else 0, bad_switches=1 if n > 32 else 0)
        nodes, topo, faults = sim.setup(cfg, seed)
        r = sim.run_planner(nodes, topo, faults)
        assert wrong(r) == {} and r["rounds"] <= 4, (n, seed, r["rounds"], wrong(r))


def test_two_nodes() -> None:
    healthy = Planner(["a", "b"])
    assert [g.members for g in healthy.next_round()] == [("a", "b")]
    healthy.record({"r1-g0": True})
    assert healthy.next_round() == [] and healthy.verdicts().findings == ()
    sick = Planner(["a", "b"])
    sick.next_round()
    sick.record({"r1-g0": False})  # a or b or their link, and no third node to tell
    v = sick.verdicts()
    assert sick.next_round() == [] and v.findings == ()
    assert set(v.suspects[0]) == {node("a"), node("b"), link("a", "b")}
    silent = Planner(["a", "b"])
    silent.next_round()
    silent.record({"r1-g0": None})  # no measurement: no evidence about a, b or their link
    assert [g.members for g in silent.next_round()] == [("a", "b")]  # a pair with no result runs again
    while silent.next_round():
        silent.record({})  # a group left out: no result again
    v = silent.verdicts()
    assert v.findings == () and v.suspects == () and v.cleared == frozenset()
    assert v.untested == ("a", "b") and [e.group for e in v.no_result] == ["r1-g0", "r2-g0", "r3-g0", "r4-g0"]


def test_three_nodes_one_bad() -> None:
    planner = Planner(["a", "b", "c"])
    while groups := planner.next_round():
        planner.record({g.id: "b" not in g.members for g in groups})
    v = planner.verdicts()
    assert [(f.kind, f.name) for f in v.findings] == [("node", "b")] and v.cleared == {"a", "c"}
    assert all(e.round <= v.rounds for e in v.findings[0].evidence)


def test_rounds_are_disjoint_and_evidence_names_failed_tests() -> None:
    nodes, topo, faults = sim.setup(config(nodes=256, bad_nodes=3), 1)
    planner = Planner(nodes, topo, threshold=sim.THRESHOLD)
    results: dict[str, float | None] = {}
    while groups := planner.next_round():
        members = [m for g in groups for m in g.members]
        assert len(members) == len(set(members))  # a node runs in one group a round
        got = {g.id: sim.measure(faults, topo, g.members, g.round) for g in groups}
        results.update(got)
        planner.record(got)
    for f in planner.verdicts().findings:
        assert f.evidence and all(not sim._ok(results[e.group]) for e in f.evidence)
        assert 0.9 < f.confidence <= 1


def test_measurement_model_ring_uses_k_links_and_a_cross_leaf_pair_its_uplinks() -> None:
    topo = parse_topology_conf(MAN_EXAMPLE)
    assert ring_edges(("a", "b", "c", "d")) == [("a", "b"), ("b", "c"), ("c", "d"), ("d", "a")]
    assert ring_edges(("a", "b")) == [("a", "b")]
    assert exercised(("dev0", "dev1", "dev2"), topo) == {node("dev0"), node("dev1"), node("dev2"),
                                                         link("dev0", "dev1"), link("dev1", "dev2"), link("dev0", "dev2")}
    assert exercised(("dev0", "dev6"), topo) == {node("dev0"), node("dev6"), uplink("s0"), uplink("s1")}


def test_topology_conf_from_the_slurm_man_page(tmp_path: Path) -> None:
    topo = parse_topology_conf(MAN_EXAMPLE)
    assert topo.leaf("dev5") == "s0" and topo.leaf("dev17") == "s2"
    assert dict(topo.parent_of) == {"s0": "s3", "s1": "s3", "s2": "s3"}
    assert topo.crossed("dev0", "dev7") == ("s0", "s1") and topo.crossed("dev0", "dev5") == ()
    path = tmp_path / "topology.conf"
    path.write_text("switchname=leaf1 nodes=gpu[001-002] LinkSpeed=100  # trailing comment\n"
                    "SWITCHNAME=leaf2 NODES=gpu003\nSwitchName=spine Switches=leaf[1-2]\n")
    assert dict(load_topology(path).leaf_of) == {"gpu001": "leaf1", "gpu002": "leaf1", "gpu003": "leaf2"}
    block = parse_topology_conf("BlockName=b1 Nodes=n[1-2]\nBlockName=b2 Nodes=n[3-4]\nBlockSizes=2,4\n")
    assert block.crossed("n1", "n3") == ("b1", "b2")
    js = tmp_path / "topo.json"
    js.write_text(json.dumps({"l1": {"nodes": "x[1-2]"}, "l2": {"nodes": ["x3"]}, "top": {"switches": "l[1-2]"}}))
    assert load_topology(js).crossed("x1", "x3") == ("l1", "l2")


@pytest.mark.parametrize("text, message", [
    ("SwitchName=s0 Nodes=a[1-2]\nSwitchName=s1 Nodes=a2\n", "t.conf:2: Nodes: node 'a2' is already under switch 's0'"),
    ("SwitchName=s0 Nodes=a1 Bandwidth=9\n", "t.conf:1: Bandwidth: unknown key"),
    ("SwitchName=s0 Switches=s9\n", "t.conf:1: Switches: switch 's0' lists 's9', which is not defined"),
    ("Nodes=a1\n", "t.conf:1: a line needs SwitchName="),
    ("SwitchName=s0 Nodes=a[1-\n", "t.conf:1: Nodes: bad hostlist"),
    ("SwitchName=s0 Switches=s1\nSwitchName=s1 Switches=s0\n", "t.conf:1: switches form a loop"),
    ("SwitchName=s0\n", "t.conf:1: switch 's0' has neither Nodes= nor Switches="),
])
def test_topology_mistakes_are_one_line(text: str, message: str) -> None:
    with pytest.raises(UserError) as info:
        parse_topology_conf(text, "t.conf")
    assert str(info.value).startswith(message) and "\n" not in str(info.value)


def test_planner_refuses_misuse_in_one_line() -> None:
    with pytest.raises(UserError, match="listed twice: a"):
        Planner(["a", "b", "a"])
    with pytest.raises(UserError, match="under no switch: c"):
        Planner(["a", "c"], Topology.build({"a": "s0"}, {}))
    p = Planner(["a", "b", "c", "d"])
    with pytest.raises(UserError, match="call next_round"):
        p.record({})
    p.next_round()
    with pytest.raises(UserError, match="not in this round: 'r9-g0'"):
        p.record({"r9-g0": True})
    with pytest.raises(UserError, match="needs a threshold"):
        p.record({"r1-g0": 12.5})
    p.record({})  # a group without a result failed (no measurement is not a pass)
    assert p.next_round() and p.tests == 1


def test_simulator_json_has_exactly_the_documented_keys(capsys: pytest.CaptureFixture[str]) -> None:
    assert sim.main(["--nodes", "128", "--bad-nodes", "2", "--bad-links", "1", "--seed", "4", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) == {"rounds", "tests", "found_nodes", "true_nodes", "found_links", "true_links",
                        "found_switches", "true_switches"}
    assert all(isinstance(p, list) and len(p) == 2 for p in out["true_links"]) and len(out["true_nodes"]) == 2


def test_drive_runs_the_rounds_on_a_measuring_function() -> None:
    """drive() with the simulator as the measuring function reaches the same verdicts as the loop by hand,
    and sees each round's groups and outcomes."""
    nodes, topo, faults = sim.setup(config(nodes=256, bad_nodes=3), 2)
    seen: list[tuple[int, int]] = []
    rounds = iter(range(1, 10))

    def run(groups: list[tuple[str, ...]]) -> list[float | None]:
        r = next(rounds)
        return [sim.measure(faults, topo, g, r) for g in groups]

    v = drive(Planner(nodes, topo, threshold=sim.THRESHOLD), run,
              on_round=lambda gs, out: seen.append((gs[0].round, len(out))))
    by_hand = sim.run_planner(*sim.setup(config(nodes=256, bad_nodes=3), 2))
    assert {f.name for f in v.named("node")} == set(by_hand["found_nodes"]) == set(faults.nodes)
    assert [r for r, _ in seen] == list(range(1, v.rounds + 1)) and all(n > 0 for _, n in seen)
    with pytest.raises(HarnessError, match="round 1: 0 outcome"):
        drive(Planner(nodes, topo), lambda groups: [])


def test_rank_groups_keep_members_order_and_refuse_a_ring_out_of_rank_order() -> None:
    ranks = {"a": [0, 1], "b": [2, 3], "c": [4, 5]}
    assert rank_groups([("a", "b", "c"), ("c", "a")], ranks) == [[0, 1, 2, 3, 4, 5], [4, 5, 0, 1]]
    with pytest.raises(UserError, match="ring c, a, b is not in the pool's rank order"):
        rank_groups([("c", "a", "b")], ranks)  # torch's new_group would sort it: another ring than planned
    with pytest.raises(UserError, match="without a rank in this pool: d"):
        rank_groups([("a", "d")], ranks)


def test_group_outcomes_fail_a_group_with_a_silent_rank_and_keep_the_others() -> None:
    def answer(seconds: float, wrong: int = 0) -> dict[str, object]:
        return {"rows": [{"size": 8, "bytes": 8, "seconds": 1.0, "wrong": 0},
                         {"size": 1 << 20, "bytes": 1 << 20, "seconds": seconds, "wrong": wrong}]}

    answers = {0: answer(0.001), 1: answer(0.003), 2: answer(0.001), 4: answer(0.001), 5: answer(0.001, wrong=1)}
    out = group_outcomes([[0, 1], [2, 3], [4, 5]], answers, all_reduce_busbw)
    assert out[1] is None and out[2] is False  # rank 3 said nothing; rank 5 summed wrong
    assert out[0] == pytest.approx((1 << 20) / 0.002 / 1e9)  # mean time over ranks, factor 2(n-1)/n = 1
    broken = {0: answer(0.004), 1: answer(-0.001)}  # a mean of 1.5 ms: it read as a fine group before
    assert group_outcomes([[0, 1]], broken, all_reduce_busbw) == [None]


def test_scope_localize_items_from_measured_groups():
    """clustercheck.localize.check on a fake fabric (ranks answer as the all_reduce runner does): the
    slow node fails with its evidence, the others pass, the cluster item names no link."""
    from clustercheck.localize.check import localize

    nodes = [f"n{i}" for i in range(1, 9)]
    ranks_of = {n: [i] for i, n in enumerate(nodes)}
    size = 1 << 20

    def run(groups: list[list[int]]) -> dict[int, dict]:
        out = {}
        for g in groups:
            gbps = 0.1 if 2 in g else 10.0  # n3's rank: a slow node
            for r in g:
                out[r] = {"rows": [{"size": size, "bytes": size, "seconds": size / 1e9 / gbps, "wrong": 0}]}
        return out

    items, rows = localize(nodes, ranks_of, 1.0, run, "fabric")
    assert [v.passed for v in items["n3"][0]] == [False] and "named bad" in items["n3"][1]
    assert all(items[n][0] and items[n][0][0].passed for n in nodes if n != "n3")
    assert [v.passed for v in items[None][0]] == [True]
    assert rows and {r["outcome"] for r in rows} == {"passed", "failed"} and max(r["round"] for r in rows) <= 4


def _localize_on(leaf: dict[str, str], slow: Callable[[list[str]], bool]) -> dict:
    """clustercheck.localize.check over a fake fabric where a group whose members `slow` picks reads 0.5 MB/s."""
    from clustercheck.localize.check import localize

    nodes = list(leaf)
    topology = Topology.build(leaf, {s: "spine" for s in set(leaf.values())})

    def run(groups: list[list[int]]) -> dict[int, dict]:
        seconds = {tuple(g): 2.0 if slow([nodes[r] for r in g]) else 0.01 for g in groups}
        return {r: {"rows": [{"size": 1 << 20, "bytes": 1 << 20, "seconds": seconds[tuple(g)], "wrong": 0}]}
                for g in groups for r in g}

    items, _ = localize(nodes, {n: [i] for i, n in enumerate(nodes)}, 0.05, run, "fabric", topology=topology)
    return items


def test_failures_the_rounds_pin_on_no_one_uplink_fail_the_cluster_item_by_its_suspects():
    leaf = {"a": "L1", "b": "L1", "c": "L2", "d": "L2"}  # two leaves: their uplinks are always crossed together
    items = _localize_on(leaf, lambda members: len({leaf[m] for m in members}) > 1)
    assert all(items[n][0][0].passed for n in leaf)  # each node passed within its leaf
    (verdict,) = items[None][0]  # it passed, "no link or uplink named", before
    assert not verdict.passed and verdict.subject == "one of: switch L1 | switch L2"


def test_every_group_failing_fails_the_cluster_item_though_no_part_is_named():
    leaf = {n: "L1" for n in "abcd"}
    items = _localize_on(leaf, lambda members: True)
    assert [v.measured for v in items[None][0] if not v.passed] == ["every group failed"]
    assert all(not items[n][0] for n in leaf)  # no node cleared or named: each an error


@pytest.mark.parametrize("name, data", [("topo3.conf", b"\xff\xfe\x00"), ("topo.json", b'{"s0": "\xe9"}')])
def test_a_topology_file_that_is_not_utf8_is_one_user_error(tmp_path, name, data):
    (tmp_path / name).write_bytes(data)  # a UnicodeDecodeError escaped as an INTERNALERROR (exit 3) before
    with pytest.raises(UserError) as info:
        load_topology(tmp_path / name)
    assert str(info.value) == f"{tmp_path / name}: not UTF-8 text"
