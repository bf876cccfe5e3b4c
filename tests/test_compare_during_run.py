"""--compare BASELINE during a run: a regression verdict on each item, as it is measured; progress lines."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers import CPU_THRESHOLDS, clustercheck_here, small_check, write_suite

RUN = ("suites/s.yaml", "--thresholds", "thresholds", "--cc-out", "out")


def latest(p: pytest.Pytester) -> dict:
    return json.loads((p.path / "out" / "latest" / "results.json").read_text())


def test_each_item_gets_a_regression_verdict_against_the_baseline(project: pytest.Pytester) -> None:
    # 20 iterations: the run's own spread (2 x the CV of its iterations) stays well under 99% even when the
    # other test worker takes the cores; with 3 a loaded machine once read a 10x drop as within it
    write_suite(project, "checks:\n  - id: ok\n    measure: all_reduce\n"
                         "    params: {sizes: [1KiB, 64KiB], iters: 20, warmup: 1}\n")
    project.runpytest(*RUN).assert_outcomes(passed=1)
    baseline = (project.path / "out" / "latest").resolve()
    # make the baseline look 1000x faster than anything this machine does: the new run must regress
    record = baseline / "run.jsonl"
    lines = [json.loads(x) for x in record.read_text().splitlines()]
    for x in lines:
        for v in x.get("verdicts") or []:
            if v["metric"] == "busbw":
                v["measured"] *= 1000
    torch_now = lines[0]["facts"]["versions"]["torch"]
    lines[0]["facts"]["versions"]["torch"] = "2.0.0"  # and measured with another torch, which the summary says
    record.write_text("".join(json.dumps(x) + "\n" for x in lines))
    res = project.runpytest(*RUN, "--compare", str(baseline))
    res.assert_outcomes(failed=1)
    res.stdout.fnmatch_lines([f"software differs from the baseline: torch 2.0.0 -> {torch_now}"])
    res.stdout.fnmatch_lines(["*busbw vs baseline: * -> * GB/s (-*%; higher is better, at most 5% worse allowed*",
                              "*busbw vs baseline  -*% (* -> * GB/s)  >= -5%*FAIL*"])
    (result,) = latest(project)["results"]
    reg = [v for v in result["verdicts"] if v["metric"] == "busbw vs baseline"]
    assert len(reg) == 1 and not reg[0]["passed"] and str(baseline.name) in reg[0]["origin"]
    # 99.999% allows the 1000x of the baseline and 100x more: under CI's load the third run once measured 10x
    # less than the first (0.1952 -> 0.01838 GB/s), which 99.99% (10x) failed
    res = project.runpytest(*RUN, "--compare", str(baseline), "--compare-tolerance", "99.999%")
    res.assert_outcomes(passed=1)
    res = project.runpytest(*RUN, "--compare", str(project.path / "out" / "latest"))  # the same software
    assert not [line for line in res.outlines if line.startswith("software differs")]


def test_a_baseline_that_measured_0_is_not_compared_and_the_run_ends_whole(project: pytest.Pytester) -> None:
    """A change from 0 was an infinite improvement, written as a verdict that passed on Infinity, which the
    run's own reader then refused at its end: an INTERNALERROR and no reports."""
    write_suite(project, "checks:\n" + small_check("ok"))
    project.runpytest(*RUN).assert_outcomes(passed=1)
    baseline = (project.path / "out" / "latest").resolve()
    lines = [json.loads(x) for x in (baseline / "run.jsonl").read_text().splitlines()]
    for x in lines:
        for v in x.get("verdicts") or []:
            if v["metric"] == "busbw":
                v["measured"], v["passed"] = 0.0, False
    (baseline / "run.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    res = project.runpytest(*RUN, "--compare", str(baseline))
    res.assert_outcomes(passed=1)
    assert "INTERNALERROR" not in res.stdout.str() + res.stderr.str() and res.ret == 0
    (result,) = latest(project)["results"]
    assert not [v for v in result["verdicts"] if v["metric"] == "busbw vs baseline"]
    # not compared, and said so on the item (every report shows its notes), not silence
    node = latest(project)["run"]["nodes"][0]
    assert f"{node}: not compared with the baseline: busbw: the baseline measured 0 GB/s, nothing to compare a " \
           "change with" in result["notes"], result.get("notes")
    res.stdout.fnmatch_lines([f"note: {node}: not compared with the baseline: busbw: the baseline measured 0 GB/s*"])


def test_what_the_baseline_has_not_got_is_a_note_on_the_item(project: pytest.Pytester) -> None:
    """An item the baseline has not got, and one it judged at another size, are judged by their own limits
    and each says on its item why it was not compared; they were dropped in silence."""
    write_suite(project, "checks:\n" + small_check("ok"))
    project.runpytest(*RUN).assert_outcomes(passed=1)
    baseline = (project.path / "out" / "latest").resolve()
    write_suite(project, "checks:\n" + small_check("ok") + small_check("new"))
    with (project.path / "thresholds" / "cpu.yaml").open("a") as th:
        th.write("  new:\n    busbw: {limit: \">= 0.000001\", unit: GB/s, source: \"any working loopback\"}\n")
    lines = [json.loads(x) for x in (baseline / "run.jsonl").read_text().splitlines()]
    for x in lines:
        if x.get("type") == "result":
            x["judged_at"] = 1024  # judged at 1 KiB in the baseline
    (baseline / "run.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    res = project.runpytest(*RUN, "--compare", str(baseline))
    res.assert_outcomes(passed=2)
    notes = {r["check"]: r.get("notes") for r in latest(project)["results"]}
    node = latest(project)["run"]["nodes"][0]
    assert len(notes["new"]) == 1 and notes["new"][0].startswith(f"{node}: not compared: not in the baseline "
                                                                 "(--compare "), notes
    assert any(n.startswith(f"{node}: not compared with the baseline: busbw: judged at 1 KiB in the baseline")
               for n in notes["ok"]), notes


def test_an_item_that_passed_in_the_baseline_and_is_skipped_now_is_not_judged(project: pytest.Pytester) -> None:
    """As `clustercheck compare` exits 3 for it: a skip must not let a run pass on less than its baseline."""
    write_suite(project, "checks:\n" + small_check("ok") + "  - id: h2d\n    measure: host_device\n")
    project.runpytest(*RUN).assert_outcomes(passed=1, skipped=1)  # host_device does not apply without a GPU
    baseline = (project.path / "out" / "latest").resolve()
    lines = [json.loads(x) for x in (baseline / "run.jsonl").read_text().splitlines()]
    for x in lines:
        if x.get("type") == "result" and x["check"] == "h2d":
            x["outcome"] = "passed"  # as on the GPU node the baseline ran on
    (baseline / "run.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    # the all_reduce beside it is compared too: at 99% a loaded 2-vCPU machine's noise (a 63% drop seen
    # while other tests ran) does not fail it, which is not what this test is about
    res = project.runpytest(*RUN, "--compare", str(baseline), "--compare-tolerance", "99%")
    res.assert_outcomes(passed=1, errors=1)  # skipped, and a run exit 0, before
    assert res.ret == 3
    (h2d,) = [r for r in latest(project)["results"] if r["check"] == "h2d"]
    assert h2d["outcome"] == "error" and h2d["message"].startswith("not judged: passed in the baseline (--compare ")
    assert "skipped now: " in h2d["message"]


def test_missing_baseline_is_a_usage_error(project: pytest.Pytester) -> None:
    write_suite(project, "checks:\n" + small_check("ok"))
    res = project.runpytest(*RUN, "--compare", "nowhere")
    assert res.ret == 4
    res.stderr.fnmatch_lines(["ERROR: no run record at *nowhere*"])


@pytest.mark.parametrize("args, said", [
    (("--compare-tolerance", "500%"), "ERROR: --compare-tolerance is how much worse than the --compare BASELINE a "
                                      "metric may get, and no --compare is given"),
    (("--compare", "out", "--compare-tolerance", "100%"), "ERROR: --compare-tolerance: tolerance '100%' is 100% or "
                                                          "more: *"),
])
def test_a_tolerance_that_could_judge_nothing_is_a_usage_error(project: pytest.Pytester, args: tuple[str, ...],
                                                               said: str) -> None:
    """--compare-tolerance without --compare judged nothing, silently; one of 100% or more let any drop of a
    higher-is-better metric short of zero pass as no regression."""
    write_suite(project, "checks:\n" + small_check("ok"))
    res = project.runpytest(*RUN, *args)
    assert res.ret == 4
    res.stderr.fnmatch_lines([said])
    assert not (project.path / "out").exists()


@pytest.mark.parametrize("tolerance", ["5%", "0.05", "10%"])
def test_clustercheck_run_refuses_a_tolerance_without_compare_whatever_its_value(tmp_path: Path,
                                                                               tolerance: str) -> None:
    """`clustercheck run --compare-tolerance 5%` ran and exited 0 (the raw text was compared with the default
    "5%", and `clustercheck run` forwarded no value equal to it), while 0.05 or 10% was refused."""
    (tmp_path / "th").mkdir()
    (tmp_path / "th" / "cpu.yaml").write_text(CPU_THRESHOLDS)
    (tmp_path / "s.yaml").write_text("checks:\n" + small_check("ok"))
    res = clustercheck_here("run", "s.yaml", "--thresholds", "th", "--out", "out", "--compare-tolerance", tolerance,
                            cwd=tmp_path)
    assert res.returncode == 4, res.stdout + res.stderr
    assert "--compare-tolerance is how much worse than the --compare BASELINE a metric may get, and no --compare " \
           "is given" in res.stderr
    assert not (tmp_path / "out").exists()  # nothing measured


def test_progress_lines_name_check_node_count_and_time_left(project: pytest.Pytester) -> None:
    write_suite(project, "checks:\n" + small_check("ok") + small_check("too-fast", scope="cluster"))
    res = project.runpytest(*RUN)  # on by default; off a terminal, whole lines among pytest's own
    res.stdout.fnmatch_lines(["clustercheck [[]1/2] ok on *, elapsed 0:0?",
                              "clustercheck [[]2/2] too-fast, elapsed *, about *:?? left"])


def test_a_baseline_that_is_no_like_for_like_reference_is_said(project: pytest.Pytester) -> None:
    """A baseline that did not finish, of another platform, sharing no item with the run: each said in one
    line at the run's end. It was used without a word, and a run of another suite passed, comparing nothing."""
    write_suite(project, "checks:\n" + small_check("ok"))
    project.runpytest(*RUN).assert_outcomes(passed=1)
    baseline = (project.path / "out" / "latest").resolve()
    lines = [json.loads(x) for x in (baseline / "run.jsonl").read_text().splitlines()]
    lines[0]["platform"] = "h100-sxm-8x"
    (baseline / "run.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines if x.get("type") != "end"))
    write_suite(project, "checks:\n" + small_check("other"))
    with (project.path / "thresholds" / "cpu.yaml").open("a") as th:
        th.write("  other:\n    busbw: {limit: \">= 0.000001\", unit: GB/s, source: \"any working loopback\"}\n")
    res = project.runpytest(*RUN, "--compare", str(baseline))
    res.assert_outcomes(passed=1)
    res.stdout.fnmatch_lines(["the baseline's verdict is INCOMPLETE: *",
                              "platforms differ from the baseline: h100-sxm-8x -> cpu",
                              "no item of this run is in the baseline (*): nothing was compared"])

