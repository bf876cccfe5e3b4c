"""Whom a failure puts on the exclusion list (record/exclude.py): a failed verdict that names a node (a
counter window's `<host> <device>`, an expectation about a host) blames that node whatever the item's
scope; a cluster or pair failure that names no node blames no node (the terminal says which check), and
an item that failed only by a node's counter window did not measure the nodes whose windows passed.
Real runs where one Xid suffices (/dev/kmsg, as tests/test_counter_windows.py), and records of real runs
through the hosts launcher where the Xid was logged on one node only (tests/fixtures/records: an
audit's run with each node's kernel log read from its own file)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from helpers import small_check, write_suite  # noqa: E402
from test_counter_windows import KMSG, XID, _run_logging  # noqa: E402

from clustercheck.record.exclude import excluded, unmeasured, untested  # noqa: E402

RECORDS = Path(__file__).resolve().parent / "fixtures" / "records"
LOOPBACK = "    busbw: {limit: \">= 0.000001\", unit: GB/s, source: \"any working loopback\"}\n"


def _results(name: str) -> list[dict]:
    lines = [json.loads(x) for x in (RECORDS / name).read_text().splitlines() if x.strip()]
    return [x for x in lines if x["type"] == "result"]


@pytest.mark.skipif(os.geteuid() != 0 or not os.access(KMSG, os.W_OK), reason="writing /dev/kmsg needs root")
def test_an_xid_in_a_cluster_items_window_excludes_the_node_it_names(project: pytest.Pytester):
    """A cluster-scope item failed by an Xid whose verdict names the node (`<host> 0000:3b:00`) printed the
    FAIL and then `exclude: none (no node failed a check)`: cluster scope excluded no node, whatever the
    evidence said."""
    write_suite(project, "checks:\n" + small_check("ok") + small_check("c").replace("measure: all_reduce",
                                                                                  "measure: all_reduce\n    scope: cluster"))
    with (project.path / "thresholds" / "cpu.yaml").open("a") as th:
        th.write("  c:\n" + LOOPBACK)
    results, stdout = _run_logging(project, ["c:delay"], {1: XID})
    assert {k: r["outcome"] for k, r in results.items()} == {"ok": "passed", "c": "failed"}, stdout
    (xid,) = [v for v in results["c"]["verdicts"] if v["metric"] == "kernel.xid.79"]
    host = xid["subject"].split()[0]
    assert (project.path / "out" / "latest" / "exclude.txt").read_text() == f"{host}\n"
    assert f"exclude: {host}   (sbatch --exclude={host})" in stdout
    assert f"  {host}: c {host} 0000:3b:00 kernel.xid.79 1 > 0 count" in stdout


def test_a_cluster_failure_naming_no_node_excludes_none_and_says_which_check(project: pytest.Pytester):
    """Two nodes (hosts launcher), a cluster busbw floor no loopback reaches: nobody is excluded, and the
    terminal says the cluster check failed naming no node, not `no node failed a check`."""
    write_suite(project, "checks:\n" + small_check("too-fast").replace("measure: all_reduce",
                                                                      "measure: all_reduce\n    scope: cluster"))
    res = project.runpytest("suites/s.yaml", "--thresholds", "thresholds", "--cc-out", "out", "--launcher", "hosts",
                            "--hosts", "h[1-2]", "--host-command", "env CC_HOST={host} {python}")
    assert res.ret == 1
    assert (project.path / "out" / "latest" / "exclude.txt").read_text() == ""
    res.stdout.fnmatch_lines(["exclude: none (cluster check too-fast failed; it names no node)"])
    assert "no node failed a check" not in res.stdout.str()


def test_on_one_node_a_failed_cluster_item_excludes_that_node(project: pytest.Pytester):
    """On a one-node run the node is the cluster: what failed the cluster item can only be that node's."""
    write_suite(project, "checks:\n" + small_check("too-fast").replace("measure: all_reduce",
                                                                      "measure: all_reduce\n    scope: cluster"))
    res = project.runpytest("suites/s.yaml", "--thresholds", "thresholds", "--cc-out", "out")
    assert res.ret == 1
    (ex,) = [json.loads(x) for x in (project.path / "out" / "latest" / "run.jsonl").read_text().splitlines()
             if '"type": "exclude"' in x]
    ((node, why),) = ex["reasons"].items()
    assert why.startswith("too-fast busbw ") and why.endswith("(the only node the cluster item measured)")
    assert (project.path / "out" / "latest" / "exclude.txt").read_text() == f"{node}\n"


