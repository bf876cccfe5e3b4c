"""Reports rendered from a run record: escaping, re-rendering, JUnit structure, the terminal table."""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from helpers import render_all
from clustercheck.report.terminal import summary_lines

EVIL = "<script>alert(1)</script>"


def _verdict(metric: str, measured: float, limit: float, passed: bool) -> dict:
    return {"metric": metric, "measured": measured, "unit": "GB/s", "op": ">=", "limit": limit, "passed": passed,
            "margin": (measured - limit) / limit, "worst": f"rank 1 ({EVIL})", "expression": f">= {limit}",
            "source": "a source & more", "origin": "thresholds/cpu.yaml:9", "spec_sources": []}


def write_record(path: Path) -> Path:
    rows = [{"size": s, "count": s // 4, "dtype": "float32", "time_us": 10.0, "algbw": s / 1e5, "busbw": s / 1e5,
             "wrong": 0, "rank_time_us": [10.0, 10.0], "slowest_rank": 1} for s in (1024, 4096, 16384)]
    lines = [
        {"type": "run", "schema": 1, "started": "2026-01-01T00:00:00+00:00", "argv": ["clustercheck", "run"],
         "platform": "cpu", "platform_detected": True, "facts": {"host": EVIL, "gpu_count": 0},
         "thresholds": {"file": "thresholds/cpu.yaml", "sha256": "ab"}, "suites": [{"file": "suites/s.yaml", "sha256": "cd"}],
         "launcher": "local", "backend": "gloo", "ranks": 2},
        {"type": "result", "name": f"{EVIL}[{EVIL}]", "check": EVIL, "node": EVIL, "measure": "all_reduce",
         "scope": "node", "suite_file": "suites/s.yaml", "line": 3, "outcome": "failed", "duration": 1.5,
         "message": f"busbw 0.1 GB/s misses the limit {EVIL}", "verdicts": [_verdict("busbw", 0.1, 1.0, False)],
         "rows": rows, "judged_at": 16384, "finished": "2026-01-01T00:00:02+00:00"},
        {"type": "result", "name": "b", "check": "b", "node": None, "measure": "all_reduce", "scope": "cluster",
         "suite_file": "suites/s.yaml", "line": 9, "outcome": "error", "duration": 0.1, "message": "rank 0 died"},
        {"type": "result", "name": "c", "check": "c", "node": None, "measure": "all_reduce", "scope": "cluster",
         "suite_file": "suites/s.yaml", "line": 12, "outcome": "skipped", "duration": 0.0, "message": "one rank"},
    ]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def test_html_and_junit_escape_ids_and_hosts(tmp_path: Path) -> None:
    paths = render_all(write_record(tmp_path / "run.jsonl"), tmp_path)
    html = paths["html"].read_text()
    assert "<script" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    junit = paths["junit"].read_bytes()
    assert b"<script>" not in junit
    root = ET.fromstring(junit)  # parses: the XML is well formed
    names = [c.get("name") for c in root.iter("testcase")]
    assert names[0] == f"{EVIL}[{EVIL}]"
    assert root.find("testsuite").get("hostname") == EVIL


def test_junit_outcomes_counts_and_properties(tmp_path: Path) -> None:
    paths = render_all(write_record(tmp_path / "run.jsonl"), tmp_path)
    root = ET.parse(paths["junit"]).getroot()
    # the record has no end line: the run itself is one more error, INCOMPLETE, though every item has a result
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("4", "1", "2")
    suites = root.findall("testsuite")  # one per item: the schema allows properties only on a testsuite
    assert [s.get("skipped") for s in suites] == ["0", "0", "1", "0"]
    cases = root.findall(".//testcase")
    assert cases[0].find("failure") is not None and cases[1].find("error") is not None
    assert cases[2].find("skipped") is not None
    assert cases[3].get("name") == "INCOMPLETE" and cases[3].find("error").get("type") == "incomplete"
    assert [s.get("name") for s in suites] == [f"s::{EVIL}[{EVIL}]", "s::b", "s::c", "run"]
    props = {p.get("name"): p.get("value") for p in suites[0].find("properties")}
    assert props["measured"] == "0.1" and props["limit"] == "1" and props["unit"] == "GB/s"
    assert props["limit_source"] == "thresholds/cpu.yaml:9"


def test_html_has_summary_plot_and_provenance(tmp_path: Path) -> None:
    html = render_all(write_record(tmp_path / "run.jsonl"), tmp_path)["html"].read_text()
    assert "1 failed" in html and "1 error" in html and "1 skipped" in html
    assert html.count("<polyline") == 1 and "limit 1" in html
    assert "a source &amp; more" in html and "thresholds/cpu.yaml:9" in html
    assert "http://" not in html.replace("http://www.w3.org/2000/svg", "") and "https://" not in html


