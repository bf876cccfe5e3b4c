"""Burn-in summaries judged by their worst case: a skipped repetition is never a pass, a cluster check that
failed naming no node clears no node, the series metric is a measured number, and a repeated baseline is
its worst repetition (unit level: no run, no pytester)."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from clustercheck.record.burnin import by_node, folded, lines, summarize
from clustercheck.report.junit import render_junit


def _result(rep: int, outcome: str, busbw: float | None, node: str | None = "n1", **extra) -> dict:
    verdicts = [] if busbw is None else [{"kind": "limit", "metric": "busbw", "measured": busbw, "unit": "GB/s",
                                          "subject": None, "op": ">=", "limit": 1.0,
                                          "origin": "test", "margin": 1.0, "source": "test", "passed": True}]
    message = {"passed": "", "skipped": "no NVIDIA driver"}.get(outcome, "busbw misses the limit")
    return {"type": "result", "name": f"ok[{node}]", "check": "ok", "suite_file": "suites/s.yaml", "line": 1, "node": node,
            "outcome": outcome, "repeat": rep, "message": message, "verdicts": verdicts, **extra}


def _junit(results: list[dict]) -> ET.Element:
    return ET.fromstring(render_junit({"started": "2026-01-01T00:00:00Z", "facts": {"host": "n1"}}, results))


def test_a_skip_in_some_repetitions_is_not_judged_never_a_pass():
    results = [_result(1, "passed", 5.0), _result(2, "skipped", None), _result(3, "skipped", None)]
    (s,) = summarize(results)
    assert s.outcome == "error" and s.pass_ratio == 1 / 3  # the skipped repetitions count in the denominator
    text = "\n".join(lines([s]))
    assert "pass ratio 1/3" in text and "passes" not in text and "PASSED" not in text
    assert "node n1 burn-in not judged (2 repetition(s) skipped)" in text
    (one,) = folded(results)
    assert one["outcome"] == "error"
    assert one["message"].startswith("not judged: skipped in repetition(s) 2, 3 of 3")
    assert one["message"].endswith("no NVIDIA driver") and "passed all" not in one["message"]
    (case,) = _junit(results).iter("testcase")
    assert [ch.tag for ch in case if ch.tag in ("failure", "error", "skipped")] == ["error"]


def test_an_item_skipped_in_every_repetition_is_skipped_with_its_reason():
    results = [_result(1, "skipped", None), _result(2, "skipped", None)]
    (s,) = summarize(results)
    assert s.outcome == "skipped" and s.pass_ratio == 0.0
    (one,) = folded(results)
    assert one["outcome"] == "skipped"
    assert one["message"] == "skipped in all 2 repetitions: no NVIDIA driver"
    (case,) = _junit(results).iter("testcase")
    (skip,) = [ch for ch in case if ch.tag == "skipped"]
    assert "passed" not in (skip.get("message") or "") and "no NVIDIA driver" in skip.get("message")
    assert "passes burn-in" not in "\n".join(lines([s]))


def test_every_repetition_passed_still_passes():
    results = [_result(k, "passed", 5.0) for k in (1, 2)]
    (one,) = folded(results)
    assert (one["outcome"], one["message"]) == ("passed", "passed all 2 repetitions")
    assert lines(summarize(results))[-1].startswith("  node n1 passes burn-in: 2 of 2")
    assert by_node(summarize(results))["n1"]["pass_ratio"] == 1.0


def _cluster(rep: int, outcome: str, nodes: list[str]) -> dict:
    return {**_result(rep, outcome, 0.0 if outcome == "failed" else 5.0, node=None), "name": "across",
            "check": "across", "nodes": nodes, "scope": "cluster"}


def test_a_cluster_check_that_failed_naming_no_node_clears_no_node():
    results = ([_result(k, "passed", 5.0, node=n) for k in (1, 2) for n in ("h1", "h2")]
               + [_cluster(k, "failed" if k == 2 else "passed", ["h1", "h2"]) for k in (1, 2)])
    text = lines(summarize(results))
    for node in ("h1", "h2"):
        (line,) = [x for x in text if x.startswith(f"  node {node} ")]
        assert "passes" not in line
        assert "not cleared: cluster check s::across failed in repetition(s) 2, naming no node" in line
        assert by_node(summarize(results))[node]["not_cleared"] == ["s::across"]
    passing = [r for r in results if r["outcome"] == "passed"] + [_cluster(2, "passed", ["h1", "h2"])]
    assert all("passes burn-in" in x for x in lines(summarize(passing)) if x.startswith("  node "))


def test_the_series_is_the_measured_metric_not_a_not_judged_or_counter_verdict_first():
    despite = {**_result(1, "failed", None), "verdicts": [
        {"kind": "limit", "metric": "measurement", "measured": "not judged", "unit": "", "subject": None},
        {"kind": "limit", "metric": "kernel.xid.79", "measured": 1, "unit": "count", "subject": "n1 0000:3b:00"}]}
    results = [despite] + [_result(k, "passed", v) for k, v in ((2, 10.0), (3, 9.0), (4, 6.0), (5, 3.0))]
    (s,) = summarize(results)
    assert (s.metric, s.unit, s.values, s.measured_in) == ("busbw", "GB/s", (10.0, 9.0, 6.0, 3.0), (2, 3, 4, 5))
    assert s.spread == (3.0, 7.5, 10.0) and s.trend == -0.7
    assert "busbw min 3 median 7.5 max 10 GB/s, trend -70.0%" in lines([s])[1]


def test_an_interrupted_burn_in_names_the_repetition_each_item_was_not_run_in(tmp_path):
    from clustercheck.record.io import Record
    from clustercheck.report import _burn_in
    from clustercheck.record.schema import item_id

    plan = [{"name": f"{c}[h1]", "nodeid": "", "check": c, "measure": "probe", "scope": "node", "node": "h1",
             "nodes": ["h1"], "suite_file": "suites/s.yaml", "line": 1} for c in ("first", "second")]
    results = [{**p, **_result(k, "passed", 5.0, node="h1"), "name": p["name"], "check": p["check"]}
               for k in (1, 2) for p in plan][:3]  # SIGTERM in repetition 2 of 3, before second[h1]
    rec = Record(tmp_path / "run.jsonl", {"repeat": {"count": 3}}, results, None,
                 {"interrupted": True, "signal": "SIGTERM", "repetitions": 1}, plan)
    assert [item_id(p) for p in rec.not_run()] == ["s::second[h1]#2"]
    assert rec.not_run()[0]["repeat"] == 2
    cases = ET.fromstring(render_junit({"started": ""}, results, rec.not_run(), "interrupted")).iter("testcase")
    assert [c.get("name") for c in cases if c.get("name").startswith("second")] == ["second[h1]", "second[h1]#2"]
    text = lines(summarize(results), incomplete=True)
    assert text[0] == "burn-in: INCOMPLETE: 1 whole repetition(s) ran (2 started), fewer than asked"
    (second,) = [x for x in text if "s::second[h1]" in x]
    assert "not run in repetition(s) 2 (the run did not finish)" in second
    assert "passes" not in "\n".join(text)
    node = by_node(summarize(results))["h1"]
    assert node["incomplete"] is True and node["not_run"] == 1
    (cut,) = [r for r in folded(results) if r["check"] == "second"]
    assert cut["message"].startswith("passed all 1 repetitions it ran; not run in repetition(s) 2")
    assert by_node(summarize(results[:2]))["h1"]["incomplete"] is False
    # stopped between repetitions, no item was cut off: the run did not finish all the same, and results.json
    # said `incomplete: false` of every node
    assert _burn_in(results[:2], incomplete=True)["burn_in"]["nodes"]["h1"]["incomplete"] is True