def test_a_pair_window_naming_one_node_excludes_it_and_not_its_healthy_peer():
    """Record of `sp.yaml` (one pair check) on h[1-2] with an Xid logged on h2 only while the pair ran: the
    pair rule excluded h1 as well (`failed pairs with h2`), though the verdict names h2."""
    from clustercheck.record.exclude import unblamed

    results = _results("pair-xid-on-h2.jsonl")
    (pair,) = results
    assert pair["outcome"] == "failed" and [v["subject"] for v in pair["verdicts"] if not v["passed"]] == ["h2 0000:3b:00"]
    assert excluded(results) == {"h2": "ok h2 0000:3b:00 kernel.xid.79 1 > 0 count"}
    assert untested(["h1", "h2"], results) == [] and unblamed(results) == []  # the pair measured both: h1 passed


def test_a_pair_failure_naming_no_node_still_falls_back_to_the_partner_rule():
    """The same pair failing its own busbw (no subject) still implicates both of its only nodes."""
    (pair,) = _results("pair-xid-on-h2.jsonl")
    busbw = {**pair["verdicts"][0], "metric": "busbw", "subject": None, "passed": False}
    assert sorted(excluded([{**pair, "verdicts": [busbw]}])) == ["h1", "h2"]


def test_an_xid_on_one_node_while_another_is_lost_fails_the_item_and_excludes_both():
    """Record of `sc.yaml` on h[1-3] (cluster all_reduce) with h3's agent SIGKILLed and an Xid on h2 in the
    same check: the Xid was thrown away with the item's Unreachable error (an error, h3 alone excluded). The
    item now fails by h2's window, h3 stays `unreachable`, and h1, whose window passed, was not measured."""
    results = _results("lost-h3-xid-on-h2.jsonl")
    ok = results[0]
    assert ok["outcome"] == "failed" and ok["unreachable"] == ["h3"]
    assert [(v["metric"], v["subject"]) for v in ok["verdicts"]] == [("measurement", None), ("kernel.xid.79", "h2 0000:3b:00")]
    assert list(excluded(results)) == ["h2", "h3"]
    assert excluded(results)["h3"] == "ok: stopped answering (no heartbeat: unreachable or dead)"


def test_an_item_failed_only_by_a_window_measured_only_the_node_whose_window_failed():
    """An errored item failed by one node's window (windows.despite) read as measuring all its nodes: the
    record said `untested: []` though its own measurement was never judged."""
    results = _results("lost-h3-xid-on-h2.jsonl")
    assert untested(["h1", "h2", "h3"], results) == ["h1", "h3"]
    node_item = {**results[0], "scope": "pair", "node": "h1,h2", "nodes": ["h1", "h2"], "name": "ok[h1,h2]"}
    assert untested(["h1", "h2"], [node_item]) == ["h1"] and unmeasured([node_item]) == {"h1": ["ok[h1,h2]"]}


