"""JUnit XML from the run record, written with junitparser and valid against the Jenkins xunit plugin's
junit-10.xsd (the schema pytest checks its own xunit2 output against; tests/schemas/). That schema allows
<properties> only on a <testsuite>, so every item gets a testsuite of its own carrying its measured /
limit / unit / margin properties, with one <testcase> inside. Testcase names are stable across runs:
`name` is the check id plus its node/GPU/pair (`allreduce-sweep[node7]`), `classname` is the suite file's
stem. `properties` is the one source of an item's properties: `pytest --junitxml` writes the same ones.

junitparser (5.x, maintained, reads and writes JUnit with lxml or the standard library) rather than
junit-xml, whose last release was in 2023 and which has no typed properties API."""

from __future__ import annotations

import io
import re
from typing import Any, Sequence

from junitparser import Attr, Error, Failure, JUnitXml, Skipped, TestCase, TestSuite
from junitparser.junitparser import etree  # lxml's where installed, else xml.etree's: the tree's own module

from clustercheck.fabric.comm import line as comm_line
from clustercheck.judging import verdicts as vt
from clustercheck.record.burnin import folded
from clustercheck.record.schema import PlanItem, ResultEntry, RunHeader, classname, item_id
from clustercheck.report.status import not_run_text, untested_text
from clustercheck.units import fmt

# characters XML 1.0 cannot carry at all (a rank's stderr tail may hold ESC or NUL)
_ILLEGAL = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _clean(value: object) -> str:
    return _ILLEGAL.sub(lambda m: f"\\x{ord(m.group()):02x}", str(value))


def properties(r: ResultEntry, header: RunHeader) -> list[tuple[str, str]]:
    props = [("id", item_id(r)), ("check", r["check"]), ("platform", header.get("platform", "")),
             ("outcome", r["outcome"])]
    node = r.get("node")
    if node:
        props.append(("node", node))
    for i, v in enumerate(r.get("verdicts") or []):
        if i == 0:
            props += [("metric", v["metric"]), ("measured", fmt(v["measured"])), ("limit", fmt(v["limit"])),
                      ("unit", v["unit"]), ("margin", _margin(v)), ("limit_source", v["origin"])]
        m = v["metric"]
        props += [(f"{m}.measured", fmt(v["measured"])), (f"{m}.limit", f"{v['op']} {fmt(v['limit'])}"),
                  (f"{m}.unit", v["unit"]), (f"{m}.margin", _margin(v)), (f"{m}.verdict", vt.word(v).lower())]
    worst = r.get("worst")
    if worst:
        props.append(("worst", worst))
    if r.get("comm"):  # which library moved the data, and what NCCL said it did
        props.append(("comm", comm_line(r["comm"])))
        props += [(f"algo.{k}", a) for k, a in (r["comm"].get("algorithms") or {}).items() if a]
    props += [("suite_file", r["suite_file"]), ("line", str(r["line"])),
              ("thresholds", header["thresholds"]["file"] if "thresholds" in header else "")]
    return props


def _margin(v: Any) -> str:
    return "" if v.get("margin") is None else f"{v['margin']:.6g}"


def verdict_lines(r: ResultEntry) -> list[str]:
    """What the CI page shows as the testcase's output: one line per verdict, with provenance."""
    lines = []
    for v in r.get("verdicts") or []:
        who = f"{v['subject']} " if v.get("subject") else ""
        if vt.is_expectation(v):
            detail = f" ({v['detail']})" if v.get("detail") else ""
            lines += [f"{who}{v['metric']}: found {fmt(v['measured'])}, {vt.rule_text(v)}: {vt.word(v)}{detail}",
                      f"  {vt.provenance(v)}"]
        else:
            lines += [f"{who}{v['metric']}: measured {vt.measured_text(v)}, limit {vt.rule_text(v)}, "
                      f"margin {vt.margin_text(v)}: {vt.word(v)}", f"  limit from {vt.provenance(v)}"]
    if r.get("worst"):
        lines.append(f"worst: {r['worst']}")
    if r.get("comm"):
        lines.append(f"comm: {comm_line(r['comm'])}")
    lines += [f"note: {note}" for note in r.get("notes") or ()]
    return lines


def _burn_in_properties(r: ResultEntry) -> list[tuple[str, str]]:
    s = r.get("burn_in")
    if not s:
        return []
    props = [("repetitions", str(s["repetitions"])), ("pass_ratio", f"{s['pass_ratio']:.6g}")]
    if s.get("min") is not None:
        props += [("spread.metric", s["metric"]), ("spread.min", fmt(s["min"])), ("spread.median", fmt(s["median"])),
                  ("spread.max", fmt(s["max"])), ("spread.unit", s["unit"])]
    if s.get("trend") is not None:
        props.append(("trend", f"{s['trend']:+.4g}"))
    return props


