"""clustercheck compare: two saved run records, per-metric regressions with direction from the limit."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from clustercheck.record.compare import compare, load_run
from clustercheck.record.match import classify
from clustercheck.record.tolerance import parse_tolerance
from clustercheck.record.compare_report import report_lines
from clustercheck.errors import UserError


def verdict(metric: str, measured: float, op: str, limit: float, unit: str) -> dict:
    passed = {">=": measured >= limit, "<=": measured <= limit, "==": measured == limit}[op]
    return {"metric": metric, "measured": measured, "unit": unit, "op": op, "limit": limit, "passed": passed,
            "margin": 0.0, "worst": "rank 1 (n1)", "expression": f"{op} {limit}", "source": "test",
            "origin": "thresholds/cpu.yaml:9", "spec_sources": []}


def result(name: str, node: str | None, verdicts: list[dict], outcome: str = "passed") -> dict:
    return {"type": "result", "name": f"{name}[{node}]" if node else name, "check": name, "node": node,
            "measure": "all_reduce", "scope": "node" if node else "cluster", "suite_file": "/x/suites/gate.yaml",
            "line": 3, "outcome": outcome, "duration": 1.0, "message": "", "verdicts": verdicts,
            "finished": "2026-01-01T00:00:02+00:00"}


def save(run_dir: Path, results: list[dict], started: str = "2026-01-01T00:00:00+00:00", schema: int = 1) -> Path:
    run_dir.mkdir(parents=True)
    lines = [{"type": "run", "schema": schema, "started": started, "argv": ["clustercheck", "run"], "platform": "cpu",
              "platform_detected": True, "facts": {"host": "n1"}, "suites": [], "thresholds": {}},
             *results, {"type": "end", "finished": "2026-01-01T00:01:00+00:00", "counts": {}, "interrupted": False}]
    (run_dir / "run.jsonl").write_text("".join(json.dumps(x, sort_keys=True) + "\n" for x in lines))
    return run_dir


def two_runs(tmp_path: Path, busbw_now: float = 90.0, time_now: float = 100.0) -> tuple[Path, Path]:
    base = save(tmp_path / "hist" / "20260101-000000-cpu", [
        result("allreduce", "n1", [verdict("busbw", 100.0, ">=", 50, "GB/s"), verdict("wrong", 0, "==", 0, "count")]),
        result("allreduce", "n2", [verdict("busbw", 100.0, ">=", 50, "GB/s")]),
        result("latency", None, [verdict("time_us", 100.0, "<=", 500, "us")]),
        result("gone", None, [verdict("busbw", 1.0, ">=", 0.5, "GB/s")]),
    ])
    now = save(tmp_path / "hist" / "20260102-000000-cpu", [
        result("allreduce", "n1", [verdict("busbw", busbw_now, ">=", 50, "GB/s"), verdict("wrong", 3, "==", 0, "count")]),
        result("allreduce", "n2", [verdict("busbw", 103.0, ">=", 50, "GB/s")]),
        result("latency", None, [verdict("time_us", time_now, "<=", 500, "us")]),
        result("new", None, [verdict("busbw", 1.0, ">=", 0.5, "GB/s")]),
    ], started="2026-01-02T00:00:00+00:00")
    return base, now


def test_direction_comes_from_the_limit_operator(tmp_path: Path) -> None:
    base, now = two_runs(tmp_path, busbw_now=90.0, time_now=120.0)
    c = compare(load_run(base), load_run(now), tolerance=0.05)
    regressions = {(ch.item, ch.metric): ch for ch in c.regressions}
    assert set(regressions) == {("gate::allreduce[n1]", "busbw"), ("gate::latency", "time_us")}
    busbw = regressions[("gate::allreduce[n1]", "busbw")]
    assert (busbw.baseline, busbw.current, busbw.direction) == (100.0, 90.0, "higher")
    assert math.isclose(busbw.change, -0.10)
    assert regressions[("gate::latency", "time_us")].direction == "lower"
    assert [ch.item for ch in c.changes if ch.kind == "same"] == ["gate::allreduce[n2]"]  # +3% < 5%
    assert not any(ch.metric == "wrong" for ch in c.changes)  # '==' has no direction
    assert ("gate::new", "not in the baseline") in c.not_compared and ("gate::gone", "passed in the baseline, not in this run") in c.unmeasured_now


def test_better_numbers_are_improvements_not_regressions(tmp_path: Path) -> None:
    base, now = two_runs(tmp_path, busbw_now=120.0, time_now=50.0)
    c = compare(load_run(base), load_run(now))
    assert c.regressions == []
    assert {(ch.item, ch.metric) for ch in c.improvements} == {("gate::allreduce[n1]", "busbw"), ("gate::latency", "time_us")}


@pytest.mark.parametrize(("direction", "change", "kind"), [
    ("higher", -0.05, "regression"), ("higher", -0.0499, "same"), ("higher", 0.05, "improvement"),
    ("lower", 0.05, "regression"), ("lower", -0.2, "improvement"), ("lower", 0.0, "same"),
    ("higher", -math.inf, "regression"),
])
def test_a_change_equal_to_the_tolerance_counts(direction: str, change: float, kind: str) -> None:
    assert classify(direction, change, 0.05) == kind


def test_an_item_that_passed_and_could_not_measure_now_is_named_and_never_exits_0(tmp_path: Path) -> None:
    base = save(tmp_path / "a", [result("allreduce", "n1", [verdict("busbw", 100.0, ">=", 50, "GB/s")]),
                                 result("allreduce", "n2", [verdict("busbw", 100.0, ">=", 50, "GB/s")])])
    crashed = {**result("allreduce", "n1", [], outcome="error"), "message": "rank 1 crashed\nits log: ..."}
    now = save(tmp_path / "b", [crashed, result("allreduce", "n2", [verdict("busbw", 100.0, ">=", 50, "GB/s")])])
    c = compare(load_run(base), load_run(now))
    assert c.unmeasured_now == [("gate::allreduce[n1]", "passed in the baseline, error now: rank 1 crashed")]
    assert [ch.item for ch in c.changes] == ["gate::allreduce[n2]"] and c.not_compared == []
    assert report_lines(c)[0] == "NOT MEASURED NOW  gate::allreduce[n1]: passed in the baseline, error now: rank 1 crashed"
    assert report_lines(c)[-1] == ("1 metric(s) compared at tolerance 5%: 0 regression(s), 0 improvement(s), "
                                   "1 item(s) not measured now, 0 not compared")
    out = cc(str(base), str(now), cwd=tmp_path)
    assert out.returncode == 3, out.stdout  # a harness error, as the run's own verdict: 0 before
    skipped = save(tmp_path / "c", [{**result("allreduce", "n1", [], outcome="skipped"), "message": "no tool"},
                                    result("allreduce", "n2", [verdict("busbw", 100.0, ">=", 50, "GB/s")])])
    assert compare(load_run(base), load_run(skipped)).unmeasured_now == [
        ("gate::allreduce[n1]", "passed in the baseline, skipped now: no tool")]



def test_an_error_now_exits_3_whatever_the_baseline_said(tmp_path: Path) -> None:
    """A failure in the baseline that is an error now, and a new item that errored, exited 0: the error was
    silence, though the run itself exits 3 for it."""
    base = save(tmp_path / "a", [result("allreduce", "n1", [verdict("busbw", 10.0, ">=", 50, "GB/s")],
                                        outcome="failed")])
    now = save(tmp_path / "b", [{**result("allreduce", "n1", [], outcome="error"), "message": "rank 0 hung"},
                                {**result("allreduce", "n2", [], outcome="error"), "message": "rank 3 hung"}])
    c = compare(load_run(base), load_run(now))
    assert c.unmeasured_now == [("gate::allreduce[n1]", "failed in the baseline, error now: rank 0 hung"),
                                ("gate::allreduce[n2]", "not in the baseline, error now: rank 3 hung")]
    out = cc(str(base), str(now), cwd=tmp_path)
    assert out.returncode == 3, out.stdout


def test_bad_records_are_one_line_user_errors(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="no run record at"):
        load_run(tmp_path / "missing")
    (tmp_path / "garbage.jsonl").write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe")
    with pytest.raises(UserError, match="not a run record"):
        load_run(tmp_path / "garbage.jsonl")
    (tmp_path / "empty.jsonl").write_text('{"type": "result"}\n[1, 2]\n')
    with pytest.raises(UserError, match="not a run record"):
        load_run(tmp_path / "empty.jsonl")
    future = save(tmp_path / "future", [], schema=2)
    with pytest.raises(UserError, match="run record schema 2; this clustercheck reads schema 1"):
        load_run(future)


def test_a_record_no_run_writes_is_refused_naming_the_line_never_compared(tmp_path: Path) -> None:
    """A baseline whose busbw passed on NaN was compared as 'not compared: the baseline measured nan' and
    exited 0; a key given twice was read as whichever came last; a verdict without its unit ended compare
    with a KeyError. Each is a bad record: one line naming file, line and key, exit 4."""
    now = save(tmp_path / "now", [result("allreduce", "n1", [verdict("busbw", 100.0, ">=", 50, "GB/s")])])
    nan = save(tmp_path / "nan", [result("allreduce", "n1", [{**verdict("busbw", 100.0, ">=", 50, "GB/s"),
                                                              "measured": math.nan}])])
    out = cc(str(nan), str(now), cwd=tmp_path)
    assert out.returncode == 4 and out.stdout == ""
    assert out.stderr.splitlines() == [f"clustercheck: error: {nan / 'run.jsonl'}: not a run record (line 2: "
                                       "result.verdicts[0]: passed with measured NaN, which judging never passes (a "
                                       "record edited by hand?))"]
    unitless = {k: v for k, v in verdict("busbw", 100.0, ">=", 50, "GB/s").items() if k != "unit"}
    save(tmp_path / "unit", [result("allreduce", "n1", [unitless])])
    with pytest.raises(UserError, match=r"line 2: result.verdicts\[0\]: a limit's verdict without 'unit'"):
        load_run(tmp_path / "unit")
    record = now / "run.jsonl"
    record.write_text(record.read_text().replace('"type": "end"', '"type": "end", "type": "run"'))
    out = cc(str(now), str(now), cwd=tmp_path)
    assert out.returncode == 4 and "line 3: key 'type' given twice in one object" in out.stderr, out.stderr


def test_tolerance_takes_fractions_and_percentages() -> None:
    assert parse_tolerance("0.1") == 0.1 and parse_tolerance("5%") == 0.05
    import argparse

    for bad in ("x", "-1", "nan"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_tolerance(bad)
    # a higher-is-better metric falls by 100% at most: 100% or more could flag no drop short of zero
    for bad in ("100%", "500%", "1e3%"):
        with pytest.raises(argparse.ArgumentTypeError, match="is 100% or more"):
            parse_tolerance(bad)
    assert parse_tolerance("99.5%") == pytest.approx(0.995)


def cc(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "clustercheck", "compare", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=120)


def test_compare_command_exit_codes_and_default_run(tmp_path: Path) -> None:
    base, now = two_runs(tmp_path, busbw_now=90.0, time_now=100.0)
    (tmp_path / "hist" / "latest").symlink_to(now.name)
    out = cc(base.name, "--out", "hist", cwd=tmp_path)  # a run name under --out, RUN defaults to latest
    assert out.returncode == 1, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "baseline hist/20260101-000000-cpu (cpu, started 2026-01-01T00:00:00+00:00)"
    assert lines[1] == "run      hist/20260102-000000-cpu (cpu, started 2026-01-02T00:00:00+00:00)"
    assert lines[2] == "FAILED NOW  gate::allreduce[n1]: wrong passed in the baseline (0), fails now (3 count, == 0)"
    assert lines[3] == "NOT MEASURED NOW  gate::gone: passed in the baseline, not in this run"
    assert lines[4].split() == ["REGRESSION", "gate::allreduce[n1]", "busbw", "100", "->", "90", "GB/s", "-10.0%",
                                "higher", "is", "better"]
    assert lines[-1] == ("3 metric(s) compared at tolerance 5%: 1 regression(s), 0 improvement(s), "
                         "1 verdict(s) failed now, 1 item(s) not measured now, 1 not compared")

    out = cc(str(base), str(now), "--tolerance", "15%", cwd=tmp_path)
    assert out.returncode == 1 and "REGRESSION" not in out.stdout  # #wrong 0 -> 3 fails whatever the tolerance
    assert out.stdout.splitlines()[-1].startswith("3 metric(s) compared at tolerance 15%: 0 regression(s)")

    (now / "run.jsonl").write_text("not json\n")
    out = cc(str(base), str(now), cwd=tmp_path)
    assert out.returncode == 4 and out.stdout == ""
    assert out.stderr.splitlines() == [f"clustercheck: error: {now / 'run.jsonl'}: not a run record (line 1: not JSON "
                                     f"(JSONDecodeError))"]


def test_a_different_nccl_or_driver_is_said_first(tmp_path: Path) -> None:
    """The software the runs measured with (record/statement.py `versions`), from the run's facts and its
    ranks: a regression that comes with another NCCL is first of all that."""
    def ranks_with(nccl: str) -> dict:
        entry = result("allreduce", "n1", [verdict("busbw", 100.0, ">=", 50, "GB/s")])
        entry["pool"] = {"ranks": [{"rank": r, "nccl": nccl, "cuda": "13.0"} for r in range(2)]}
        return entry

    base = save(tmp_path / "a", [ranks_with("2.28.9")])
    now = save(tmp_path / "b", [ranks_with("2.30.7")])
    for path, driver in ((base, "580.65.06"), (now, "580.159.04")):
        lines = (path / "run.jsonl").read_text().splitlines()
        header = json.loads(lines[0])
        header["facts"]["driver"] = driver
        (path / "run.jsonl").write_text("\n".join([json.dumps(header), *lines[1:]]) + "\n")
    c = compare(load_run(base), load_run(now))
    assert c.software == [("driver", "580.65.06", "580.159.04"), ("nccl", "2.28.9", "2.30.7")]
    assert report_lines(c)[0] == "software differs: driver 580.65.06 -> 580.159.04, nccl 2.28.9 -> 2.30.7"
    same = compare(load_run(base), load_run(base))
    assert same.software == [] and not any(line.startswith("software") for line in report_lines(same))


def test_an_error_now_in_a_suite_the_baseline_did_not_run_never_exits_0(tmp_path: Path) -> None:
    """The other-suite line counted the errored item among 'not compared' before the error was looked at:
    compare exited 0 against a run that itself exits 3."""
    base = save(tmp_path / "a", [result("allreduce", "n1", [verdict("busbw", 100.0, ">=", 50, "GB/s")])])
    other = {**result("probe", "n1", [], outcome="error"), "message": "rank 1 died", "suite_file": "/x/suites/extra.yaml"}
    now = save(tmp_path / "b", [result("allreduce", "n1", [verdict("busbw", 100.0, ">=", 50, "GB/s")]), other])
    c = compare(load_run(base), load_run(now))
    assert c.unmeasured_now == [("extra::probe[n1]", "in a suite the baseline did not run, error now: rank 1 died")]
    out = cc(str(base), str(now), cwd=tmp_path)
    assert out.returncode == 3, out.stdout
    assert "NOT MEASURED NOW  extra::probe[n1]" in out.stdout

