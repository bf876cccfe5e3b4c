"""JUnit XML from the run record, through junit-xml (structure, escaping) plus per-testcase properties,
which junit-xml lacks and Jenkins and GitLab display."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any

from junit_xml import TestCase, TestSuite

from clustercheck.results import fmt


def _case(r: dict[str, Any]) -> TestCase:
    classname = r["suite_file"].rsplit(".", 1)[0].replace("/", ".")
    case = TestCase(r["name"], classname=classname, elapsed_sec=r.get("duration", 0.0), file=r["suite_file"],
                    line=r["line"], timestamp=r.get("finished"))
    first = (r.get("message") or "").splitlines()[:1]
    if r["outcome"] == "failed":
        case.add_failure_info(message=first[0] if first else "failed", output=r["message"], failure_type="threshold")
    elif r["outcome"] == "error":
        case.add_error_info(message=first[0] if first else "error", output=r["message"], error_type="harness")
    elif r["outcome"] == "skipped":
        case.add_skipped_info(message=r.get("message") or "skipped")
    return case


def properties(r: dict[str, Any], platform: str) -> list[tuple[str, str]]:
    props = [("check", r["check"]), ("platform", platform), ("outcome", r["outcome"])]
    if r.get("node"):
        props.append(("node", r["node"]))
    for i, v in enumerate(r.get("verdicts") or []):
        if i == 0:
            props += [("metric", v["metric"]), ("measured", fmt(v["measured"])), ("limit", fmt(v["limit"])),
                      ("unit", v["unit"]), ("margin", f"{v['margin']:.6g}"), ("limit_source", v["origin"])]
        props += [(f"{v['metric']}.measured", fmt(v["measured"])),
                  (f"{v['metric']}.limit", f"{v['op']} {fmt(v['limit'])}"), (f"{v['metric']}.unit", v["unit"])]
    return props


def render_junit(header: dict[str, Any], results: list[dict[str, Any]]) -> bytes:
    platform = header.get("platform", "")
    by_file: dict[str, list[dict[str, Any]]] = {}
    for r in results:
        by_file.setdefault(r["suite_file"], []).append(r)
    root = ET.Element("testsuites", name="clustercheck")
    totals = dict(tests=0, failures=0, errors=0, skipped=0)
    for file, rs in by_file.items():
        suite = TestSuite(file, [_case(r) for r in rs], hostname=(header.get("facts") or {}).get("host"),
                          timestamp=header.get("started"),
                          properties={"platform": platform, "thresholds": (header.get("thresholds") or {}).get("file", "")})
        element = suite.build_xml_doc()
        for case_el, r in zip(element.iter("testcase"), rs):
            props_el = ET.Element("properties")
            for name, value in properties(r, platform):
                ET.SubElement(props_el, "property", name=name, value=str(value))
            case_el.insert(0, props_el)
        for key in totals:
            totals[key] += int(element.get(key, "0") or 0)
        root.append(element)
    for key, value in totals.items():
        root.set(key, str(value))
    ET.indent(root)
    return ET.tostring(root, encoding="utf-8", xml_declaration=True) + b"\n"
