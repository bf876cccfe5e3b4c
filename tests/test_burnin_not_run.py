"""A repeated run's planned items without a result, read back from a record the run's own writer wrote and
rendered by `clustercheck report`, or from a real run stopped by SIGTERM: a result missing in any repetition
from the first to the last that ran (not only the last) is not run, and the run is INCOMPLETE, never PASS;
the repetitions of `--repeat N` it never started, and those a record lost past its last result (a
`--duration` one's too), are counted and named as not run."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from helpers import write_suite
from test_faults import RUN, THRESHOLDS, _wait_for_results, check, record

from clustercheck.record.io import Record, RunWriter, load
from clustercheck.record.schema import REPORT_FORMAT
from clustercheck.report.terminal import incomplete_line

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


def test_sigterm_in_repetition_2_of_10_counts_the_9_repetitions_never_started(project: pytest.Pytester) -> None:
    """`--repeat 10` stopped by SIGTERM after repetition 1 said `0 of 2 planned item(s) not run` (results.json
    not_run 0, planned 2, JUnit no not-run testcase): only the last repetition that started was checked, though
    the header's repeat.count says 9 more were asked for. A real controller, real gloo ranks, a real signal."""
    (project.path / "thresholds" / "cpu.yaml").write_text(THRESHOLDS)
    write_suite(project, "checks:\n" + check("a", timeout=120) + check("b"))
    proc = subprocess.Popen([sys.executable, "-m", "pytest", "suites/s.yaml", *RUN, "--repeat", "10",
                             "--cc-inject-fault", "a:hang#2"], cwd=project.path, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)
    try:
        _wait_for_results(project.path, 2)  # repetition 1 whole; a hangs in repetition 2 and writes nothing
        time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        out = proc.communicate(timeout=60)[0].decode()
    finally:
        proc.kill()
    assert proc.returncode == 2, out
    assert "INCOMPLETE: interrupted (SIGTERM); 9 of 10 repetitions not run; 18 of 20 planned item repetition(s) " \
           "not run" in out, out
    lines = record(project.path)
    assert [x.get("repeat") for x in lines if x["type"] == "result"] == [1, 1]
    node = lines[0]["nodes"][0]
    run = project.path / "out" / "latest"
    data = json.loads((run / "results.json").read_text())
    assert data["verdict"] == "INCOMPLETE"
    assert {k: data["incomplete"][k] for k in ("not_run", "planned", "items", "repetitions")} == {
        "not_run": 18, "planned": 20, "items": [f"s::a[{node}]#2-10", f"s::b[{node}]#2-10"],
        "repetitions": {"asked": 10, "started": 1, "not_run": 9}}
    errors = [c for c in ET.parse(run / "junit.xml").getroot().iter("testcase") if c.find("error") is not None]
    assert [(c.get("name"), c.find("error").get("message")) for c in errors] == [
        (f"a[{node}]#2-10", "not run: interrupted (SIGTERM)"), (f"b[{node}]#2-10", "not run: interrupted (SIGTERM)"),
        ("INCOMPLETE", "INCOMPLETE: interrupted (SIGTERM)")]
    ctrf = json.loads((run / "ctrf.json").read_text())["results"]["tests"]
    assert [t["name"] for t in ctrf if t.get("rawStatus") == "not run"] == [f"s::a[{node}]#2-10", f"s::b[{node}]#2-10"]
    assert "9 of 10 repetitions not run; 18 of 20 planned item repetition(s) not run" in (run / "report.html").read_text()


def _stopped(tmp_path: Path, repeat: dict[str, Any], report_format: int | None) -> Record:
    """Repetition 1 of 2 planned items whole, then SIGTERM: the end line says interrupted."""
    _write(tmp_path, _header(repeat, report_format), [_result(p, 1) for p in PLAN],
           {"type": "end", "finished": "2026-01-01T00:02:00+00:00",
            "counts": {"passed": 2, "failed": 0, "error": 0, "skipped": 0}, "pool_starts": 1,
            "interrupted": True, "signal": "SIGTERM", "repetitions": 1})
    return load(tmp_path / "run.jsonl")


