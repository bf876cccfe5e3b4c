"""junit.xml validates against the Jenkins xunit plugin's published JUnit schema (tests/schemas/)."""

from __future__ import annotations

from pathlib import Path

import pytest

from test_reports import EVIL, write_record

from helpers import render_all

etree = pytest.importorskip("lxml.etree", reason="lxml (the 'test' extra) validates against the XSD")

XSD = Path(__file__).parent / "schemas" / "jenkins-xunit-junit-10.xsd"


@pytest.fixture(scope="module")
def schema() -> "etree.XMLSchema":
    return etree.XMLSchema(etree.parse(str(XSD)))


def assert_valid(schema: "etree.XMLSchema", path: Path) -> None:
    doc = etree.parse(str(path))
    if not schema.validate(doc):
        errors = "\n".join(f"line {e.line}: {e.message}" for e in schema.error_log)
        pytest.fail(f"{path.name} is not valid against {XSD.name}:\n{errors}")


def test_the_schema_rejects_what_it_should(schema: "etree.XMLSchema") -> None:
    """The validator is live: properties inside a testcase (what junit.py used to write) are refused."""
    bad = etree.fromstring(b'<testsuites><testsuite name="s" tests="1" failures="0" errors="0">'
                           b'<testcase name="t"><properties><property name="a" value="b"/></properties>'
                           b'</testcase></testsuite></testsuites>')
    assert not schema.validate(bad)
    assert "properties" in str(schema.error_log.last_error.message)


def test_every_outcome_and_hostile_names_validate(schema: "etree.XMLSchema", tmp_path: Path) -> None:
    paths = render_all(write_record(tmp_path / "run.jsonl"), tmp_path)
    assert_valid(schema, paths["junit"])
    text = paths["junit"].read_text()
    assert EVIL not in text and "&lt;script&gt;alert(1)&lt;/script&gt;" in text


def test_control_characters_from_a_rank_log_still_validate(schema: "etree.XMLSchema", tmp_path: Path) -> None:
    record = write_record(tmp_path / "run.jsonl")
    record.write_text(record.read_text().replace("rank 0 died", "rank 0 died\\u001b[31m\\u0000"))
    paths = render_all(record, tmp_path)
    assert_valid(schema, paths["junit"])
    assert "rank 0 died\\x1b[31m\\x00" in paths["junit"].read_text()


def test_a_real_cpu_run_validates(schema: "etree.XMLSchema", project: pytest.Pytester) -> None:
    from helpers import small_check, write_suite

    write_suite(project, "checks:\n" + small_check("ok") + small_check("too-fast") + small_check("unjudged"))
    project.runpytest("suites/s.yaml", "--thresholds", "thresholds", "--cc-out", "out")
    junit = (project.path / "out" / "latest" / "junit.xml").resolve()
    assert_valid(schema, junit)
    root = etree.parse(str(junit)).getroot()
    outcomes = [(c.get("name"), [x.tag for x in c if x.tag != "system-out"]) for c in root.iter("testcase")]
    host = root.find("testsuite").get("hostname")
    assert outcomes == [(f"ok[{host}]", []), (f"too-fast[{host}]", ["failure"]), (f"unjudged[{host}]", ["error"])]
    props = {p.get("name"): p.get("value") for p in root.find("testsuite").iter("property")}
    assert props["id"] == f"s::ok[{host}]" and props["metric"] == "busbw" and props["unit"] == "GB/s"
    assert float(props["measured"]) > 0 and float(props["limit"]) == 0.000001 and float(props["margin"]) > 0
