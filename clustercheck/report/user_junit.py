"""The user's own `--junitxml=PATH` (pytest's LogXML) for a run that did not finish: pytest writes only the
items that ran, all green after a Ctrl-C between two checks, so a CI panel would show a pass. Here it gets
the run's verdict as a global property, `clustercheck_verdict=INCOMPLETE`, an error testcase per planned item
that never ran and one, `clustercheck::run`, that says why, as the run directory's own junit.xml does."""

from __future__ import annotations

from typing import Any

from clustercheck.record.io import Record
from clustercheck.record.schema import item_id
from clustercheck.report.status import not_run_text


def mark_incomplete(config: Any, rec: Record, said: str) -> None:
    """Add to pytest's LogXML, before its sessionfinish writes the file (`said`: the summary's INCOMPLETE
    line). Nothing without --junitxml, or where pytest's LogXML is not what this knows."""
    try:
        from _pytest.junitxml import xml_key
        from _pytest.reports import TestReport
    except ImportError:  # pytest's layout is its own, not a promise: the run directory's junit.xml still says it
        return
    xml = config.stash.get(xml_key, None)
    if xml is None:
        return
    xml.add_global_property("clustercheck_verdict", "INCOMPLETE")
    why = rec.incomplete()
    absent = rec.header.get("absent") or {}
    cases = [(str(p.get("nodeid") or item_id(p)), not_run_text(p, absent, why)) for p in rec.not_run()]
    for nodeid, text in [*cases, ("clustercheck::run", said)]:
        where = (nodeid.rpartition("::")[0], None, nodeid.rpartition("::")[2])
        xml.pytest_runtest_logreport(TestReport(nodeid, where, {}, "failed", text, "setup"))
        xml.pytest_runtest_logreport(TestReport(nodeid, where, {}, "passed", None, "teardown"))