def test_despite_keeps_an_answering_nodes_failed_window_beside_an_unreachable_one():
    """windows.despite returned an Unreachable as it was, so h2's Xid in the same check never became a
    verdict; now the item fails with it, naming h3 unreachable, and h3's own window is not judged."""
    from clustercheck.counters.allowances import DEFAULTS, Judgement, judge
    from clustercheck.counters.delta import Delta, Increase
    from clustercheck.errors import Unreachable
    from clustercheck.judging.measurement import Outcome
    from clustercheck.judging.windows import despite

    xid = judge(Delta("h2", 5.0, (Increase("kernel.xid.79", "0000:3b:00", 0, 1, lines=(XID,)),), ()), DEFAULTS)
    lost = judge(Delta("h3", 5.0, (Increase("kernel.xid.79", "0000:5e:00", 0, 1, lines=(XID,)),), ()), DEFAULTS)
    windows = {"h1": Judgement("h1", 5.0, (), ()), "h2": xid, "h3": lost}
    got = despite("ok", Unreachable("rank 2 (h3) was lost", ("h3",)), windows, ["h1", "h2", "h3"])
    assert isinstance(got, Outcome) and got.unreachable == ("h3",)
    assert [(v.metric, v.subject, v.passed) for v in got.verdicts] == [
        ("measurement", None, False), ("kernel.xid.79", "h2 0000:3b:00", False)]
    quiet = {**windows, "h2": Judgement("h2", 5.0, (), ())}
    assert isinstance(despite("ok", Unreachable("lost", ("h3",)), quiet, ["h1", "h2", "h3"]), Unreachable)


def _pair(a: str, b: str, passed: bool) -> dict:
    """A pair item as the record has it, failed (or passed) by its own busbw, which names neither node."""
    busbw = {"metric": "busbw", "subject": None, "passed": passed, "measured": 1.0 if passed else 0.01,
             "op": ">=", "limit": 0.5, "unit": "GB/s"}
    return {"type": "result", "name": f"p[{a},{b}]", "check": "p", "scope": "pair", "node": f"{a},{b}",
            "nodes": [a, b], "outcome": "passed" if passed else "failed", "verdicts": [busbw]}


@pytest.mark.parametrize("dry_run", [True, False])
def test_random_pairs_list_a_lone_failed_pair_but_drain_neither_node(tmp_path: Path, dry_run: bool) -> None:
    """--pair-strategy random measures each node in one pair. h1,h2 failed: either may be the cause. Both were
    listed and --drain drained both, taking a healthy node out with every bad one. Both stay listed (a gate
    trusts neither), each said to be unproven, and --drain (or its dry run) leaves them alone, saying why;
    h5, proven by two partners in a later rounds check, is drained."""
    from clustercheck.record import exclude
    from clustercheck.record.io import RunWriter
    from clustercheck.run import exclusion
    from clustercheck.run.options import Options

    results = [_pair("h1", "h2", False), _pair("h3", "h4", True),
               _pair("h5", "h6", False), _pair("h5", "h7", False), _pair("h6", "h7", True)]
    reasons = excluded(results)
    assert sorted(reasons) == ["h1", "h2", "h5"]
    assert reasons["h1"].endswith("(failed its only pair, with h2: either node may be the cause)"), reasons
    assert reasons["h5"].endswith("(failed pairs with h6, h7)"), reasons
    assert exclude.unproven(results) == {"h1": "h2", "h2": "h1"}
    tree = tmp_path / "bin"
    tree.mkdir()
    log = tmp_path / "scontrol.log"
    (tree / "scontrol").write_text(f'#!/bin/sh\necho "$@" >> {log}\n')
    (tree / "scontrol").chmod(0o755)
    opts = Options(platform=None, thresholds=None, ranks=None, backend="gloo", out=tmp_path,  # type: ignore[arg-type]
                   drain=not dry_run, drain_dry_run=dry_run, drain_max=1.0)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PATH", f"{tree}:{os.environ['PATH']}")
        out = exclusion.write(tmp_path, RunWriter(tmp_path / "run.jsonl"), results, [f"h{i}" for i in range(1, 8)],
                              [], opts)
    entries = {e["command"][2]: e for e in out["drain"]}
    assert set(entries) == {"NodeName=h1", "NodeName=h2", "NodeName=h5"}
    for node, partner in (("h1", "h2"), ("h2", "h1")):
        assert entries[f"NodeName={node}"]["rc"] is None
        assert entries[f"NodeName={node}"]["output"] == \
            f"left alone: its only pair failed, with {partner}, and either node may be the cause"
    assert entries["NodeName=h5"]["rc"] == (None if dry_run else 0)
    updates = [x for x in log.read_text().splitlines() if x.startswith("update")] if log.exists() else []
    assert updates == ([] if dry_run else [updates[0]]) and all("NodeName=h5" in x for x in updates)
