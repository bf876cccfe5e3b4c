"""JUnit XML from the run record, valid against the Jenkins xunit plugin's junit-10.xsd (the schema pytest
checks its own xunit2 output against; tests/schemas/). That schema allows <properties> only on a
<testsuite>, so every item gets a testsuite of its own carrying its measured/limit/unit/margin
properties, with one <testcase> inside. Testcase names are stable across runs: `name` is the check id
plus its node/GPU/pair (`allreduce-sweep[node7]`), `classname` is the suite file's stem."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from typing import Any, Sequence

from clustercheck.judging import verdicts as vt
from clustercheck.record.burnin import folded
from clustercheck.fabric.comm import line as comm_line
from clustercheck.record.schema import PlanItem, ResultEntry, RunHeader, classname, item_id
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


def _el(parent: ET.Element, tag: str, text: str | None = None, **attrs: object) -> ET.Element:
    el = ET.SubElement(parent, tag, {k: _clean(v) for k, v in attrs.items()})
    if text:
        el.text = _clean(text)
    return el


def render_junit(header: RunHeader, results: Sequence[ResultEntry], not_run: Sequence[PlanItem] = (),
                 why: str | None = None) -> bytes:
    """Every item with a result, then every planned item that never ran, as an error: a CI page must
    never show an interrupted run as fewer tests that all passed."""
    host = (header.get("facts") or {}).get("host") or ""
    root = ET.Element("testsuites", name="clustercheck")
    totals: dict[str, int] = {"tests": 0, "failures": 0, "errors": 0}
    seconds = 0.0
    for r in folded(results):
        outcome = r["outcome"]
        duration = float(r.get("duration") or 0.0)
        suite = _el(root, "testsuite", name=item_id(r), tests=1, failures=int(outcome == "failed"),
                    errors=int(outcome == "error"), skipped=int(outcome == "skipped"), time=f"{duration:.3f}",
                    timestamp=r.get("finished") or header.get("started") or "", hostname=r.get("node") or host,
                    package=classname(r), file=r["suite_file"])
        props = _el(suite, "properties")
        for name, value in properties(r, header) + _burn_in_properties(r):
            _el(props, "property", name=name, value=value)
        case = _el(suite, "testcase", name=r["name"], classname=classname(r), time=f"{duration:.3f}")
        message = r.get("message") or ""
        first = message.splitlines()[0] if message.strip() else outcome
        if outcome == "failed":  # the hardware missed a limit or a result was wrong
            _el(case, "failure", message, message=first, type="threshold")
        elif outcome == "error":  # the harness could not measure
            _el(case, "error", message, message=first, type="harness")
        elif outcome == "skipped":
            _el(case, "skipped", None, message=first)
        out = verdict_lines(r)
        if out:
            _el(case, "system-out", "\n".join(out) + "\n")
        totals["tests"] += 1
        totals["failures"] += outcome == "failed"
        totals["errors"] += outcome == "error"
        seconds += duration
    for p in not_run:
        message = f"not run: {why or 'the run did not finish'}"
        suite = _el(root, "testsuite", name=item_id(p), tests=1, failures=0, errors=1, skipped=0, time="0.000",
                    timestamp=header.get("started") or "", hostname=p.get("node") or host, package=classname(p),
                    file=p["suite_file"])
        props = _el(suite, "properties")
        for name, value in (("id", item_id(p)), ("check", p["check"]), ("outcome", "error"), ("incomplete", "true")):
            _el(props, "property", name=name, value=value)
        case = _el(suite, "testcase", name=p["name"], classname=classname(p), time="0.000")
        _el(case, "error", message, message=message, type="incomplete")
        totals["tests"] += 1
        totals["errors"] += 1
    for key, total in totals.items():
        root.set(key, str(total))
    root.set("time", f"{seconds:.3f}")
    ET.indent(root)
    return ET.tostring(root, encoding="utf-8", xml_declaration=True) + b"\n"
