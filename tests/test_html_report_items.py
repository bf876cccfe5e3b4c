"""report.html from hand-made records: what it says of a repetition that measured nothing, of notes that say
an item was not judged, of planned items an incomplete run never ran, of a failed verdict without colour,
and of the nodes a run excluded (and drains that failed)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from helpers import render_all

HEADER: dict[str, Any] = {
    "type": "run", "schema": 1, "started": "2026-01-01T00:00:00+00:00", "argv": ["clustercheck", "run"],
    "platform": "cpu", "platform_detected": True, "facts": {"host": "n1", "gpu_count": 0},
    "thresholds": {"file": "thresholds/cpu.yaml", "sha256": "ab"}, "suites": [{"file": "suites/s.yaml", "sha256": "cd"}],
    "launcher": "local", "backend": "gloo", "ranks": 2, "nodes": ["n1"]}


def _verdict(measured: float, passed: bool) -> dict[str, Any]:
    return {"metric": "busbw", "measured": measured, "unit": "GB/s", "op": ">=", "limit": 1.0, "passed": passed,
            "margin": measured - 1.0, "expression": ">= 1.0", "origin": "thresholds/cpu.yaml:9", "source": "",
            "spec_sources": []}


def _result(name: str = "ok", node: str = "n1", outcome: str = "passed", **extra: Any) -> dict[str, Any]:
    return {"type": "result", "name": f"{name}[{node}]", "check": name, "node": node, "nodes": [node],
            "measure": "all_reduce", "scope": "node", "suite_file": "suites/s.yaml", "line": 3, "outcome": outcome,
            "duration": 0.1, "message": "" if outcome == "passed" else "busbw misses the limit", **extra}


def _html(tmp_path: Path, lines: list[dict[str, Any]]) -> str:
    record = tmp_path / "run.jsonl"
    record.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return render_all(record, tmp_path)["html"].read_text()


def test_a_repetition_that_measured_nothing_is_marked_and_counted(tmp_path: Path) -> None:
    reps = [_result(repeat=k, verdicts=[_verdict(1.031, True)]) for k in (1, 2, 4)]
    reps.insert(2, _result(outcome="failed", repeat=3, verdicts=[_verdict(float("nan"), False)]))
    html = _html(tmp_path, [{**HEADER, "repeat": {"count": 4}}, *reps, {"type": "end", "finished": "2026-01-01T00:01:00+00:00"}])
    svg = re.search(r'<svg[^>]*class="burn-in".*?</svg>', html, re.S)
    assert svg is not None
    assert "repetition 3: NaN (failed)" in svg.group(0)  # marked on the axis, not left out
    assert svg.group(0).count("<circle") == 3
    row = re.search(r"<tr><td>[^<]*ok\[n1\]</td>.*?</tr>", html, re.S)
    assert row is not None and "1 repetition measured nothing" in row.group(0), row


def test_a_note_that_says_not_judged_is_an_error_named_in_the_node_table(tmp_path: Path) -> None:
    unjudged = "n1: iter_cv is not judged: no per-iteration times were kept (per_iteration: false, or a CUDA graph)"
    r = _result(outcome="failed", verdicts=[_verdict(0.5, False)], notes=[unjudged, "n1 has no NIC: nothing to say"])
    html = _html(tmp_path, [HEADER, r, {"type": "end", "finished": "2026-01-01T00:01:00+00:00"}])
    assert f'<li class="error">{unjudged}</li>' in html
    assert '<li class="small">n1 has no NIC: nothing to say</li>' in html
    node_table = html[html.index('<h2 id="nodes">'):html.index('<h2 id="checks">')]
    assert "(+1 not judged, see item)" in node_table


def _plan(*names: str, node: str = "n1") -> dict[str, Any]:
    return {"type": "plan", "items": [{"name": f"{n}[{node}]", "nodeid": f"s::{n}[{node}]", "check": n,
                                       "measure": "all_reduce", "scope": "node", "node": node, "nodes": [node],
                                       "suite_file": "suites/s.yaml", "line": 3} for n in names]}


def test_an_incomplete_run_counts_its_planned_items_not_run_per_node(tmp_path: Path) -> None:
    """A truncated record: one of three planned items ran and passed, the record ends there."""
    html = _html(tmp_path, [HEADER, _plan("ok", "b", "c"), _result("ok")])
    assert "INCOMPLETE" in html
    summary = html[html.index('<p class="summary">'):html.index("</p>", html.index('<p class="summary">'))]
    assert '<span class="error">2 not run</span>' in summary
    table = html[html.index("<th>node</th>"):html.index("</table>", html.index("<th>node</th>"))]
    assert "<th>not run</th>" in table and '<td class="num error">2</td>' in table
    node = re.search(r'<details id="node-1" class="node"( open)?><summary>(.*?)</summary>', html)
    assert node is not None and node.group(1) == " open" and "2 not run" in node.group(2), node


def test_a_failed_verdict_in_the_node_table_says_fail_in_words(tmp_path: Path) -> None:
    html = _html(tmp_path, [HEADER, _result("slow", outcome="failed", verdicts=[_verdict(0.5, False)]),
                            _result("fast", verdicts=[_verdict(2.0, True)]),
                            {"type": "end", "finished": "2026-01-01T00:01:00+00:00"}])
    nodes = html[html.index('<h2 id="nodes">'):html.index('<h2 id="checks">')]
    spans = re.findall(r'<span class="(passed|failed)">([^<]*)</span>', nodes[nodes.index("<table>"):])
    assert [(c, t.split(" ")[0]) for c, t in spans] == [("failed", "FAIL"), ("passed", "busbw")], spans


def test_a_failed_drain_is_in_results_json_and_named_in_report_html(tmp_path: Path) -> None:
    """scontrol refused the drain: the node failed and is still schedulable, and every report says so."""
    cmd = ["scontrol", "update", "NodeName=n1", "State=DRAIN", "Reason=clustercheck: slow failed"]
    ex = {"type": "exclude", "hostlist": "n1", "reasons": {"n1": "slow failed"}, "untested": [],
          "drain": [{"command": cmd, "rc": 1, "output": "Invalid user id\nmore"}]}
    html = _html(tmp_path, [HEADER, _result("slow", outcome="failed", verdicts=[_verdict(0.5, False)]), ex,
                            {"type": "end", "finished": "2026-01-01T00:01:00+00:00"}])
    summary = json.loads((tmp_path / "results.json").read_text())
    assert summary["exclude"]["drain"][0]["rc"] == 1
    assert summary["exclude"]["hostlist"] == "n1" and summary["exclude"]["reasons"] == {"n1": "slow failed"}
    top = html[:html.index('<h2 id="summary">')]  # under the banner
    assert '<p class="failed">Excluded: n1 (sbatch --exclude=n1)</p>' in top and "<li>n1: slow failed</li>" in top
    assert ('<p class="error">drain failed (exit 1: Invalid user id): scontrol update NodeName=n1 State=DRAIN '
            "&#39;Reason=clustercheck: slow failed&#39;</p>") in top
