"""JUnit XML from the run record, written with junitparser and valid against the Jenkins xunit plugin's
junit-10.xsd (the schema pytest checks its own xunit2 output against; tests/schemas/). That schema allows
<properties> only on a <testsuite>, so every item gets a testsuite of its own carrying its measured /
limit / unit / margin properties, with one <testcase> inside. Testcase names are stable across runs:
`name` is the check id plus its node/GPU/pair (`allreduce-sweep[node7]`), `classname` is the suite file's
stem. `properties` is the one source of an item's properties: `pytest --junitxml` writes the same ones.

write_junit streams the document: the totals are counted first, then each testsuite is built, written and
dropped in turn, so a run of tens of thousands of items never holds its whole tree.

junitparser (5.x, maintained, reads and writes JUnit with lxml or the standard library) rather than
junit-xml, whose last release was in 2023 and which has no typed properties API."""

from __future__ import annotations

import io
import re
from typing import Any, BinaryIO, Iterator, Sequence

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
    """junit.xml as bytes (write_junit into memory), for a caller that wants the whole document."""
    buffer = io.BytesIO()
    write_junit(header, results, not_run, why, untested, buffer)
    return buffer.getvalue()


def write_junit(header: RunHeader, results: Sequence[ResultEntry], not_run: Sequence[PlanItem],
                why: str | None, untested: Sequence[str], out: BinaryIO, selection: str | None = None,
                not_judged: str | None = None) -> None:
    """Every item with a result, then every planned item that never ran, as an error: a CI page must
    never show an interrupted run as fewer tests that all passed. Written to `out` one testsuite at a
    time, each built, indented and serialized on its own and then dropped: a whole tree held ~470 MiB at
    20,000 results. The bytes are those of the whole tree indented and written at once (tests/test_reports.py)."""
    items = folded(results)
    extra = len(not_run) + bool(why) + len(untested) + bool(not_judged)
    root = JUnitXml("clustercheck")
    # the totals first, by counting (they open the document, the suites follow), and by hand: junit-10.xsd
    # allows no `skipped` on <testsuites>, which JUnitXml.update_statistics sets
    root.tests = len(items) + extra + bool(selection)
    root.failures = sum(r["outcome"] == "failed" for r in items)
    root.errors = sum(r["outcome"] == "error" for r in items) + extra
    root.time = round(sum((_duration(r) for r in items), 0.0), 3)  # as the tree summed them: 0.0, not 0
    if not root.tests:  # <testsuites .../>: no start and end tag to write suites between
        root.write(out)
        return
    head, tail = _frame(root)
    out.write(head)
    for suite in _suites(header, items, not_run, why, untested, selection, not_judged):
        # indented in place as the whole tree's etree.indent does at depth 1 (not write(pretty=True): that
        # re-parses the document into a minidom tree); no tail of its own, the separator is written here
        etree.indent(suite._elem, space="  ", level=1)
        out.write(b"\n  " + etree.tostring(suite._elem, encoding="utf-8"))
    out.write(b"\n" + tail)


def _frame(root: Any) -> tuple[bytes, bytes]:
    """The document around the suites: the XML declaration and <testsuites ...> start tag, and the end tag,
    as the tree's own module writes them (lxml and xml.etree differ in both), split at a placeholder child."""
    placeholder = etree.SubElement(root._elem, "placeholder")
    marker = etree.tostring(placeholder, encoding="utf-8")
    buffer = io.BytesIO()
    root.write(buffer)
    head, found, tail = buffer.getvalue().partition(marker)
    if not found or marker in tail:  # a junitparser or lxml that writes otherwise: no half-framed junit.xml
        raise RuntimeError(f"junit.xml: {marker!r} is not once between the <testsuites> tags of {buffer.getvalue()!r}")
    root._elem.remove(placeholder)
    return head, tail


def _duration(r: ResultEntry) -> float:
    return round(float(r.get("duration") or 0.0), 3)


def _suites(header: RunHeader, items: Sequence[ResultEntry], not_run: Sequence[PlanItem], why: str | None,
            untested: Sequence[str], selection: str | None = None, not_judged: str | None = None) -> Iterator[Any]:
    """Each testsuite of junit.xml in order, built only when asked for, and held by no name here once
    yielded (a loop's variable would keep the last one alive past its turn)."""
    host = (header.get("facts") or {}).get("host") or ""
    started = header.get("started") or ""
    for r in items:
        yield _result_suite(r, header, host)
    for p in not_run:
        yield _error_case(_suite(item_id(p), started, p.get("node") or host, classname(p), p["suite_file"],
                                 [("id", item_id(p)), ("check", p["check"]), ("outcome", "error"), ("incomplete", "true")]),
                          TestCase(_clean(p["name"]), _clean(classname(p)), 0.0),
                          not_run_text(p, header.get("absent") or {}, why), "incomplete")
    if why:  # the run itself, as an error: killed after its last item, stopped, short of its repetitions or
        # of a node, a run whose every planned item has a result still never reads as a green page
        yield _error_case(_suite("run", started, host, "clustercheck", "", [("outcome", "error"), ("incomplete", "true")]),
                          TestCase("INCOMPLETE", "clustercheck", 0.0), f"INCOMPLETE: {why}", "incomplete")
    for node in untested:  # a node no item measured: nothing clears it, and the page must not read green
        yield _error_case(_suite(f"untested[{node}]", started, node, "clustercheck", "",
                                 [("outcome", "error"), ("untested", "true")]),
                          TestCase(_clean(f"untested[{node}]"), "clustercheck", 0.0), untested_text(node), "untested")
    if not_judged:  # run --compare: a baseline that is no reference for a pass (report/status.py)
        yield _error_case(_suite("compare", started, host, "clustercheck", "", [("outcome", "error"), ("compare", "true")]),
                          TestCase("compare", "clustercheck", 0.0), not_judged, "not judged")
    if selection:  # the items not selected: skipped, as a page must not read them as passed (report/status.py)
        suite = _suite("selection", started, host, "clustercheck", "", [("selection", "true")])
        case = TestCase("selection", "clustercheck", 0.0)
        case.result = [Skipped(_clean(selection))]
        suite.add_testcase(case)
        suite.update_statistics()
        yield suite


def _result_suite(r: ResultEntry, header: RunHeader, host: str) -> Any:
    outcome = r["outcome"]
    suite = _suite(item_id(r), r.get("finished") or header.get("started") or "", r.get("node") or host,
                   classname(r), r["suite_file"], properties(r, header) + _burn_in_properties(r))
    case = TestCase(_clean(r["name"]), _clean(classname(r)), _duration(r))
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
    return suite


def _error_case(suite: Any, case: Any, message: str, kind: str) -> Any:
    """What no item's result says (an item that never ran, the run that did not finish, a node nothing
    measured): an error of type `kind` in a testsuite of its own."""
    message = _clean(message)
    case.result = [_text(Error(message, kind), message)]
    suite.add_testcase(case)
    suite.update_statistics()
    return suite


def _text(result: Any, text: str) -> Any:
    result.text = _clean(text) if text else None
    return result
