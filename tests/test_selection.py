"""A run that measured a selection (-k, --deselect, PYTEST_ADDOPTS, a conftest) says so in every report, and
`verify` reads the recorded selection rather than guessing it from argv."""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from helpers import small_check, write_suite

RUN = ("--thresholds", "thresholds", "--cc-out", "out", "-p", "no:cacheprovider")


def latest(p: pytest.Pytester) -> Path:
    return (p.path / "out" / "latest").resolve()


@pytest.mark.parametrize("how", [("-k", "ok and not fast"), ("--deselect", "suites/s.yaml::too-fast[vm]")])
def test_a_selection_passes_and_every_report_says_it(project: pytest.Pytester, how: tuple[str, str]) -> None:
    write_suite(project, "checks:\n" + small_check("too-fast") + small_check("ok"))
    res = project.runpytest("suites/s.yaml", *RUN, *how)
    res.assert_outcomes(passed=1, deselected=1)
    assert res.ret == 0  # the selection asked for passed, and says it was one
    res.stdout.fnmatch_lines(["*a selection: 1 of 2 planned items; the rest were not measured and nothing about them "
                              "is cleared (not selected: s::too-fast[[]vm])*"])
    run = latest(project)
    data = json.loads((run / "results.json").read_text())
    assert data["verdict"] == "PASS"
    assert data["selection"] == {"selected": 1, "collected": 2, "deselected": ["s::too-fast[vm]"], "more": 0}
    plan = [json.loads(line) for line in (run / "run.jsonl").read_text().splitlines()
            if json.loads(line)["type"] == "plan"][0]
    assert plan["selection"] == data["selection"]
    sla = json.loads((run / "sla.json").read_text())
    assert sla["selection"] == data["selection"] and sla["verdict"] == "PASS"
    assert "a selection: 1 of 2 planned items" in (run / "report.html").read_text()
    junit = ET.parse(run / "junit.xml").getroot()
    skipped = [c for c in junit.iter("testcase") if c.get("name") == "selection"]
    assert len(skipped) == 1 and "1 of 2" in skipped[0].find("skipped").get("message")
    ctrf = json.loads((run / "ctrf.json").read_text())
    assert ctrf["extra"]["clustercheck.run"]["selection"] == data["selection"]
    assert [t["status"] for t in ctrf["results"]["tests"] if t["name"] == "selection"] == ["skipped"]
    again = subprocess.run([sys.executable, "-m", "clustercheck", "report", str(run)], capture_output=True, text=True,
                           timeout=120)  # the record rendered later says it where its verdict is read too
    assert again.returncode == 0 and "a selection: 1 of 2 planned items" in again.stderr, again.stderr


def test_the_whole_suite_makes_no_selection(project: pytest.Pytester) -> None:
    write_suite(project, "checks:\n" + small_check("ok") + small_check("too-fast"))
    res = project.runpytest("suites/s.yaml", *RUN)
    assert res.ret == 1  # too-fast fails: the whole suites, judged whole
    assert "a selection" not in res.stdout.str()
    data = json.loads((latest(project) / "results.json").read_text())
    assert "selection" not in data
    assert "selection" not in json.loads((latest(project) / "sla.json").read_text())


@pytest.mark.pool
def test_verify_reads_a_selection_made_by_pytest_addopts_not_a_deleted_check(tmp_path: Path) -> None:
    """PYTEST_ADDOPTS=-k leaves argv clean: verify read argv alone and called the unselected checks deleted."""
    from helpers import clustercheck_here
    from test_attestation import evidence_project, openssl_key

    root = evidence_project(tmp_path)
    key, pub = openssl_key(root, "seller")
    proc = clustercheck_here("run", "evidence.yaml", "--thresholds", "profiles", "--out", "o", "--sign", str(key),
                             cwd=root, env={"PYTEST_ADDOPTS": "-k allreduce"})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "a selection: 1 of" in proc.stdout
    run = (root / "o" / "latest").resolve()
    assert json.loads((run / "results.json").read_text())["selection"]["selected"] == 1
    checked = clustercheck_here("verify", str(run), "--key", str(pub), "--allow-selection", cwd=root)
    said = checked.stdout + checked.stderr
    assert "deleted from the record" not in said, said
    assert checked.returncode == 0 and "a selection (1 of" in said, said
    whole = clustercheck_here("verify", str(run), "--key", str(pub), cwd=root)  # never as the whole suite
    assert whole.returncode == 6 and "NOT VERIFIED as the whole suite" in whole.stdout, whole.stdout


def test_a_bad_suite_beside_a_good_one_runs_nothing_even_continuing_on_collection_errors(project: pytest.Pytester
                                                                                          ) -> None:
    """The session never starts with a bad suite file; the good file's items ran on it anyway (an
    AssertionError traceback each) under --continue-on-collection-errors."""
    write_suite(project, "checks:\n" + small_check("ok"), name="good.yaml")
    write_suite(project, "checks:\n  - id: a\n    measure: all_reduce\n    parms: {}\n", name="bad.yaml")
    res = project.runpytest("suites/good.yaml", "suites/bad.yaml", *RUN, "--continue-on-collection-errors")
    said = res.stdout.str() + res.stderr.str()
    assert res.ret == 4, said
    assert "AssertionError" not in said and "Traceback" not in said
    res.stdout.fnmatch_lines(["*suites/bad.yaml:4: checks*.parms: unknown key*"])
    assert not (project.path / "out" / "latest").exists()