class _Suite(TestSuite):
    """A testsuite with the two attributes junit-10.xsd allows that junitparser does not name."""

    package = Attr()
    file = Attr()


def _suite(name: str, timestamp: str, hostname: str, package: str, file: str,
           properties: list[tuple[str, str]]) -> Any:
    suite = _Suite(_clean(name))
    suite.timestamp, suite.hostname = _clean(timestamp), _clean(hostname)
    suite.package, suite.file = _clean(package), _clean(file)
    for key, value in properties:  # before the testcase: the schema's order
        suite.add_property(_clean(key), _clean(value))
    return suite


def render_junit(header: RunHeader, results: Sequence[ResultEntry], not_run: Sequence[PlanItem] = (),
                 why: str | None = None, untested: Sequence[str] = ()) -> bytes:
    """Every item with a result, then every planned item that never ran, as an error: a CI page must
    never show an interrupted run as fewer tests that all passed."""
    host = (header.get("facts") or {}).get("host") or ""
    root = JUnitXml("clustercheck")
    totals = {"tests": 0, "failures": 0, "errors": 0}
    seconds = 0.0
    for r in folded(results):
        outcome = r["outcome"]
        duration = round(float(r.get("duration") or 0.0), 3)
        suite = _suite(item_id(r), r.get("finished") or header.get("started") or "", r.get("node") or host,
                       classname(r), r["suite_file"], properties(r, header) + _burn_in_properties(r))
        case = TestCase(_clean(r["name"]), _clean(classname(r)), duration)
        message = r.get("message") or ""
        first = _clean(message.splitlines()[0] if message.strip() else outcome)
        if outcome == "failed":  # the hardware missed a limit or a result was wrong
            case.result = [_text(Failure(first, "threshold"), message)]
        elif outcome == "error":  # the harness could not measure
            case.result = [_text(Error(first, "harness"), message)]
        elif outcome == "skipped":
            case.result = [Skipped(first)]
        out = verdict_lines(r)
        if out:
            case.system_out = _clean("\n".join(out) + "\n")
        suite.add_testcase(case)
        suite.update_statistics()
        root.append(suite)  # not add_testsuite: it compares each suite with every one before (quadratic); ids are unique
        totals["tests"] += 1
        totals["failures"] += outcome == "failed"
        totals["errors"] += outcome == "error"
        seconds += duration
    started = header.get("started") or ""
    for p in not_run:
        suite = _suite(item_id(p), started, p.get("node") or host, classname(p), p["suite_file"],
                       [("id", item_id(p)), ("check", p["check"]), ("outcome", "error"), ("incomplete", "true")])
        _error_case(root, suite, TestCase(_clean(p["name"]), _clean(classname(p)), 0.0),
                    not_run_text(p, header.get("absent") or {}, why), "incomplete")
    if why:  # the run itself, as an error: killed after its last item, stopped, short of its repetitions or
        # of a node, a run whose every planned item has a result still never reads as a green page
        _error_case(root, _suite("run", started, host, "clustercheck", "", [("outcome", "error"), ("incomplete", "true")]),
                    TestCase("INCOMPLETE", "clustercheck", 0.0), f"INCOMPLETE: {why}", "incomplete")
    for node in untested:  # a node no item measured: nothing clears it, and the page must not read green
        _error_case(root, _suite(f"untested[{node}]", started, node, "clustercheck", "",
                                 [("outcome", "error"), ("untested", "true")]),
                    TestCase(_clean(f"untested[{node}]"), "clustercheck", 0.0),
                    untested_text(node), "untested")
    totals["tests"] += len(not_run) + bool(why) + len(untested)
    totals["errors"] += len(not_run) + bool(why) + len(untested)
    # the totals by hand: junit-10.xsd allows no `skipped` on <testsuites>, which JUnitXml.update_statistics sets
    root.tests, root.failures, root.errors = totals["tests"], totals["failures"], totals["errors"]
    root.time = round(seconds, 3)
    # indented in place, not write(pretty=True): that re-parses the whole document into a minidom tree (GiBs
    # at tens of thousands of items)
    etree.indent(root._elem, space="  ")
    buffer = io.BytesIO()
    root.write(buffer)
    return buffer.getvalue()


def _error_case(root: Any, suite: Any, case: Any, message: str, kind: str) -> None:
    """What no item's result says (an item that never ran, the run that did not finish, a node nothing
    measured): an error of type `kind` in a testsuite of its own."""
    message = _clean(message)
    case.result = [_text(Error(message, kind), message)]
    suite.add_testcase(case)
    suite.update_statistics()
    root.append(suite)


def _text(result: Any, text: str) -> Any:
    result.text = _clean(text) if text else None
    return result
