"""`ctrf.json`: the run in the Common Test Report Format (https://ctrf.io; schema and specification in
ctrf-io/ctrf schema/ctrf.schema.json and spec/ctrf.md, specVersion 0.0.0 at commit 84ddec5), written beside
JUnit for every run. One test per item, as JUnit has them; what CTRF has no field for (each verdict's
measured value, limit, unit and source, the run's verdict) sits in `extra` under the `clustercheck.`
prefix, as the specification asks of extension keys (spec/ctrf.md 4.6.1).

Fail closed: an item the harness could not measure (`error`), an item that never ran, a run that did not
finish and a node no item measured are `failed` in CTRF, with `rawStatus` saying which, so that a gate that
counts CTRF failures never passes them. The
document is rendered from the record alone and deterministically (its reportId is derived from the run
id), so re-rendering a signed run reproduces it byte for byte."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, Mapping, Sequence

from clustercheck import __version__
from clustercheck.judging import verdicts as vt
from clustercheck.record.schema import PlanItem, ResultEntry, RunHeader, classname, item_id
from clustercheck.report.jsontext import json_bytes
from clustercheck.report.status import not_judged_text, not_run_text, selection_text, untested_text

SPEC_VERSION = "0.0.0"
STATUS = {"passed": "passed", "failed": "failed", "skipped": "skipped", "error": "failed"}


def _ms(stamp: str | None) -> int | None:
    if not stamp:
        return None
    try:
        return int(datetime.fromisoformat(stamp).timestamp() * 1000)
    except ValueError:
        return None


def _verdict(v: Mapping[str, Any]) -> dict[str, Any]:
    return {"metric": v.get("metric"), "subject": v.get("subject"), "passed": v.get("passed"),
            "measured": v.get("measured"), "op": v.get("op"), "limit": v.get("limit"), "unit": v.get("unit"),
            "margin": v.get("margin"), "source": v.get("source"), "origin": v.get("origin"),
            "expression": v.get("expression")}


def _message(r: Mapping[str, Any]) -> str:
    if r.get("message"):
        return str(r["message"])
    return "; ".join(vt.line(v) for v in r.get("verdicts") or [])


def _test(r: ResultEntry) -> dict[str, Any]:
    test: dict[str, Any] = {
        "name": item_id(r) + (f"#{r['repeat']}" if r.get("repeat") else ""),
        "status": STATUS[r["outcome"]], "duration": int(round(float(r.get("duration") or 0) * 1000)),
        "suite": [classname(r)], "filePath": r["suite_file"], "message": _message(r),
        "extra": {"clustercheck.item": {"check": r["check"], "measure": r.get("measure"), "scope": r.get("scope"),
                                        "node": r.get("node"), "worst": r.get("worst"),
                                        "repeat": r.get("repeat"), "notes": r.get("notes") or []},
                  "clustercheck.verdicts": [_verdict(v) for v in r.get("verdicts") or []]},
    }
    if r.get("line"):
        test["line"] = int(r["line"])
    if r["outcome"] == "error":
        test["rawStatus"] = "error"  # the harness could not measure: not cleared
    stop = _ms(r.get("finished"))
    if stop is not None:
        test["stop"] = stop
        test["start"] = stop - test["duration"]
    return test


def _not_run(p: PlanItem, why: str, absent: Mapping[str, str]) -> dict[str, Any]:
    return {"name": item_id(p), "status": "failed", "rawStatus": "not run", "duration": 0,
            "suite": [classname(p)], "filePath": p["suite_file"], "message": not_run_text(p, absent, why),
            "extra": {"clustercheck.item": {"check": p["check"], "measure": p.get("measure"), "scope": p.get("scope"),
                                            "node": p.get("node")}}}


def _run_level(status: Mapping[str, Any]) -> list[dict[str, Any]]:
    """What no item says: a run that did not finish, and each node that no item measured, as a failed test
    of its own (as junit.xml has them), so that a gate counting CTRF failures reads neither as green."""
    out = []
    if status.get("incomplete"):
        out.append({"name": "INCOMPLETE", "status": "failed", "rawStatus": "incomplete", "duration": 0,
                    "suite": ["run"], "message": f"INCOMPLETE: {status['incomplete']['reason']}"})
    out += [{"name": f"untested[{node}]", "status": "failed", "rawStatus": "untested", "duration": 0, "suite": ["run"],
             "message": untested_text(node)} for node in status.get("untested") or []]
    if (status.get("compare") or {}).get("not_judged"):  # run --compare: a baseline no reference for a pass
        out.append({"name": "compare", "status": "failed", "rawStatus": "not judged", "duration": 0, "suite": ["run"],
                    "message": not_judged_text(status["compare"])})
    if status.get("selection"):  # the items not selected: skipped, never read as passed (report/status.py)
        out.append({"name": "selection", "status": "skipped", "rawStatus": "not selected", "duration": 0,
                    "suite": ["run"], "message": selection_text(status["selection"])})
    return out


def render_ctrf(header: RunHeader, results: Sequence[ResultEntry], end: Mapping[str, Any] | None,
                not_run: Sequence[PlanItem], status: Mapping[str, Any], signer: str | None) -> bytes:
    return json_bytes(ctrf_doc(header, results, end, not_run, status, signer))  # NaN as "NaN": JSON.parse refuses NaN


def ctrf_doc(header: RunHeader, results: Sequence[ResultEntry], end: Mapping[str, Any] | None,
             not_run: Sequence[PlanItem], status: Mapping[str, Any], signer: str | None) -> dict[str, Any]:
    """ctrf.json as a document (report/__init__.py writes it as it encodes it)."""
    tests = [_test(r) for r in results]
    why = (status.get("incomplete") or {}).get("reason") or "the run did not reach it"
    tests += [_not_run(p, why, header.get("absent") or {}) for p in not_run]
    tests += _run_level(status)
    start = _ms(header.get("started")) or 0
    stop = _ms((end or {}).get("finished")) or max((t.get("stop", start) for t in tests), default=start)
    summary = {"tests": len(tests), **{s: sum(1 for t in tests if t["status"] == s)
                                       for s in ("passed", "failed", "skipped", "pending", "other")},
               "suites": len({t["suite"][0] for t in tests}), "start": start, "stop": stop,
               "duration": max(0, stop - start)}
    facts = header.get("facts") or {}
    run_id = str(header.get("run_id") or f"{header.get('started')}/{header.get('platform')}")
    doc: dict[str, Any] = {
        "reportFormat": "CTRF", "specVersion": SPEC_VERSION,
        "reportId": str(uuid.uuid5(uuid.NAMESPACE_URL, f"clustercheck:{run_id}:ctrf")), "runId": run_id,
        "timestamp": (end or {}).get("finished") or header.get("started") or "",
        "generatedBy": f"clustercheck {__version__}",
        "results": {
            "tool": {"name": "clustercheck", "version": str((facts.get("versions") or {}).get("clustercheck") or "")},
            "summary": summary, "tests": tests,
            "environment": {"reportName": ", ".join(str(s.get("file")) for s in header.get("suites") or []),
                            "appName": "clustercheck", "osPlatform": str(facts.get("os") or ""),
                            "osRelease": str((facts.get("identity") or {}).get("kernel") or ""),
                            "testEnvironment": str(header.get("platform") or ""),
                            "healthy": status.get("verdict") == "PASS",
                            "extra": {"clustercheck.nodes": list(header.get("nodes") or [])}},
        },
        "extra": {"clustercheck.run": {"verdict": status.get("verdict"), "incomplete": status.get("incomplete"),
                                       "untested": status.get("untested"),
                                       **({"selection": status["selection"]} if status.get("selection") else {}), "platform": header.get("platform"),
                                       "thresholds": header.get("thresholds"), "signed_by": signer}},
    }
    if not doc["timestamp"]:
        del doc["timestamp"]
    return doc