def test_a_duration_run_says_the_repetition_it_stopped_at(tmp_path: Path) -> None:
    """--duration knows no count of repetitions: the line says where it stopped, not how many were missed."""
    rec = _stopped(tmp_path, {"duration_s": 3600}, 10)
    assert incomplete_line(rec) == ("INCOMPLETE: interrupted (SIGTERM); stopped at repetition 1 (--duration: how "
                                    "many more were to come is not known); 0 of 2 planned item repetition(s) not run")
    out, summary = _report(tmp_path)
    assert out.returncode == 2 and summary["incomplete"]["repetitions"] == {"asked": None, "started": 1,
                                                                           "not_run": None}


def test_a_record_of_an_older_format_renders_its_reports_as_before(tmp_path: Path) -> None:
    """A signed run must re-render byte for byte: a format-9 record's reports still count the started
    repetitions alone (its terminal line says all it knows)."""
    rec = _stopped(tmp_path, {"count": 10}, 9)
    assert rec.not_run() == [] and rec.not_run_count(unstarted=True) == 18
    out, summary = _report(tmp_path)
    assert out.returncode == 2
    assert summary["incomplete"] == {"reason": "interrupted (SIGTERM)", "not_run": 0, "planned": 2, "items": [],
                                     "never_joined": {}}
    assert "9 of 10 repetitions not run; 18 of 20 planned item repetition(s) not run" in out.stderr


def _end(**repetitions: int) -> dict[str, Any]:
    return {"type": "end", "finished": "2026-01-01T00:02:00+00:00",
            "counts": {"passed": 6, "failed": 0, "error": 0, "skipped": 0}, "pool_starts": 1, "interrupted": False,
            **repetitions}


@pytest.mark.parametrize("repeat", [{"count": 3}, {"duration_s": 3600}], ids=["repeat", "duration"])
def test_a_last_repetition_lost_whole_is_incomplete(tmp_path: Path, repeat: dict[str, Any]) -> None:
    """Every result line of repetition 3 of 3 gone, the end line intact (`repetitions: 3`): only repetitions up
    to the last with a result were checked, so the record of 2 read PASS (exit 0), and compare called it a run
    of 2 repetitions. The end line's own count is checked against what the record holds."""
    _write(tmp_path, _header(repeat), [_result(p, k) for k in (1, 2) for p in PLAN], _end(repetitions=3))
    why = load(tmp_path / "run.jsonl").incomplete()
    assert why == "the end line says 3 repetitions ran; the record holds results of 2"
    out, summary = _report(tmp_path)
    assert out.returncode == 2, out.stdout + out.stderr  # INCOMPLETE, never PASS (0)
    assert summary["verdict"] == "INCOMPLETE" and summary["incomplete"]["reason"] == why


@pytest.mark.parametrize("repeat", [{"count": 3}, {"duration_s": 3600}], ids=["repeat", "duration"])
def test_a_last_repetition_lost_whole_counts_its_items_not_run(tmp_path: Path, repeat: dict[str, Any]) -> None:
    """The record above, of the current format: repetition 3's items are not run and named so, out of 3
    repetitions planned, with --duration as with --repeat 3 (--duration counted 0 of 4: the lost repetition
    went uncounted, past the last with a result)."""
    _write(tmp_path, _header(repeat, REPORT_FORMAT), [_result(p, k) for k in (1, 2) for p in PLAN],
           _end(repetitions=3))
    out, summary = _report(tmp_path)
    assert out.returncode == 2, out.stdout + out.stderr
    assert {k: summary["incomplete"][k] for k in ("not_run", "planned", "items", "repetitions")} == {
        "not_run": 2, "planned": 6, "items": ["s::a[h1]#3", "s::b[h1]#3"],
        "repetitions": {"asked": repeat.get("count"), "started": 2, "not_run": 1}}
    assert "2 of 6 planned item repetition(s) not run" in out.stderr


