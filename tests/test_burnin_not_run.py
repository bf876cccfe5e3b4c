"""A repeated run's planned items without a result, read back from a record the run's own writer wrote and
rendered by `clustercheck report`: a result missing in any repetition from the first to the last that ran
(not only the last) is not run, and the run is INCOMPLETE, never PASS."""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from clustercheck.record.io import RunWriter

NODE = "h1"
PLAN = [{"name": f"{c}[{NODE}]", "nodeid": f"suites/s.yaml::{c}[{NODE}]", "check": c, "measure": "all_reduce",
         "scope": "node", "node": NODE, "nodes": [NODE], "suite_file": "suites/s.yaml", "line": 3}
        for c in ("a", "b")]


def _header(repeat: dict[str, Any], report_format: int | None = None) -> dict[str, Any]:
    return {"type": "run", "schema": 1, "started": "2026-01-01T00:00:00+00:00",
            "argv": ["clustercheck", "run", "--repeat", "3"], "platform": "cpu", "platform_detected": True,
            "facts": {"host": NODE, "gpu_count": 0}, "thresholds": {"file": "thresholds/cpu.yaml", "sha256": "ab"},
            "suites": [{"file": "suites/s.yaml", "sha256": "cd"}], "launcher": "local", "backend": "gloo",
            "ranks": 2, "nodes": [NODE], "repeat": repeat,
            **({"report_format": report_format} if report_format is not None else {})}


def _result(p: dict[str, Any], k: int) -> dict[str, Any]:
    verdict = {"kind": "limit", "metric": "busbw", "measured": 5.0, "unit": "GB/s", "subject": None, "op": ">=",
               "limit": 1.0, "expression": ">= 1", "origin": "test", "margin": 4.0, "source": "test", "passed": True}
    return {**p, "type": "result", "outcome": "passed", "message": "", "duration": 0.1, "repeat": k,
            "verdicts": [verdict], "finished": "2026-01-01T00:00:01+00:00"}


def _write(run: Path, header: dict[str, Any], results: list[dict[str, Any]], end: dict[str, Any]) -> Path:
    """The record as a run writes it: RunWriter's lines, header, plan, each repetition's result, end."""
    writer = RunWriter(run / "run.jsonl")
    for line in [header, {"type": "plan", "items": PLAN}, *results, end]:
        writer.append(line)
    writer.close()
    return run / "run.jsonl"


def _report(run: Path) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    out = subprocess.run([sys.executable, "-m", "clustercheck", "report", str(run)], capture_output=True, text=True)
    return out, json.loads((run / "results.json").read_text())


def test_a_repetition_missing_in_the_middle_is_not_run_and_the_run_incomplete(tmp_path: Path) -> None:
    """b[h1]'s result of repetition 2 is absent, repetitions 1 and 3 whole and the end line clean: the run said
    PASS (exit 0) while results.json's burn_in called the node incomplete (not_run 1); only the last
    repetition that started was checked."""
    results = [_result(p, k) for k in (1, 2, 3) for p in PLAN if (p["check"], k) != ("b", 2)]
    _write(tmp_path, _header({"count": 3}), results,
           {"type": "end", "finished": "2026-01-01T00:02:00+00:00",
            "counts": {"passed": 5, "failed": 0, "error": 0, "skipped": 0}, "pool_starts": 1,
            "interrupted": False, "repetitions": 3})
    out, summary = _report(tmp_path)
    assert out.returncode == 2, out.stdout + out.stderr  # INCOMPLETE, never PASS (0)
    assert summary["verdict"] == "INCOMPLETE"
    assert summary["incomplete"]["not_run"] == 1 and summary["incomplete"]["items"] == ["s::b[h1]#2"]
    assert summary["burn_in"]["nodes"][NODE]["not_run"] == 1  # the two now say one thing
    assert "INCOMPLETE: 1 planned item(s) never ran" in out.stderr
    cases = ET.parse(tmp_path / "junit.xml").getroot().iter("testcase")
    not_run = [c.get("name") for c in cases if (c.find("error") is not None
                                                 and c.find("error").get("type") == "incomplete")]
    assert not_run == ["b[h1]#2", "INCOMPLETE"]
    ctrf = json.loads((tmp_path / "ctrf.json").read_text())["results"]["tests"]
    assert [t["name"] for t in ctrf if t.get("rawStatus") == "not run"] == ["s::b[h1]#2"]
