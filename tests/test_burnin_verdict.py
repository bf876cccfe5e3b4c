"""A repeated run's verdict and its folded items, read back from a record the run's own writer wrote: the
run's verdict counts each item once, as folded (a repetition skipped beside passed ones is not judged, never
a pass), and an item's folded verdicts are each judged over every repetition (a GPU that failed in a later
repetition than the worst one is no pass)."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from gpu_record import GPUS, NODE, host_device_result
from clustercheck.record.burnin import folded
from clustercheck.record.io import RunWriter, load
from clustercheck.report.junit import render_junit


def _header(repetitions: int) -> dict[str, Any]:
    return {"type": "run", "schema": 1, "started": "2026-01-01T00:00:00+00:00",
            "argv": ["clustercheck", "run", "burn-in"], "platform": "h100-sxm-8x", "platform_detected": True,
            "facts": {"host": NODE, "gpu_count": GPUS}, "thresholds": {"file": "t.yaml", "sha256": "ab"},
            "suites": [{"file": "suites/burn-in.yaml", "sha256": "cd"}], "launcher": "local", "backend": "nccl",
            "ranks": GPUS, "nodes": [NODE], "repeat": {"count": repetitions}}


def _write(run: Path, results: list[dict[str, Any]], counts: dict[str, int]) -> Path:
    """The record as a run writes it: RunWriter's lines, header, each repetition's result, end."""
    writer = RunWriter(run / "run.jsonl")
    for line in [_header(3), *results,
                 {"type": "end", "finished": "2026-01-01T00:02:00+00:00", "counts": counts, "pool_starts": 1,
                  "interrupted": False, "repetitions": 3}]:
        writer.append(line)
    writer.close()
    return run / "run.jsonl"


def _passing(k: int) -> dict[str, Any]:
    r = host_device_result()
    for v in r["verdicts"]:
        v["measured"], v["passed"], v["margin"] = 55.0, True, (55.0 - v["limit"]) / v["limit"]
    return {**r, "nodes": [NODE], "repeat": k, "outcome": "passed", "message": ""}


def test_a_repetition_skipped_beside_passed_ones_is_no_pass_of_the_run(tmp_path: Path) -> None:
    """h2d-d2h passed in repetitions 1 and 3 and skipped in 2 (a driver lost mid-burn-in skips the probe):
    JUnit said error, while results.json, CTRF, the HTML banner and the exit code said PASS."""
    skipped = {**_passing(2), "outcome": "skipped", "message": "no NVIDIA driver"}
    for key in ("verdicts", "rows", "metrics"):
        skipped.pop(key)
    _write(tmp_path, [_passing(1), skipped, _passing(3)], {"passed": 2, "failed": 0, "error": 0, "skipped": 1})
    out = subprocess.run([sys.executable, "-m", "clustercheck", "report", str(tmp_path)], capture_output=True,
                         text=True)
    assert out.returncode == 3, out.stdout + out.stderr  # ERROR: not judged, never PASS (0)
    summary = json.loads((tmp_path / "results.json").read_text())
    assert summary["verdict"] == "ERROR"
    assert json.loads((tmp_path / "ctrf.json").read_text())["results"]["environment"]["healthy"] is False
    html = (tmp_path / "report.html").read_text()
    burn_in = html[html.index('<h2 id="burn-in">'):html.index('<h2 id="checks">')]
    assert "2/2" not in burn_in and '<td class="num">2/3</td>' in burn_in  # the skipped repetition counts
    assert summary["burn_in"]["items"][0]["counted"] == 3


def _slow(k: int, gpu: str) -> dict[str, Any]:
    """Repetition k of h2d-d2h with `gpu`'s h2d at 26.1 GB/s (under the 48 GB/s floor)."""
    r = _passing(k)
    for v in r["verdicts"]:
        if (v["subject"], v["metric"]) == (gpu, "h2d"):
            v["measured"], v["passed"], v["margin"] = 26.1, False, (26.1 - v["limit"]) / v["limit"]
    return {**r, "outcome": "failed", "message": f"{gpu} h2d 26.1 GB/s misses the limit >= 48 GB/s"}


def test_a_gpu_that_failed_only_in_a_later_repetition_fails_in_the_folded_item(tmp_path: Path) -> None:
    """GPU4 failed h2d in repetition 1, GPU6 in repetition 3: the fold kept repetition 1's verdicts alone,
    so GPU6 read as a pass in JUnit's system-out, the HTML and the terminal, and no failure named it."""
    record = _write(tmp_path, [_slow(1, "GPU4"), _passing(2), _slow(3, "GPU6")],
                    {"passed": 1, "failed": 2, "error": 0, "skipped": 0})
    rec = load(record)
    (item,) = folded(rec.results)
    h2d = {v["subject"]: v for v in item["verdicts"] if v["metric"] == "h2d"}
    assert h2d["GPU6"]["passed"] is False and h2d["GPU6"]["measured"] == 26.1  # its worst repetition's value
    assert h2d["GPU4"]["passed"] is False and h2d["GPU0"]["passed"] is True
    assert len(item["verdicts"]) == 2 * GPUS  # one per (metric, subject, unit, op), not one per repetition
    assert item["outcome"] == "failed"
    assert "repetition 1: GPU4 h2d" in item["message"] and "repetition 3: GPU6 h2d" in item["message"]
    case = next(ET.fromstring(render_junit(rec.header, rec.results)).iter("testcase"))
    failure = case.find("failure")
    assert failure is not None and "GPU6" in (failure.text or "") and "GPU4" in (failure.text or "")
    out = case.findtext("system-out") or ""
    assert [line for line in out.splitlines() if "GPU6" in line and "h2d" in line and "FAIL" in line], out
