"""Burn-in: a suite repeated in one session (--repeat N, --duration T) on real gloo ranks; every result
carries its repetition, each item is summarised (pass ratio, min/median/max, trend) in the terminal, JUnit
(one testcase per item) and results.json, and one bad repetition fails the item and the node."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from clustercheck.record.burnin import by_node, folded, lines, summarize
from clustercheck.errors import UserError
from clustercheck.run.options import _fault, parse_duration
from helpers import small_check, write_suite

RUN = ("--thresholds", "thresholds", "--cc-out", "out")


def _result(rep: int, outcome: str, busbw: float, node: str = "n1") -> dict:
    return {"type": "result", "name": f"ok[{node}]", "check": "ok", "suite_file": "suites/s.yaml", "node": node,
            "outcome": outcome, "repeat": rep, "message": "" if outcome == "passed" else "busbw misses the limit",
            "verdicts": [{"kind": "limit", "metric": "busbw", "measured": busbw, "unit": "GB/s", "subject": None}]}


def test_summary_pass_ratio_spread_trend_and_node():
    results = [_result(k, "failed" if k == 6 else "passed", v) for k, v in enumerate([10, 10, 9, 9, 8, 4, 8, 7], 1)]
    (s,) = summarize(results)
    assert (s.repetitions, s.passed, s.failed, s.outcome) == (8, 7, 1, "failed")
    assert s.pass_ratio == pytest.approx(7 / 8)
    assert s.spread == (4.0, 8.5, 10.0)
    assert s.trend == pytest.approx((7.5 - 10) / 10)  # last quarter (8, 7) against the first (10, 10)
    assert by_node([s])["n1"]["pass_ratio"] == pytest.approx(7 / 8)
    (one,) = folded(results)
    assert one["outcome"] == "failed" and one["repeat"] == 6
    assert one["message"].startswith("failed in repetition(s) 6 of 8 (pass ratio 0.875): busbw misses")


def test_a_run_that_did_not_repeat_is_left_as_it_is():
    plain = [{k: v for k, v in _result(1, "passed", 1.0).items() if k != "repeat"}]
    assert folded(plain) == plain


@pytest.mark.parametrize("text, seconds", [("4h", 14400), ("30m", 1800), ("90s", 90), ("1h30m", 5400),
                                           ("2.5h", 9000), ("45", 45)])
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "0", "-5m", "4x", "h", "31d", "nan", "1e999"])
def test_bad_durations_are_one_line(text):
    with pytest.raises(UserError, match="--duration"):
        parse_duration(text)


def test_a_fault_can_target_one_repetition():
    assert _fault("ok:corrupt@1#2") == ("ok", ("corrupt", 1, 2))
    assert _fault("ok:raise") == ("ok", ("raise", None, None))
    with pytest.raises(UserError, match="#REP"):
        _fault("ok:raise#x")


def _record(project: pytest.Pytester) -> list[dict]:
    return [json.loads(x) for x in (project.path / "out" / "latest" / "run.jsonl").read_text().splitlines()]


def test_three_repetitions_with_one_bad_fail_the_item_and_say_so_everywhere(project: pytest.Pytester):
    write_suite(project, "checks:\n" + small_check("ok"))
    res = project.runpytest("suites/s.yaml", *RUN, "--repeat", "3", "--cc-inject-fault", "ok:corrupt#2")
    assert res.ret == 1
    res.assert_outcomes(passed=2, failed=1)
    res.stdout.fnmatch_lines(["burn-in: 3 repetition(s)",
                              "  FAILED  s::ok[[]*[]]  pass ratio 2/3 (67%); busbw min * median * max * GB/s",
                              "  node * FAILS burn-in: 2 of 3 item repetitions passed"])
    lines = _record(project)
    assert [r["repeat"] for r in lines if r["type"] == "result"] == [1, 2, 3]
    assert [r["outcome"] for r in lines if r["type"] == "result"] == ["passed", "failed", "passed"]
    assert lines[0]["repeat"] == {"count": 3} and lines[-1]["repetitions"] == 3
    run = project.path / "out" / "latest"
    summary = json.loads((run / "results.json").read_text())
    assert summary["verdict"] == "FAIL"
    (item,) = summary["burn_in"]["items"]
    assert (item["repetitions"], item["passed"], item["outcome"]) == (3, 2, "failed")
    assert item["pass_ratio"] == pytest.approx(2 / 3, abs=1e-6) and len(item["values"]) == 3
    root = ET.parse(run / "junit.xml").getroot()
    (case,) = root.iter("testcase")  # one testcase per item, not per repetition
    assert case.find("failure") is not None
    props = {p.get("name"): p.get("value") for p in root.iter("property")}
    assert props["repetitions"] == "3" and props["pass_ratio"] == "0.666667" and props["spread.metric"] == "busbw"
    assert (run / "exclude.txt").read_text().strip()  # a node that failed one repetition is excluded
    html = (run / "report.html").read_text()
    assert '<h2 id="burn-in">Burn-in</h2>' in html and html.count('class="burn-in"') == 1  # busbw over time
    assert "repetition 2: " in html and "(failed)</title>" in html and "limit 1e-06" in html


def test_duration_repeats_whole_repetitions_until_the_time_is_up(project: pytest.Pytester):
    write_suite(project, "checks:\n" + small_check("ok"))
    # the first repetition starts the pool (about 1 s here, 2 s under load): the next starts well before 5 s
    res = project.runpytest("suites/s.yaml", *RUN, "--duration", "5s")
    assert res.ret == 0
    lines = _record(project)
    reps = [r["repeat"] for r in lines if r["type"] == "result"]
    assert len(reps) >= 2 and reps == list(range(1, len(reps) + 1))
    assert lines[0]["repeat"] == {"duration_s": 5.0} and lines[-1]["repetitions"] == len(reps)


def test_stopping_before_the_last_repetition_is_incomplete(project: pytest.Pytester):
    write_suite(project, "checks:\n" + small_check("ok"))
    res = project.runpytest("suites/s.yaml", *RUN, "--repeat", "3", "-x", "--cc-inject-fault",
                                       "ok:corrupt#2")
    assert res.ret == 2  # INCOMPLETE: 2 of 3 repetitions ran to their end
    summary = json.loads((project.path / "out" / "latest" / "results.json").read_text())
    assert summary["verdict"] == "INCOMPLETE"
    assert summary["incomplete"]["reason"] == "stopped: -x or --maxfail after a failure: 2 of 3 repetitions ran"
    assert _record(project)[-1]["repetitions"] == 2  # it said 1: the second ran whole before -x stopped it


def test_stopping_a_duration_early_is_incomplete_and_stopping_after_the_last_repetition_is_not(
        project: pytest.Pytester):
    """--duration has no count the record could compare with: a -x stop after a whole repetition read as a
    finished burn-in (results.json ERROR, sla.json complete) after 8 s of an hour."""
    write_suite(project, "checks:\n" + small_check("ok"))
    res = project.runpytest("suites/s.yaml", *RUN, "--duration", "1h", "-x", "--cc-inject-fault", "ok:corrupt#1")
    assert res.ret == 2
    summary = json.loads((project.path / "out" / "latest" / "results.json").read_text())
    assert summary["incomplete"]["reason"] == ("stopped: -x or --maxfail after a failure: 1 repetition(s) ran before "
                                               "the --duration was up")
    assert json.loads((project.path / "out" / "latest" / "sla.json").read_text())["complete"] is False
    res = project.runpytest("suites/s.yaml", *RUN, "--repeat", "2", "-x", "--cc-inject-fault", "ok:corrupt#2")
    assert res.ret == 1  # the last repetition failed: every one asked for ran, and the failure is the verdict
    assert _record(project)[-1]["repetitions"] == 2 and "stopped" not in _record(project)[-1]


def test_repeat_and_duration_together_are_refused(project: pytest.Pytester):
    write_suite(project, "checks:\n" + small_check("ok"))
    res = project.runpytest("suites/s.yaml", *RUN, "--repeat", "2", "--duration", "1m")
    assert res.ret == 4
    res.stderr.fnmatch_lines(["*--repeat and --duration: give one*"])


def test_the_cpu_burn_in_suite_collects():
    from clustercheck.suite.load import load_suite

    suite = load_suite(Path(__file__).resolve().parent.parent / "suites" / "cpu-burn-in.yaml")
    assert [c.measure for c in suite.checks] == ["burn", "all_reduce", "host_memory"]


@pytest.mark.parametrize("platform", ["h100-sxm-8x", "h200-sxm-8x"])
def test_every_check_of_the_gpu_burn_in_suite_has_its_limits(platform):
    """suites/burn-in.yaml is judged on the 8-GPU profiles through per-kind defaults, a named limit and,
    for the fp8 burn alone, a check entry of its own (checks.burn-fp8-20min): no check meets 'no threshold'."""
    from clustercheck.run.judge import check_metrics, rules_for
    from clustercheck.judging.profiles import search_path
    from clustercheck.suite.load import load_suite

    profile = search_path().load(platform)
    for check in load_suite(Path(__file__).resolve().parent.parent / "suites" / "burn-in.yaml").checks:
        check_metrics(check, profile)
        if check.measure != "probe":
            assert rules_for(check, profile).limits, check.id


def test_the_series_follows_the_worst_subject_and_an_unfinished_run_passes_no_node():
    """burn's `relative` is 1.0 on the fastest GPU by definition: the series took the first subject, so with
    GPU0 fastest a GPU that slowed showed nowhere. And a run stopped after 5 of 100 repetitions printed
    `node ... passes burn-in`."""
    def rep(k: int, relative: list[float], op: str = ">=") -> dict:
        return {"type": "result", "name": "b[n1]", "check": "b", "suite_file": "s.yaml", "node": "n1",
                "outcome": "passed", "repeat": k,
                "verdicts": [{"kind": "limit", "metric": "relative", "measured": x, "op": op, "unit": "ratio",
                              "subject": f"GPU{i}"} for i, x in enumerate(relative)]}

    (s,) = summarize([rep(1, [1.0, 0.97]), rep(2, [1.0, 0.91]), rep(3, [1.0, float("nan")])])
    assert s.values[:2] == (0.97, 0.91) and s.values[2] != s.values[2]  # NaN: the worst of all
    assert s.spread == (0.91, 0.94, 0.97)  # over the numbers; the NaN's repetition fails on its own
    (s,) = summarize([rep(1, [70.0, 83.0], "<="), rep(2, [71.0, 85.0], "<=")])  # a ceiling: the hottest GPU
    assert s.values == (83.0, 85.0)
    assert lines([s])[-1] == "  node n1 passes burn-in: 2 of 2 item repetitions passed"
    assert lines([s], incomplete=True)[-1] == ("  node n1 INCOMPLETE burn-in: 2 of 2 item repetitions passed "
                                               "(the run did not finish)")


def test_a_repetition_that_errored_is_not_judged_never_a_failure_of_the_node(project: pytest.Pytester):
    """One of two repetitions raised in its ranks (a harness error): the node read `FAILS burn-in`, though
    no repetition failed. It is not judged; a node whose every repetition skipped is not measured; neither
    `passes`."""
    write_suite(project, "checks:\n" + small_check("ok"))
    res = project.runpytest("suites/s.yaml", *RUN, "--repeat", "2", "--cc-inject-fault", "ok:raise#2")
    res.stdout.fnmatch_lines(["  node * burn-in not judged (1 repetition(s) errored): 1 of 2 item repetitions passed"])
    assert "FAILS burn-in" not in res.stdout.str() and "passes burn-in" not in res.stdout.str()
    skipped = summarize([{**_result(k, "skipped", 1.0), "verdicts": []} for k in (1, 2)])
    assert lines(skipped)[-1] == "  node n1 burn-in not measured (every repetition skipped): 0 of 0 item repetitions passed"
    failed_too = summarize([_result(1, "error", 1.0), _result(2, "failed", 1.0)])
    assert lines(failed_too)[-1] == "  node n1 FAILS burn-in: 0 of 2 item repetitions passed"
