"""The plugin end to end through pytester: real gloo ranks, real reports."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from helpers import small_check, write_suite

RUN = ("--thresholds", "thresholds", "--cc-out", "out", "-p", "no:cacheprovider")


def run_dir(p: pytest.Pytester) -> Path:
    return (p.path / "out" / "latest").resolve()


def results(p: pytest.Pytester) -> dict:
    return json.loads((run_dir(p) / "results.json").read_text())


def test_passing_suite_writes_junit_html_json_with_properties(project: pytest.Pytester) -> None:
    write_suite(project, "checks:\n" + small_check("ok", scope="cluster"))
    res = project.runpytest("suites/s.yaml", *RUN)
    assert res.ret == 0
    res.stdout.fnmatch_lines(["*clustercheck: platform cpu (detected*2 gloo rank(s)*", "*ok*busbw*pass*", "*1 passed*"])
    junit = ET.parse(run_dir(project) / "junit.xml").getroot()
    cases = junit.findall(".//testcase")
    assert [c.get("name") for c in cases] == ["ok"]
    props = {p.get("name"): p.get("value") for p in junit.find("testsuite").iter("property")}
    assert props["metric"] == "busbw" and props["unit"] == "GB/s" and float(props["measured"]) > 0
    assert float(props["limit"]) == 0.000001
    html = (run_dir(project) / "report.html").read_text()
    assert "<svg" in html and "busbw" in html
    data = results(project)
    assert data["counts"] == {"passed": 1, "failed": 0, "error": 0, "skipped": 0}
    assert data["results"][0]["rows"][0]["wrong"] == 0


def test_failed_threshold_names_metric_measured_limit_unit(project: pytest.Pytester) -> None:
    write_suite(project, "checks:\n" + small_check("too-fast"))
    res = project.runpytest("suites/s.yaml", *RUN)
    assert res.ret == 1
    res.stdout.fnmatch_lines(["*busbw * GB/s misses the limit >= 1000000 GB/s (margin -*%); worst rank ? (*)*",
                              "*limit from '>= 1000000' (thresholds/cpu.yaml:*); impossible on purpose*"])
    assert "Traceback" not in res.stdout.str()
    case = ET.parse(run_dir(project) / "junit.xml").getroot().find(".//testcase")
    assert case is not None and case.find("failure") is not None and case.find("error") is None


def test_missing_threshold_is_an_error_not_a_pass(project: pytest.Pytester) -> None:
    write_suite(project, "checks:\n" + small_check("unjudged"))
    res = project.runpytest("suites/s.yaml", *RUN)
    assert res.ret == 3  # a harness error and nothing failed (clustercheck.exitcodes)
    res.outcomes = res.parseoutcomes()
    assert res.outcomes.get("errors") == 1 and "passed" not in res.outcomes
    res.stdout.fnmatch_lines(["*no threshold for check 'unjudged' on platform 'cpu'*"])
    case = ET.parse(run_dir(project) / "junit.xml").getroot().find(".//testcase")
    assert case is not None and case.find("error") is not None
    assert results(project)["results"][0]["outcome"] == "error"


def test_single_rank_all_reduce_is_skipped_with_reason(project: pytest.Pytester) -> None:
    write_suite(project, "checks:\n" + small_check("ok"))
    res = project.runpytest("suites/s.yaml", *RUN, "--ranks", "1", "-rs")
    assert res.ret == 5  # every item skipped: nothing was judged, nothing is cleared
    res.stdout.fnmatch_lines(["*SKIPPED*single rank moves no data*"])
    assert results(project)["results"][0]["outcome"] == "skipped"


def test_four_outcomes_in_one_record(project: pytest.Pytester) -> None:
    write_suite(project, "checks:\n" + small_check("ok") + small_check("too-fast") + small_check("unjudged"))
    res = project.runpytest("suites/s.yaml", *RUN)
    assert res.ret == 1
    res.assert_outcomes(passed=1, failed=1, errors=1)
    lines = [json.loads(x) for x in (run_dir(project) / "run.jsonl").read_text().splitlines()]
    assert [x["type"] for x in lines] == ["run", "plan", "pool", "result", "result", "result", "exclude", "end"]
    assert [x["outcome"] for x in lines[3:6]] == ["passed", "failed", "error"]


def test_k_and_x_behave_as_in_pytest(project: pytest.Pytester) -> None:
    write_suite(project, "checks:\n" + small_check("too-fast") + small_check("ok"))
    res = project.runpytest("suites/s.yaml", *RUN, "-k", "ok and not fast")
    res.assert_outcomes(passed=1, deselected=1)
    res = project.runpytest("suites/s.yaml", *RUN, "-x")
    res.assert_outcomes(failed=1)


def test_pytest_junitxml_carries_the_properties(project: pytest.Pytester) -> None:
    write_suite(project, "checks:\n" + small_check("ok"))
    res = project.runpytest("suites/s.yaml", *RUN, "--junitxml=j.xml")
    assert res.ret == 0
    case = ET.parse(project.path / "j.xml").getroot().find(".//testcase")
    assert case is not None
    props = [(p.get("name"), p.get("value")) for p in case.iter("property")]
    assert {"measured", "limit", "unit", "platform"} <= {name for name, _ in props}
    # one source of properties: --junitxml carries exactly what the run's own junit.xml gives the item
    own = ET.parse(project.path / "out" / "latest" / "junit.xml").getroot().find(".//testsuite/properties")
    assert own is not None and props == [(p.get("name"), p.get("value")) for p in own.iter("property")]


def test_ten_checks_start_the_ranks_once(project: pytest.Pytester) -> None:
    thresholds = project.path / "thresholds" / "cpu.yaml"
    thresholds.write_text(thresholds.read_text() + "".join(
        f"  c{i}:\n    busbw: {{limit: '>= 0.000001', unit: GB/s}}\n" for i in range(10)))
    write_suite(project, "checks:\n" + "".join(small_check(f"c{i}") for i in range(10)))
    res = project.runpytest("suites/s.yaml", *RUN)
    res.assert_outcomes(passed=10)
    data = results(project)
    pools = {(r["pool"]["number"], tuple(r["pool"]["pids"])) for r in data["results"]}
    assert len(pools) == 1
    assert data["end"]["pool_starts"] == 1


def test_a_different_environment_gets_its_own_pool(project: pytest.Pytester) -> None:
    write_suite(project, "checks:\n" + small_check("ok") + small_check("too-fast", env="{NCCL_EXAMPLE: '1'}"))
    project.runpytest("suites/s.yaml", *RUN)
    pools = [r["pool"]["number"] for r in results(project)["results"]]
    assert pools == [1, 2]


@pytest.mark.parametrize(("body", "expected"), [
    ("checks:\n  - id: a\n    measure: all_reduce\n   params: {}\n", "suites/s.yaml:4: YAML syntax error*"),
    ("checks:\n  - id: a\n    measure: all_reduce\n    parms: {}\n",
     "suites/s.yaml:4: checks[0].parms: unknown key; did you mean 'params'?"),
    ("checks:\n  - id: a\n    measure: all_reduce\n    params: {iters: 0}\n",
     "suites/s.yaml:4: checks[0].params.iters: must be between 1 and 100000, got 0"),
])
def test_bad_suite_is_one_line_without_traceback(project: pytest.Pytester, body: str, expected: str) -> None:
    write_suite(project, body)
    res = project.runpytest("suites/s.yaml", *RUN)
    assert res.ret not in (0, 1)
    res.stdout.fnmatch_lines([expected])
    assert "Traceback" not in res.stdout.str() + res.stderr.str()


def test_bad_threshold_expression_is_a_usage_error(project: pytest.Pytester) -> None:
    (project.path / "thresholds" / "cpu.yaml").write_text(
        "platform: cpu\ndetect: {gpu_count: 0}\nchecks:\n  ok:\n    busbw: {limit: '>= 0.8 * spec.nvlink.bogus', unit: GB/s}\n")
    write_suite(project, "checks:\n" + small_check("ok"))
    res = project.runpytest("suites/s.yaml", *RUN)
    assert res.ret == 4
    res.stderr.fnmatch_lines(["ERROR: thresholds/cpu.yaml:5: checks.ok.busbw.limit: bad threshold expression*"])
    assert "Traceback" not in res.stdout.str() + res.stderr.str()


def test_threshold_metric_the_measure_does_not_report(project: pytest.Pytester) -> None:
    (project.path / "thresholds" / "cpu.yaml").write_text(
        "platform: cpu\ndetect: {gpu_count: 0}\nchecks:\n  ok:\n    busbww: {limit: '>= 1', unit: GB/s}\n")
    write_suite(project, "checks:\n" + small_check("ok"))
    res = project.runpytest("suites/s.yaml", *RUN)
    assert res.ret == 4
    res.stderr.fnmatch_lines(["ERROR: thresholds/cpu.yaml:5: checks.ok.busbww: all_reduce reports no metric 'busbww'*"])


def test_yaml_outside_suites_dir_is_not_collected_unless_named(project: pytest.Pytester) -> None:
    (project.path / "other.yaml").write_text("checks:\n" + small_check("ok"))
    res = project.runpytest(*RUN, "--collect-only", "-q")
    assert "other.yaml" not in res.stdout.str()
    res = project.runpytest("other.yaml", *RUN, "--collect-only", "-q")
    assert "other.yaml::ok[" in res.stdout.str()


def test_xdist_workers_are_refused_for_suites_but_not_for_other_tests(project: pytest.Pytester) -> None:
    write_suite(project, "checks:\n" + small_check("ok"))
    res = project.runpytest("suites/s.yaml", "--thresholds", "thresholds", "-n", "2")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines(["ERROR: -n 2: clustercheck suites (suites/s.yaml) run in one process: parallel workers "
                              "would measure the same hardware at the same time*"])
    assert not (project.path / "clustercheck-out").exists()  # nothing was measured
    project.makepyfile(test_plain="def test_a():\n    pass\n")
    project.runpytest("test_plain.py", "-n", "2").assert_outcomes(passed=1)
