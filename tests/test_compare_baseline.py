"""clustercheck compare against a baseline that does not match the run: a failed run never exits 0, a
FAIL/ERROR/INCOMPLETE baseline and another platform are said, a metric or GPU the baseline had and the run
has not is named, and results judged at another size are not compared. Real records of one cpu run, edited
as an auditor edited them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import pytest

from helpers import small_check, write_suite

RUN = ("suites/s.yaml", "--thresholds", "thresholds", "--cc-out", "out")


def cc(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "clustercheck", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=300)


def real_run(p: pytest.Pytester) -> Path:
    write_suite(p, "checks:\n" + small_check("ok") + small_check("ok2", limits="ok"))
    p.runpytest(*RUN).assert_outcomes(passed=2)
    return (p.path / "out" / "latest").resolve()


def edited(run: Path, to: Path, edit: Callable[[list[dict[str, Any]]], None]) -> Path:
    """A copy of `run`'s record with `edit` applied to its lines, under a run_id of
    its own: compare refuses a run compared with itself (the same run_id)."""
    to.mkdir()
    lines = [json.loads(x) for x in (run / "run.jsonl").read_text().splitlines()]
    lines[0]["run_id"] = f"{lines[0].get('run_id')}-{to.name}"
    edit(lines)
    (to / "run.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    return to


def item(lines: list[dict[str, Any]], check: str) -> dict[str, Any]:
    return next(x for x in lines if x.get("type") == "result" and x["check"] == check)


def failed(lines: list[dict[str, Any]]) -> None:
    """busbw of `ok` misses a limit raised above it: the item and the run fail (a real FAIL run)."""
    r = item(lines, "ok")
    v = next(v for v in r["verdicts"] if v["metric"] == "busbw")
    v["limit"], v["expression"], v["passed"] = v["measured"] * 10, f">= {v['measured'] * 10}", False
    r["outcome"] = "failed"
    end = lines[-1]
    end["counts"]["failed"], end["counts"]["passed"] = 1, end["counts"]["passed"] - 1


def test_a_failed_run_never_exits_0_and_a_failed_baseline_is_said(project: pytest.Pytester) -> None:
    """`compare b_fail b_fail` said `0 regression(s)` and exited 0 while `report b_fail` exited 1; a baseline
    without the failed item said only `not in the baseline`, exit 0."""
    pytester = project
    run = real_run(pytester)
    b_fail = edited(run, pytester.path / "b_fail", failed)
    assert cc("report", str(b_fail), cwd=pytester.path).returncode == 1
    again = edited(b_fail, pytester.path / "b_fail2", lambda lines: None)  # the same failure, another run
    out = cc("compare", str(b_fail), str(again), cwd=pytester.path)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "the baseline's verdict is FAIL: 1 item(s) failed: s::ok[" in out.stdout
    assert any(line.startswith("FAILED  s::ok[") and line.endswith("fails now, failed in the baseline")
               for line in out.stdout.splitlines())

    def without_ok(lines: list[dict[str, Any]]) -> None:  # a baseline whose suite had no check `ok` yet
        lines.remove(item(lines, "ok"))
        plan = next(x for x in lines if x.get("type") == "plan")
        plan["items"] = [i for i in plan["items"] if i["check"] != "ok"]

    b_missing = edited(run, pytester.path / "b_missing", without_ok)
    out = cc("compare", str(b_missing), str(b_fail), cwd=pytester.path)
    assert out.returncode == 1, out.stdout
    assert any(line.startswith("FAILED  s::ok[") and line.endswith("fails now, not in the baseline")
               for line in out.stdout.splitlines())
    assert "1 item(s) failing" in out.stdout.splitlines()[-1]
    assert cc("compare", str(run), str(run), cwd=pytester.path).returncode == 4  # a run against itself: refused


def test_a_metric_or_gpu_the_baseline_had_and_this_run_has_not_is_named(project: pytest.Pytester) -> None:
    """b_subj: the baseline had busbw[GPU3] and time_us for an item that has neither now: `0 not compared`."""
    run = real_run(project)

    def more(lines: list[dict[str, Any]]) -> None:
        r = item(lines, "ok")
        busbw = next(v for v in r["verdicts"] if v["metric"] == "busbw")
        r["verdicts"] += [{**busbw, "subject": "GPU3"},
                          {**busbw, "metric": "time_us", "unit": "us", "op": "<=", "limit": 1e6}]

    b_subj = edited(run, project.path / "b_subj", more)
    out = cc("compare", str(b_subj), str(run), "--all", cwd=project.path)
    lines = out.stdout.splitlines()
    # the baseline judged them, this run did not: never a pass (exit 3)
    assert any(l.startswith("NOT COMPARED  s::ok[") and l.endswith("busbw[GPU3]: not in this run") for l in lines)
    assert any(l.startswith("NOT COMPARED  s::ok[") and l.endswith("time_us: not in this run") for l in lines)
    assert lines[-1].endswith("2 not compared (2 judged in the baseline, not now)")
    assert out.returncode == 3, out.stdout
    # `run --compare` holds the run to the same: never a pass of the item, naming what it lacks (it was a note on a
    # passed item, exit 0): not judged (exit 3), or a `not judged` verdict beside a regression this CPU measured
    again = project.runpytest(*RUN, "--compare", str(b_subj))
    ok = item([json.loads(x) for x in (project.path / "out" / "latest" / "run.jsonl").read_text().splitlines()], "ok")
    said = [ok.get("message") or "", *(v.get("detail") or "" for v in ok.get("verdicts") or ())]
    assert again.ret in (1, 3) and ok["outcome"] != "passed", again.stdout.str()[-3000:]
    assert any("busbw[GPU3]: not in this run (judged in the baseline)" in s for s in said), said
    assert any("time_us: not in this run (judged in the baseline)" in s for s in said), said


def test_runs_judged_at_another_size_are_not_compared(project: pytest.Pytester) -> None:
    """b_size: the baseline judged at 1 MiB read as `improved busbw 0.3 -> 0.92 GB/s +206.9%` against a run
    judged at 64 KiB; so did other params."""
    run = real_run(project)

    def smaller(lines: list[dict[str, Any]]) -> None:
        r = item(lines, "ok")
        r["judged_at"] = 1 << 20
        next(v for v in r["verdicts"] if v["metric"] == "busbw")["measured"] *= 3  # still passing its limit

    b_size = edited(run, project.path / "b_size", smaller)
    out = cc("compare", str(b_size), str(run), "--all", cwd=project.path)
    assert "improved" not in out.stdout and "REGRESSION" not in out.stdout, out.stdout
    assert any(l.startswith("not compared  s::ok[") and l.endswith("busbw: judged at 1 MiB in the baseline, 64 KiB now")
               for l in out.stdout.splitlines()), out.stdout

    def more_iters(lines: list[dict[str, Any]]) -> None:
        item(lines, "ok")["params"]["iters"] = 20

    b_params = edited(run, project.path / "b_params", more_iters)
    out = cc("compare", str(b_params), str(run), cwd=project.path)
    assert any(l.startswith("not compared  s::ok[") and
               l.endswith("busbw: run with other params than the baseline: iters 20 -> 3") for l in out.stdout.splitlines())


def test_another_platform_is_said_in_its_own_line(project: pytest.Pytester) -> None:
    run = real_run(project)

    def h100(lines: list[dict[str, Any]]) -> None:
        lines[0]["platform"] = "h100-sxm-8x"

    b_plat = edited(run, project.path / "b_plat", h100)
    out = cc("compare", str(b_plat), str(run), cwd=project.path)
    assert out.stdout.splitlines()[2] == ("platforms differ: h100-sxm-8x -> cpu (not judged: the baseline is of "
                                          "another platform, no reference for a pass)"), out.stdout
    assert out.returncode == 3, out.stdout  # another platform's numbers are no reference for a pass: 0 before


def test_a_change_beyond_the_tolerance_within_the_runs_spread_says_so_in_its_row(tmp_path: Path) -> None:
    """--compare b_nan printed `busbw vs baseline -9.742% (0.4506 -> 0.4067 GB/s) >= -5% -94.8% pass`: a pass
    beyond the tolerance, because the change was within the baseline's own spread, which the row did not say.
    (The spread is the baseline's alone, counted up to 25%: a record, not a real run, keeps the change in it.)"""
    from clustercheck.judging.limits import Limit
    from clustercheck.judging.measurement import Measurement, Outcome
    from clustercheck.judging.verdicts import Verdict
    from clustercheck.kinds.base import CheckSpec
    from clustercheck.run.judge import Baseline
    from test_compare import result, save, verdict as entry

    old = {**result("ok", "vm", [entry("busbw", 0.4506, ">=", 0.001, "GB/s")]),
           "metrics": {"iter_cv": {"value": 50.0, "unit": "ratio"}}}  # its iterations spread +-10000%
    base = save(tmp_path / "b_noisy", [old])
    check = CheckSpec("ok", "all_reduce", "node", {}, (), 60.0, "", "s.yaml", 1)
    limit = Limit("ok", "busbw", ">=", 0.001, "GB/s", ">= 0.001", "test", "test")
    now = Outcome(Measurement({"busbw": 0.4067, "iter_cv": 0.01}, {"busbw": "GB/s", "iter_cv": "ratio"}),
                  [Verdict("busbw", 0.4067, "GB/s", limit, True, 1.0)], {})
    (v,) = Baseline(str(base), tmp_path, 0.05).regressions(check, "gate::ok[vm]", now)[0]
    assert v.detail and v.detail.startswith("0.4506 -> 0.4067 GB/s, within the baseline's spread (-20.0%..+25.0%) (-9.7%")
    assert v.passed and (v.margin is None or v.margin >= 0), v  # no "-94.8% pass"


def test_compare_is_never_milder_than_the_runs_own_verdict(project: pytest.Pytester) -> None:
    """Every item matched and passed, but the run's record names a node no item measured: `report` exits 3
    (ERROR: the node is not cleared), and compare, which judged the matched items alike, exited 0."""
    base = real_run(project)

    def untested(lines: list[dict[str, Any]]) -> None:
        next(x for x in lines if x.get("type") == "exclude")["untested"] = ["n2"]

    now = edited(base, project.path / "now", untested)
    assert cc("report", str(now), cwd=project.path).returncode == 3
    out = cc("compare", str(base), str(now), cwd=project.path)
    assert out.returncode == 3, out.stdout + out.stderr


@pytest.mark.parametrize("edit, said", [
    (lambda lines: lines[0].update(platform="h100-sxm-8x"), "not compared: the baseline is of another platform "
                                                            "(h100-sxm-8x -> cpu;"),
    (lambda lines: lines[0]["facts"]["identity"].update(machine_id="another-machine"),
     "not compared: measured on other nodes/ranks/hardware (node "),
])
def test_run_compare_compares_nothing_against_another_platform_or_machine(
        project: pytest.Pytester, edit: Callable[[list[dict[str, Any]]], None], said: str) -> None:
    """`run --compare` compared each item's numbers with a baseline of another platform, or measured on another
    machine, as `clustercheck compare` no longer does: each item now says it was not compared, and why."""
    run = real_run(project)
    baseline = edited(run, project.path / "b", edit)
    project.runpytest(*RUN, "--compare", str(baseline)).assert_outcomes(passed=2)
    results = json.loads((project.path / "out" / "latest" / "results.json").read_text())["results"]
    for r in results:
        assert not [v for v in r["verdicts"] if v["metric"].endswith("vs baseline")], r["verdicts"]
        assert any(said in note for note in r.get("notes") or ()), r.get("notes")
