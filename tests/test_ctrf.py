"""ctrf.json validates against the Common Test Report Format's own JSON schema (tests/schemas/ctrf.schema.json,
ctrf-io/ctrf at 84ddec5), and fails closed: an error or an item that never ran is `failed` in CTRF."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from helpers import render_all
from test_reports import write_record

SCHEMA = json.loads((Path(__file__).parent / "schemas" / "ctrf.schema.json").read_text())


def validate(doc: dict) -> None:
    jsonschema.Draft7Validator(SCHEMA, format_checker=jsonschema.Draft7Validator.FORMAT_CHECKER).validate(doc)


def test_the_schema_is_the_published_one_and_rejects_what_it_should() -> None:
    # the shipped file is the real schema: it refuses a field outside `extra` and an unknown status
    assert SCHEMA["title"] == "CTRF JSON Schema" and SCHEMA["$schema"].startswith("http://json-schema.org/draft-07")
    minimal = {"reportFormat": "CTRF", "specVersion": "0.0.0",
               "results": {"tool": {"name": "x"}, "summary": {k: 0 for k in ("tests", "passed", "failed", "skipped",
                                                                              "pending", "other", "start", "stop")},
                           "tests": [{"name": "t", "status": "passed", "duration": 1}]}}
    validate(minimal)
    with pytest.raises(jsonschema.ValidationError):
        validate({**minimal, "measured": 1})
    bad = json.loads(json.dumps(minimal))
    bad["results"]["tests"][0]["status"] = "error"
    with pytest.raises(jsonschema.ValidationError):
        validate(bad)


def test_ctrf_of_a_record_with_failed_error_and_skipped_items(tmp_path: Path) -> None:
    record = write_record(tmp_path / "run.jsonl")
    with record.open("a") as fh:  # a run that finished
        fh.write(json.dumps({"type": "end", "finished": "2026-01-01T00:00:05+00:00", "interrupted": False}) + "\n")
    paths = render_all(record, tmp_path)
    doc = json.loads(paths["ctrf"].read_text())
    validate(doc)
    assert doc["reportFormat"] == "CTRF" and doc["results"]["tool"]["name"] == "clustercheck"
    tests = doc["results"]["tests"]
    assert [t["status"] for t in tests] == ["failed", "failed", "skipped"]
    assert tests[1]["rawStatus"] == "error" and tests[1]["message"] == "rank 0 died"  # never a pass, never silent
    summary = doc["results"]["summary"]
    assert (summary["tests"], summary["passed"], summary["failed"], summary["skipped"]) == (3, 0, 2, 1)
    first = tests[0]
    assert first["duration"] == 1500 and first["filePath"] == "suites/s.yaml" and first["line"] == 3
    (verdict,) = first["extra"]["clustercheck.verdicts"]
    assert verdict["measured"] == 0.1 and verdict["limit"] == 1.0 and verdict["unit"] == "GB/s"
    assert verdict["source"] == "a source & more" and verdict["passed"] is False
    assert doc["extra"]["clustercheck.run"]["verdict"] == "FAIL"
    assert doc["results"]["environment"]["healthy"] is False


def test_items_that_never_ran_are_failed_not_missing(tmp_path: Path) -> None:
    record = write_record(tmp_path / "run.jsonl")
    plan = {"type": "plan", "items": [
        {"name": n, "nodeid": n, "check": n, "measure": "all_reduce", "scope": "cluster", "node": None, "nodes": [],
         "suite_file": "suites/s.yaml", "line": 1} for n in ("b", "c", "never")]}
    lines = record.read_text().splitlines()
    record.write_text("\n".join([lines[0], json.dumps(plan), *lines[1:]]) + "\n")  # no end line: INCOMPLETE
    doc = json.loads(render_all(record, tmp_path)["ctrf"].read_text())
    validate(doc)
    never = [t for t in doc["results"]["tests"] if t["name"] == "s::never"]
    assert len(never) == 1 and never[0]["status"] == "failed" and never[0]["rawStatus"] == "not run"
    assert doc["extra"]["clustercheck.run"]["verdict"] == "INCOMPLETE"


def test_ctrf_renders_byte_for_byte_again(tmp_path: Path) -> None:
    # a signed run's reports must re-render identically (its reportId comes from the run, not a clock)
    record = write_record(tmp_path / "run.jsonl")
    first = render_all(record, tmp_path)["ctrf"].read_bytes()
    assert render_all(record, tmp_path)["ctrf"].read_bytes() == first


def _refuse(constant: str) -> None:
    raise ValueError(f"bare {constant} is not JSON")


def test_a_failed_measurement_nan_writes_strict_json_and_never_a_number(tmp_path: Path) -> None:
    """A failed measurement's NaN / infinite measured value and margin were written as bare NaN / Infinity:
    JSON.parse (CTRF's readers), jq and strict parsers refused the whole file, on the run that failed."""
    from clustercheck.evidence.outcomes import report_problems
    from clustercheck.report import read
    from clustercheck.report.status import run_status

    record = write_record(tmp_path / "run.jsonl")
    lines = [json.loads(x) for x in record.read_text().splitlines()]
    v = lines[1]["verdicts"][0]
    v["measured"], v["margin"] = float("nan"), float("-inf")
    lines[1]["verdicts"].append({**v, "metric": "algbw", "measured": float("inf"), "margin": float("nan")})
    record.write_text("".join(json.dumps(x) + "\n" for x in lines))
    paths = render_all(record, tmp_path)
    docs = {kind: json.loads(paths[kind].read_text(), parse_constant=_refuse) for kind in ("json", "sla", "ctrf")}
    said = docs["json"]["results"][0]["verdicts"]
    assert [(x["measured"], x["margin"], x["passed"]) for x in said] == [("NaN", "-Infinity", False),
                                                                         ("Infinity", "NaN", False)]
    metrics = docs["sla"]["checks"][0]["metrics"]
    assert [(m["measured"], m["margin"], m["passed"]) for m in metrics] == [("NaN", "-Infinity", False),
                                                                            ("Infinity", "NaN", False)]
    test = docs["ctrf"]["results"]["tests"][0]
    assert test["status"] == "failed" and [x["measured"] for x in test["extra"]["clustercheck.verdicts"]] == [
        "NaN", "Infinity"]
    validate(docs["ctrf"])
    rec = read(record)  # clustercheck's own reader of results.json and sla.json still reads them
    assert report_problems(tmp_path, rec, run_status(rec)) == ([], ["results.json", "sla.json"])
