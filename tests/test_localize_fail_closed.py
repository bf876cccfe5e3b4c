"""`scope: localize` fails closed: the busbw floor is judged in its own unit, a number that is no bandwidth
(NaN, an infinity, a negative) is no result, a group whose rank crashed clears nothing and blames nothing
(its nodes are errors, never drained), and a cluster item failed on a link is said at the run's end.
Real components: the planner, clustercheck.localize.check, the record's entries and exclusion rules; the
all_reduce answers are the shape the runner's ranks give."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Callable

import pytest

from clustercheck.judging.measurement import Measurement, Outcome
from clustercheck.kinds.base import CheckSpec
from clustercheck.errors import UserError
from clustercheck.localize import Planner, Topology
from clustercheck.localize.drive import all_reduce_busbw
from clustercheck.localize.check import localize
from clustercheck.record.entries import result_entry
from clustercheck.record.exclude import excluded, unblamed

sys.path.insert(0, str(Path(__file__).resolve().parent))
from joining import LIMITS, all_reduce_suite, results as run_results  # noqa: E402
from test_hosts_agents import run as run_hosts  # noqa: E402

SIZE = 1 << 20
CHECK = CheckSpec("fabric", "all_reduce", "localize", {}, (), 60, "", "s.yaml", 1)


def answers(groups: list[list[int]], gbps: Callable[[list[int]], float]) -> dict[int, dict[str, Any]]:
    """Each rank's all_reduce answer for a group that reads `gbps(group)` GB/s busbw (algbw x 2(n-1)/n)."""
    return {r: {"rows": [{"size": SIZE, "bytes": SIZE, "seconds": SIZE / 1e9 / gbps(g) * 2 * (len(g) - 1) / len(g),
                          "wrong": 0}]} for g in groups for r in g}


def records(items: dict, nodes: list[str]) -> list[dict[str, Any]]:
    """The record's result lines for the items, as the session writes them (an item without verdicts: an
    error)."""
    out = []
    for where, (verdicts, message) in items.items():
        measured = Outcome(Measurement({}, {}), verdicts, {}) if verdicts else None
        outcome = "error" if not verdicts else "passed" if all(v.passed for v in verdicts) else "failed"
        out.append(result_entry(CHECK, where, nodes, nodeid=f"s.yaml::fabric[{where}]", name=f"fabric[{where}]",
                                outcome=outcome, message=message, duration=1.0, measured=measured, figure=""))
    return out


def test_a_cluster_item_failed_on_a_link_is_said_at_the_end() -> None:
    """A slow link between a and b (same leaf): every node passes, the cluster item fails naming the link,
    nobody is excluded. `unblamed` listed cluster and pair scopes only, so the run's end line said nothing
    of the localize check's failure."""
    nodes = ["a", "b", "c", "d"]
    topology = Topology.build({n: "L1" for n in nodes}, {"L1": "spine"})
    slow = {0, 1}  # a's and b's ranks: only a group holding both (their link) reads slow

    def run(groups: list[list[int]]) -> dict[int, dict[str, Any]]:
        return answers(groups, lambda g: 0.01 if slow <= set(g) and len(g) == 2 or g == [0, 1, 2, 3] else 10.0)

    items, _ = localize(nodes, {n: [i] for i, n in enumerate(nodes)}, 1.0, run, "fabric", topology=topology)
    results = records(items, nodes)
    cluster = next(r for r in results if r["node"] is None)
    assert cluster["outcome"] == "failed" and [v["subject"] for v in cluster["verdicts"]] == ["link a <-> b"]
    assert excluded(results) == {}
    assert unblamed(results) == ["localize check fabric"]


def test_a_link_failure_is_said_at_the_end_though_a_node_was_excluded() -> None:
    """A slow node c and a slow link a-b: c is excluded for its own item, and the link is still said (a node
    on the list does not explain a link localize named)."""
    nodes = ["a", "b", "c", "d", "e", "f"]
    topology = Topology.build({n: "L1" for n in nodes}, {"L1": "spine"})

    def run(groups: list[list[int]]) -> dict[int, dict[str, Any]]:
        return answers(groups, lambda g: 0.01 if {0, 1} <= set(g) or 2 in g else 10.0)

    items, _ = localize(nodes, {n: [i] for i, n in enumerate(nodes)}, 1.0, run, "fabric", topology=topology)
    results = records(items, nodes)
    assert list(excluded(results)) == ["c"]
    assert unblamed(results) == ["localize check fabric"]