def test_report_command_reproduces_the_live_reports(project: pytest.Pytester) -> None:
    from helpers import small_check, write_suite

    write_suite(project, "checks:\n" + small_check("ok") + small_check("too-fast"))
    live_run = project.runpytest("suites/s.yaml", "--thresholds", "thresholds", "--cc-out", "out")
    run = (project.path / "out" / "latest").resolve()
    live = {n: (run / n).read_bytes() for n in ("report.html", "junit.xml", "results.json", "sla.json")}
    for n in live:
        (run / n).unlink()
    out = subprocess.run([sys.executable, "-m", "clustercheck", "report", str(run)], capture_output=True, text=True)
    assert out.returncode == live_run.ret == 1, out.stderr  # the run's own verdict: too-fast failed
    assert {n: (run / n).read_bytes() for n in live} == live


def test_report_on_a_missing_run_is_a_one_line_error(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "clustercheck", "report", str(tmp_path / "nope")],
                         capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 4
    assert out.stderr.strip().splitlines() == [f"clustercheck: error: no run record at {tmp_path / 'nope'} (and no run "
                                               "history at clustercheck-out; --out DIR names another)"]


def test_terminal_table_lines_up_and_shows_every_outcome(tmp_path: Path) -> None:
    from clustercheck.record.io import read_record

    _, results, _ = read_record(write_record(tmp_path / "run.jsonl"))
    lines = summary_lines(results)
    assert lines[0].split() == ["check", "metric", "measured", "limit", "margin", "verdict"]
    assert "FAIL" in lines[1] and "-90.0%" in lines[1]
    assert lines[2].rstrip().endswith("ERROR: rank 0 died") and lines[3].rstrip().endswith("SKIPPED: one rank")
    assert lines[1].index("busbw") == lines[0].index("metric")  # columns line up


def test_a_record_killed_before_its_plan_says_nothing_was_measured(tmp_path: Path) -> None:
    """A run killed while it collected or started its ranks leaves a header and nothing else: its reports
    said `0 of 0 planned item(s) not run`, which reads as nothing lost."""
    run = tmp_path / "run.jsonl"
    run.write_text(write_record(tmp_path / "whole.jsonl").read_text().splitlines()[0] + "\n")
    proc = subprocess.run([sys.executable, "-m", "clustercheck", "report", str(run)], capture_output=True, text=True)
    assert proc.returncode == 2, proc.stderr
    said = "it stopped before it planned its items: nothing was measured"
    assert f"INCOMPLETE: the run was killed before it ended (the record has no end line); {said}" in proc.stdout + proc.stderr
    assert said in (tmp_path / "report.html").read_text() and "0 of 0" not in (tmp_path / "report.html").read_text()