def test_a_duration_runs_lost_last_repetition_is_counted_and_named_not_run(tmp_path: Path) -> None:
    """A real `clustercheck run cpu-smoke --duration 1h` stopped by SIGTERM, its last whole repetition's result
    lines (and those of the one it was in) then lost: INCOMPLETE, but every report counted the planned items
    out of the repetitions with a result alone (`0 of 4 planned item repetition(s) not run`, results.json
    not_run 0 and no item named, no JUnit or CTRF not-run testcase), as though the lost one never ran."""
    proc = subprocess.Popen([sys.executable, "-m", "clustercheck", "run", "cpu-smoke", "--duration", "1h", "--out",
                             "out"], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and proc.poll() is None and _last_repeat(tmp_path) < 3:
            time.sleep(0.1)  # repetitions 1 and 2 whole, the run in repetition 3
        proc.send_signal(signal.SIGTERM)
        out = proc.communicate(timeout=120)[0]
    finally:
        proc.kill()
    assert proc.returncode == 2, out
    path = (tmp_path / "out" / "latest" / "run.jsonl").resolve()
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    ran = lines[-1]["repetitions"]
    assert lines[-1]["type"] == "end" and lines[-1]["interrupted"] is True and ran >= 2, lines[-1]
    # the record loses every result of the last repetition that ran whole, and of the one it was cut off in
    path.write_text("".join(json.dumps(x) + "\n" for x in lines if x["type"] != "result" or x["repeat"] < ran))
    rec = load(path)
    plan = [p["name"] for p in rec.plan or []]
    assert rec.started() == ran - 1 and rec.repetitions_lost() and len(plan) == 4
    report = subprocess.run([sys.executable, "-m", "clustercheck", "report", str(path.parent)], capture_output=True,
                            text=True)
    assert report.returncode == 2, report.stdout + report.stderr
    assert (f"INCOMPLETE: interrupted (SIGTERM); stopped at repetition {ran} (--duration: how many more were to come "
            f"is not known); 4 of {4 * ran} planned item repetition(s) not run") in report.stderr, report.stderr
    data = json.loads((path.parent / "results.json").read_text())
    named = [f"cpu-smoke::{name}#{ran}" for name in plan]
    assert data["verdict"] == "INCOMPLETE"
    assert {k: data["incomplete"][k] for k in ("not_run", "planned", "items", "repetitions")} == {
        "not_run": 4, "planned": 4 * ran, "items": named,
        "repetitions": {"asked": None, "started": ran - 1, "not_run": 1}}
    assert json.loads((path.parent / "sla.json").read_text())["incomplete"] == data["incomplete"]
    cases = ET.parse(path.parent / "junit.xml").getroot().iter("testcase")
    assert [(c.get("name"), error.get("message")) for c in cases if (error := c.find("error")) is not None] == [
        *((f"{name}#{ran}", "not run: interrupted (SIGTERM)") for name in plan),
        ("INCOMPLETE", "INCOMPLETE: interrupted (SIGTERM)")]
    ctrf = json.loads((path.parent / "ctrf.json").read_text())["results"]["tests"]
    assert [t["name"] for t in ctrf if t.get("rawStatus") == "not run"] == named


def _last_repeat(run: Path) -> int:
    """The last repetition with a result in the run's record so far (a line being written is not read)."""
    last = 0
    for path in (run / "out").glob("2*/run.jsonl"):
        for line in path.read_text().splitlines():
            if line.endswith("}") and '"type": "result"' in line:
                last = max(last, int(json.loads(line).get("repeat") or 0))
    return last


@pytest.mark.parametrize("repeat, why", [
    ({"count": 3}, "the end line does not say how many repetitions ran; 3 were asked for and the record holds "
                   "results of 2"),
    ({"duration_s": 3600}, "the end line does not say how many repetitions ran, and --duration asks for no count: "
                           "the record's results of 2 cannot be checked whole")], ids=["repeat", "duration"])
def test_an_end_line_without_its_repetitions_is_checked_against_the_count_asked(
        tmp_path: Path, repeat: dict[str, Any], why: str) -> None:
    """The end line's `repetitions` deleted as well: --repeat N must hold N; --duration has no count to hold."""
    _write(tmp_path, _header(repeat), [_result(p, k) for k in (1, 2) for p in PLAN], _end())
    assert load(tmp_path / "run.jsonl").incomplete() == why
    out, summary = _report(tmp_path)
    assert out.returncode == 2 and summary["incomplete"]["reason"] == why, out.stdout + out.stderr


@pytest.mark.parametrize("repeat", [{"count": 3}, {"duration_s": 3600}], ids=["repeat", "duration"])
def test_a_repeated_record_that_holds_every_repetition_is_whole(tmp_path: Path, repeat: dict[str, Any]) -> None:
    """The check above reads no whole run as incomplete: results of 3 repetitions, the end line says 3."""
    _write(tmp_path, _header(repeat), [_result(p, k) for k in (1, 2, 3) for p in PLAN], _end(repetitions=3))
    assert load(tmp_path / "run.jsonl").incomplete() is None
    out, summary = _report(tmp_path)
    assert out.returncode == 0 and summary["verdict"] == "PASS", out.stdout + out.stderr