def test_a_failed_link_does_not_count_every_node_toward_the_drain_breaker() -> None:
    """A slow link a-b (the localize check fails naming the link, no node) and two nodes each failing a check
    of its own: no check failed on more than one node, so --drain may act. The cluster item counted all six
    nodes as failing it, so d and e read as two nodes failing `fabric` and the breaker tripped."""
    from clustercheck.judging.limits import Limit
    from clustercheck.judging.verdicts import of_limit
    from clustercheck.record.exclude import breaker

    nodes = ["a", "b", "c", "d", "e", "f"]
    topology = Topology.build({n: "L1" for n in nodes}, {"L1": "spine"})

    def run(groups: list[list[int]]) -> dict[int, dict[str, Any]]:
        return answers(groups, lambda g: 0.01 if {0, 1} <= set(g) else 10.0)

    items, _ = localize(nodes, {n: [i] for i, n in enumerate(nodes)}, 1.0, run, "fabric", topology=topology)
    results = records(items, nodes)
    for node, check in (("d", "gemm"), ("e", "memory")):
        spec = CheckSpec(check, "gemm", "node", {}, (), 60, "", "s.yaml", 2)
        floor = Limit(check, "tflops", ">=", 100.0, "TFLOP/s", ">= 100", "test", "test")
        failed = Outcome(Measurement({"tflops": 1.0}, {"tflops": "TFLOP/s"}), [of_limit("tflops", 1.0, floor)], {})
        results.append(result_entry(spec, node, nodes, nodeid=f"s.yaml::{check}[{node}]", name=f"{check}[{node}]",
                                    outcome="failed", message="", duration=1.0, measured=failed, figure=""))
    assert sorted(excluded(results)) == ["d", "e"]
    assert breaker(results, excluded(results), len(nodes), 0.2) is None


@pytest.mark.parametrize("reading", [float("inf"), float("nan"), -5.0])
def test_a_bandwidth_that_is_no_number_clears_nobody(reading: float) -> None:
    """A group that reports an infinite busbw passed (`not isnan(x) and x >= threshold`) and cleared its
    nodes; a negative one was judged as a reading. None passes and none clears a node."""
    planner = Planner(["a", "b"], threshold=1.0)
    (group,) = planner.next_round()
    planner.record({group.id: reading})
    v = planner.verdicts()
    assert v.cleared == frozenset()
    assert not planner.passes(reading)
    with pytest.raises(UserError, match="threshold must be a finite bandwidth >= 0, got inf"):
        Planner(["a", "b"], threshold=float("inf"))


def test_all_reduce_busbw_of_a_time_too_small_to_be_one_is_no_result() -> None:
    """5e-324 s for 1 MiB: busbw is infinite, and all_reduce_busbw returned it (it filtered NaN only)."""
    row = {"size": SIZE, "bytes": SIZE, "seconds": 5e-324, "wrong": 0}
    assert all_reduce_busbw([{"rows": [row]}, {"rows": [row]}]) is None


def test_an_infinite_busbw_through_the_check_passes_no_item() -> None:
    """Every group of a localize check reads an infinite busbw: no node item and no cluster item passes,
    and no round's row reads passed."""
    nodes = ["a", "b", "c", "d"]
    row = {"size": SIZE, "bytes": SIZE, "seconds": 5e-324, "wrong": 0}
    items, rows = localize(nodes, {n: [i] for i, n in enumerate(nodes)}, 1.0,
                           lambda groups: {r: {"rows": [row]} for g in groups for r in g}, "fabric")
    assert not any(v.passed for verdicts, _ in items.values() for v in verdicts)
    assert rows and "passed" not in {r["outcome"] for r in rows} and {r["busbw"] for r in rows} == {None}


def test_a_floor_in_gib_s_is_judged_in_gib_s_and_said_in_it() -> None:
    """Every group reads 105 GB/s (97.8 GiB/s) but c's, which read 98 GB/s, against a floor of 100 GiB/s
    (107.4 GB/s): every group is under it. The session handed the planner the limit's raw value, which it
    compared with GB/s, and said "GB/s": a 100 GiB/s floor acted as 100 GB/s and passed every node."""
    nodes = ["a", "b", "c", "d"]
    items, _ = localize(nodes, {n: [i] for i, n in enumerate(nodes)}, 100.0,
                        lambda groups: answers(groups, lambda g: 98.0 if 2 in g else 105.0), "fabric", unit="GiB/s")
    assert not any(v.passed for verdicts, _ in items.values() for v in verdicts)
    (verdict,) = items[None][0]
    assert verdict.measured == "every group failed" and verdict.rule.origin == "every group >= 100 GiB/s"
    passing, _ = localize(nodes, {n: [i] for i, n in enumerate(nodes)}, 100.0,
                          lambda groups: answers(groups, lambda g: 98.0 if 2 in g else 110.0), "fabric", unit="GiB/s")
    (bad,) = passing["c"][0]
    assert not bad.passed and "91.3 GiB/s" in bad.detail and "GB/s" not in bad.detail  # 98 GB/s in GiB/s
    assert all(passing[n][0][0].passed for n in ("a", "b", "d"))


def _localized_on_two_hosts(tmp_path: Path, limit: str) -> tuple[dict[str, dict[str, Any]], str]:
    """`clustercheck run` on hosts h1 and h2, check `fabric` localized against busbw `limit` MB/s: each
    item's result by name, and the run's output."""
    (tmp_path / "th").mkdir()
    floor = f"  fabric:\n    busbw: {{limit: '{limit}', unit: MB/s, source: any working loopback}}\n"
    (tmp_path / "th" / "cpu.yaml").write_text(LIMITS + floor)
    (tmp_path / "s.yaml").write_text(all_reduce_suite("fabric:localize"))
    ctl = run_hosts(tmp_path, hosts="h[1-2]")
    out, _ = ctl.communicate(timeout=300)
    return {r["name"]: r for r in run_results(tmp_path)["results"]}, out