def test_junit_appends_each_suite_without_comparing_it_or_reparsing_the_document(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """junitparser's add_testsuite compares each new suite with every one before it and write(pretty=True)
    re-parses the whole document into minidom: hours and GiBs at 50k items. Neither may happen."""
    import xml.dom.minidom

    from junitparser import TestSuite

    from clustercheck.record.io import read_record
    from clustercheck.report.junit import render_junit

    header, results, _ = read_record(write_record(tmp_path / "run.jsonl"))
    many = [{**results[2], "name": f"c{i}", "check": f"c{i}"} for i in range(40)]
    compared = []
    monkeypatch.setattr(TestSuite, "__eq__", lambda self, other: compared.append(1) or self is other)
    monkeypatch.setattr(xml.dom.minidom, "parseString", lambda *a, **k: pytest.fail("minidom re-parse"))
    junit = render_junit(header, many, why="killed")
    assert compared == []
    root = ET.fromstring(junit)
    assert [s.get("name") for s in root.findall("testsuite")] == [f"s::c{i}" for i in range(40)] + ["run"]
    assert root.get("tests") == "41" and junit.startswith(b"<?xml") and b"\n  <testsuite " in junit  # indented


def _junit_inputs(tmp_path: Path) -> tuple:
    """12 results of every outcome (one rank log with ESC and NUL), a planned item not run, the run
    INCOMPLETE and an untested node: every kind of testsuite junit.xml has."""
    from clustercheck.record.io import read_record

    header, results, _ = read_record(write_record(tmp_path / "run.jsonl"))
    many = [{**results[i % 3], "name": f"c{i}", "check": f"c{i}"} for i in range(12)]
    many[4]["message"] = "rank 0 died\x1b[31m\x00"
    not_run = [{"name": "late", "check": "late", "suite_file": "suites/s.yaml", "line": 20, "node": "n9"}]
    return header, many, not_run, "killed", ["n8"]


def test_junit_is_written_one_testsuite_at_a_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """junit.xml was one junitparser tree, written after its last testsuite was built (~470 MiB more peak
    memory at 20,000 results): each testsuite is now on the stream before the next is built."""
    import io

    from clustercheck.report import junit

    header, many, not_run, why, untested = _junit_inputs(tmp_path)
    stream = io.BytesIO()
    written = []  # at each testsuite built: how many whole testsuites the stream had already received
    make = junit._suite

    def counting(*args: Any) -> Any:
        written.append(stream.getvalue().count(b"</testsuite>"))
        return make(*args)

    monkeypatch.setattr(junit, "_suite", counting)
    junit.write_junit(header, many, not_run, why, untested, stream)
    assert written == list(range(len(many) + 3))  # the items, the one not run, the run, the untested node
    root = ET.fromstring(stream.getvalue())
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("15", "4", "7")  # counted first
    assert stream.getvalue() == junit.render_junit(header, many, not_run, why, untested)


def test_junit_holds_no_more_than_one_testsuite_element(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Counted on xml.etree's elements (junitparser's tree without lxml, whose elements take no weak
    reference): when each testsuite is built, at most the one before it is still alive."""
    import gc
    import weakref
    from xml.etree import ElementTree

    import junitparser.junitparser

    from clustercheck.report import junit

    monkeypatch.setattr(junitparser.junitparser, "etree", ElementTree)
    monkeypatch.setattr(junit, "etree", ElementTree)
    header, many, not_run, why, untested = _junit_inputs(tmp_path)
    live: weakref.WeakSet = weakref.WeakSet()
    alive = []
    make = junit._suite

    def tracked(*args: Any) -> Any:
        gc.collect()
        alive.append(len(live))
        suite = make(*args)
        live.add(suite._elem)
        return suite

    monkeypatch.setattr(junit, "_suite", tracked)
    data = junit.render_junit(header, many, not_run, why, untested)
    assert data.startswith(b"<?xml version='1.0' encoding='utf-8'?>")  # xml.etree's writing, not lxml's
    assert len(alive) == len(many) + 3 and max(alive) <= 1, str(alive)


@pytest.mark.parametrize("tree", ["lxml", "xml.etree"])
def test_streamed_junit_is_the_whole_tree_indented_and_written_at_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tree: str) -> None:
    """Suite by suite, junit.xml has the bytes it had as one tree (what `clustercheck verify` compares), with
    either module junitparser writes with; with no testsuite at all, <testsuites .../>."""
    import io
    from xml.etree import ElementTree

    import junitparser.junitparser

    from clustercheck.report import junit

    if tree == "xml.etree":
        monkeypatch.setattr(junitparser.junitparser, "etree", ElementTree)
        monkeypatch.setattr(junit, "etree", ElementTree)
    etree = junit.etree
    header, many, not_run, why, untested = _junit_inputs(tmp_path)
    for args in ((many, not_run, why, untested), (many, (), None, ()), ((), (), None, ()), ((), (), why, ())):
        data = junit.render_junit(header, *args)
        root = etree.fromstring(data)
        etree.indent(root, space="  ")
        whole = io.BytesIO()
        etree.ElementTree(root).write(whole, encoding="utf-8", xml_declaration=True)
        assert data == whole.getvalue()
    assert b"rank 0 died\\x1b[31m\\x00" in junit.render_junit(header, many)


def test_a_non_utf8_byte_in_argv_still_renders_every_report(tmp_path: Path) -> None:
    """A non-UTF-8 byte in --out or argv reaches the record as a lone surrogate; report.html's strict
    UTF-8 encoding refused it, every report of a good run was lost and the run read INCOMPLETE, "line 1"
    of a valid record blamed. Nor may the terminal list a report that is not there."""
    from clustercheck.report.terminal import file_lines

    lines = [json.loads(x) for x in write_record(tmp_path / "whole.jsonl").read_text().splitlines()]
    header, first = lines[0], lines[1]
    header["argv"] = ["clustercheck", "run", "--out", "x\udcff"]
    passed = {**first, "name": "ok[n1]", "check": "ok", "node": "n1", "outcome": "passed", "message": "",
              "verdicts": [_verdict("busbw", 2.0, 1.0, True)]}
    end = {"type": "end", "finished": "2026-01-01T00:00:03+00:00", "interrupted": False, "pool_starts": 1,
           "counts": {"passed": 1, "failed": 0, "error": 0, "skipped": 0}}
    run = tmp_path / "run" / "run.jsonl"
    run.parent.mkdir()
    run.write_text("".join(json.dumps(x) + "\n" for x in (header, passed, end)))
    assert [line.split()[0] for line in file_lines(run.parent)] == ["run.jsonl"]  # nothing rendered yet
    proc = subprocess.run([sys.executable, "-m", "clustercheck", "report", str(run)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "x\\udcff" in (run.parent / "report.html").read_text(encoding="utf-8")
    # as backslash text (b3371f9: a strict JSON reader refuses a lone surrogate); compared by ascii(): a failed
    # assertion holding a surrogate cannot even be reported (xdist's worker dies encoding it)
    assert ascii(json.loads((run.parent / "results.json").read_text())["run"]["argv"][-1]) == ascii("x\\udcff")
    listed = [line.split()[0] for line in file_lines(run.parent)]
    assert listed == ["run.jsonl", "results.json", "sla.json", "junit.xml", "ctrf.json", "report.html"]