@pytest.mark.pool
def test_a_floor_in_mb_s_through_the_run_is_judged_in_mb_s(tmp_path: Path) -> None:
    """`clustercheck run` on two hosts, fabric localized against `>= 1 MB/s`: loopback all_reduce reads far
    above 1 MB/s, so every item passes and says MB/s. The session handed the planner the raw 1, which it
    compared with GB/s (1000 times the floor): loopback is far below 1 GB/s, and every item failed."""
    outcome, out = _localized_on_two_hosts(tmp_path, ">= 1")
    for name in ("fabric[h1]", "fabric[h2]", "fabric"):
        assert outcome[name]["outcome"] == "passed", (name, outcome[name], out[-3000:])
    assert "every group >= 1 MB/s" in json.dumps(outcome["fabric[h1]"]["verdicts"])


@pytest.mark.pool
def test_a_strict_floor_is_refused_by_name_not_judged_as_at_least(tmp_path: Path) -> None:
    """The planner clears a group at or above its floor: `> 1 MB/s` would have passed a group at exactly
    1 MB/s. Each item is an error naming the rule and its operator."""
    outcome, out = _localized_on_two_hosts(tmp_path, "> 1")
    for name in ("fabric[h1]", "fabric[h2]", "fabric"):
        assert outcome[name]["outcome"] == "error", (name, outcome[name], out[-3000:])
        assert "needs a busbw floor (>=, a bandwidth)" in outcome[name]["message"]
        assert "checks.fabric.busbw: > 1 MB/s)" in outcome[name]["message"]


@pytest.mark.pool
def test_a_rank_that_raises_in_every_group_blames_nobody_and_clears_nobody(tmp_path: Path) -> None:
    """`clustercheck run` on four hosts, fabric localized; the last rank (h4's) raises in every group it is
    in (a test-only fault). Its groups give no result: h4 is an error saying so, never failed hardware and
    never on the exclusion list; the others, cleared by groups that passed, pass; the cluster item is an
    error, not a pass. Before the fix a group with no result counted as failed: h4 was named bad and
    excluded (and drained with --drain)."""
    (tmp_path / "th").mkdir()
    floor = "  fabric:\n    busbw: {limit: '>= 0.000001', unit: GB/s, source: any working loopback}\n"
    (tmp_path / "th" / "cpu.yaml").write_text(LIMITS + floor)
    (tmp_path / "s.yaml").write_text(all_reduce_suite("fabric:localize"))
    ctl = run_hosts(tmp_path, "--cc-inject-fault=fabric:raise", hosts="h[1-4]")
    out, _ = ctl.communicate(timeout=300)
    outcome = {r["name"]: r for r in run_results(tmp_path)["results"]}
    for name in ("fabric[h1]", "fabric[h2]", "fabric[h3]"):
        assert outcome[name]["outcome"] == "passed", (name, outcome[name], out[-3000:])
    h4, cluster = outcome["fabric[h4]"], outcome["fabric"]
    assert h4["outcome"] == "error" and "not judged: its groups gave no result (" in h4["message"], h4
    assert "injected fault" in h4["message"] and not h4.get("unreachable"), h4
    assert cluster["outcome"] == "error" and "gave no result" in cluster["message"], cluster
    assert (tmp_path / "out" / "latest" / "exclude.txt").read_text().split() == []
    assert "Traceback" not in out


def test_a_group_whose_rank_said_nothing_blames_and_clears_nobody() -> None:
    """d's rank (3) never answers: each group with d gives no result. d is an error naming why, never named
    bad (before the fix a group with no result counted as failed, and d was named and excluded); a, b, c
    pass by the groups they passed; the cluster item is an error, not a pass; the rows say "no result"."""
    nodes = ["a", "b", "c", "d"]

    def run(groups: list[list[int]]) -> dict[int, Any]:
        got: dict[int, Any] = answers([g for g in groups if 3 not in g], lambda g: 10.0)
        got.update({r: RuntimeError("rank 3 (d) raised RuntimeError: boom\ntraceback") for g in groups if 3 in g
                    for r in g})
        return got

    items, rows = localize(nodes, {n: [i] for i, n in enumerate(nodes)}, 1.0, run, "fabric")
    assert items["d"][0] == [] and items["d"][1].startswith(
        "not judged: its groups gave no result (rank 3 (d) raised RuntimeError: boom): r1-g0, r2-g1"), items["d"]
    assert all(items[n][0][0].passed for n in "abc")
    assert items[None][0] == [] and items[None][1].startswith("not judged: "), items[None]
    assert "gave no result" in items[None][1]
    assert {r["group"]: r["outcome"] for r in rows}["r1-g0"] == "no result"
    results = records(items, nodes)
    assert excluded(results) == {}
