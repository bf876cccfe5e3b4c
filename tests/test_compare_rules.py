"""compare judges what changed beyond noise, and exits by the table: 2 for an INCOMPLETE run, 1 for a
regression, a verdict that became failed or a #wrong that rose, 5 when nothing was comparable; report and
compare share the record reader's refusals, and a record's odd numbers never end in a traceback."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from test_compare import result, save, verdict


def cc(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "clustercheck", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=120)


def collective(name: str, busbw: float, time_us: float, cv: float, judged_at: int = 16 << 20,
               wrong: float = 0, outcome: str = "passed") -> dict:
    r = result(name, "vm", [verdict("busbw", busbw, ">=", 0.05, "GB/s"), verdict("time_us", time_us, "<=", 50000, "us"),
                            verdict("wrong", wrong, "==", 0, "count")], outcome=outcome)
    r["metrics"] = {"iter_cv": {"value": cv, "unit": "ratio"}, "busbw": {"value": busbw, "unit": "GB/s"}}
    r["judged_at"] = judged_at
    return r


def test_two_runs_of_a_noisy_machine_are_not_a_regression(tmp_path: Path) -> None:
    """Two cpu-smoke runs back to back: busbw 20% apart with a 20% CV of the baseline's iterations is noise
    (its spread +-40%, counted up to +-25%); the time at 8 bytes, +50%, is latency that its limit judges."""
    base = save(tmp_path / "a", [collective("sweep", 1.0, 16000, 0.2), collective("lat", 0.0, 673.2, 0.5, judged_at=8)])
    now = save(tmp_path / "b", [collective("sweep", 0.8, 19000, 0.18), collective("lat", 0.0, 1015.0, 0.4, judged_at=8)])
    out = cc("compare", str(base), str(now), cwd=tmp_path)
    assert out.returncode == 0, out.stdout
    assert "REGRESSION" not in out.stdout
    assert out.stdout.splitlines()[-1] == ("4 metric(s) compared at tolerance 5%: 0 regression(s), 0 improvement(s), "
                                           "2 within the baseline's own spread, 1 latency left to its limit, 0 not compared")
    shown = cc("compare", str(base), str(now), "--all", cwd=tmp_path).stdout
    assert any(l.startswith("noise") and "gate::sweep[vm]" in l and "busbw" in l and "the baseline's own spread +-40.0%, counted as a factor up to 1.25x: -20.0%..+25.0%" in l
               for l in shown.splitlines())
    assert any(l.startswith("latency") and "time_us" in l and "judged by its limit only" in l
               for l in shown.splitlines())
    # the same drop on a quiet machine (CV 1%) is a regression
    quiet = save(tmp_path / "c", [collective("sweep", 0.8, 19000, 0.01), collective("lat", 0.0, 1015.0, 0.01, judged_at=8)])
    base_quiet = save(tmp_path / "d", [collective("sweep", 1.0, 16000, 0.01), collective("lat", 0.0, 673.2, 0.01, judged_at=8)])
    out = cc("compare", str(base_quiet), str(quiet), cwd=tmp_path)
    assert out.returncode == 1 and "REGRESSION  gate::sweep[vm]  busbw" in out.stdout


@pytest.mark.parametrize("bad", ["5", "1", "12.5"])
def test_a_bare_tolerance_of_one_or_more_is_refused(tmp_path: Path, bad: str) -> None:
    base = save(tmp_path / "a", [collective("sweep", 1.0, 16000, 0.01)])
    out = cc("compare", str(base), str(base), "--tolerance", bad, cwd=tmp_path)
    assert out.returncode == 4 and f"write {bad}% for a percentage" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
    again = save(tmp_path / "b", [collective("sweep", 1.0, 16000, 0.01)])  # another run: a run against itself is refused
    assert cc("compare", str(base), str(again), "--tolerance", f"{bad}%", cwd=tmp_path).returncode == 0
    assert cc("compare", str(base), str(again), "--tolerance", "0.05", cwd=tmp_path).returncode == 0


def test_runs_of_different_suites_are_named_in_one_line_and_exit_5(tmp_path: Path) -> None:
    """Suites that differ are one line; what only one run has is counted there, not listed, and with nothing
    in common nothing was judged (5); but never what passed in the baseline and this run dropped (3, below)."""
    base = save(tmp_path / "a", [collective(f"c{i}", 1.0, 1.0, 0.0, outcome="skipped") for i in range(36)])
    now = save(tmp_path / "b", [collective("sweep", 1.0, 1.0, 0.0)])
    text = (now / "run.jsonl").read_text().replace("/x/suites/gate.yaml", "/x/suites/node-health.yaml")
    (now / "run.jsonl").write_text(text)
    out = cc("compare", str(base), str(now), cwd=tmp_path)
    assert out.returncode == 5, out.stdout
    lines = out.stdout.splitlines()
    assert lines[2] == ("suites differ: the baseline ran gate, this run node-health (37 item(s) of a suite only one run "
                        "ran are not compared)")
    assert not any(l.startswith(("not compared", "NOT MEASURED NOW")) for l in lines)


def in_suite(r: dict, stem: str) -> dict:
    return {**r, "suite_file": f"/x/suites/{stem}.yaml"}


def planned(run: Path, selection: dict) -> None:
    """Give a saved run the plan line a run writes, with the selection (-k, --deselect) it planned."""
    lines = (run / "run.jsonl").read_text().splitlines(keepends=True)
    items = [{"name": json.loads(l)["name"], "suite_file": json.loads(l)["suite_file"]} for l in lines[1:-1]]
    plan = json.dumps({"type": "plan", "items": items, "selection": selection}, sort_keys=True) + "\n"
    (run / "run.jsonl").write_text("".join([lines[0], plan, *lines[1:]]))


def test_a_suite_the_baseline_ran_and_this_run_did_not_is_not_measured_now(tmp_path: Path) -> None:
    """A suite dropped from the run (a CI edit, a renamed suite file) is no pass of the items that passed in
    it: each is NOT MEASURED NOW, exit 3, as an item missing from a suite both runs ran; what was skipped
    there is only counted. Items of a suite only this run ran are counted, as before (exit 0)."""
    gate = collective("sweep", 1.0, 16000, 0.01)
    base = save(tmp_path / "a", [gate, in_suite(collective("soak", 1.0, 16000, 0.01), "burn-in"),
                                 in_suite(collective("idle", 1.0, 16000, 0.01, outcome="skipped"), "burn-in")])
    now = save(tmp_path / "b", [collective("sweep", 1.0, 16000, 0.01)])
    out = cc("compare", str(base), str(now), cwd=tmp_path)
    assert out.returncode == 3, out.stdout
    lines = out.stdout.splitlines()
    assert lines[2] == ("suites differ: the baseline ran burn-in, gate, this run gate (1 item(s) of a suite only one "
                        "run ran are not compared)")
    assert [l for l in lines if l.startswith("NOT MEASURED NOW")] == [
        "NOT MEASURED NOW  burn-in::soak[vm]: passed in the baseline, in a suite this run did not run"]
    assert lines[-1].endswith("1 item(s) not measured now, 0 not compared")
    # the other way round: what only this run measured is no loss (counted in the suites line)
    back = cc("compare", str(now), str(base), cwd=tmp_path)
    assert back.returncode == 0, back.stdout
    assert "(2 item(s) of a suite only one run ran are not compared)" in back.stdout
    assert "NOT MEASURED NOW" not in back.stdout


def test_a_selection_that_left_out_a_suite_is_not_measured_now_as_in_a_suite_both_ran(tmp_path: Path) -> None:
    """A run that selected (-k) fewer items than its suites hold says so in its plan, and its reports say the
    rest were not measured: compare holds it to what passed in the baseline all the same, whether the items
    left out are of a suite it ran (gate::lat) or of a suite none of whose items it selected (burn-in)."""
    base = save(tmp_path / "a", [collective("sweep", 1.0, 16000, 0.01), collective("lat", 1.0, 16000, 0.01),
                                 in_suite(collective("soak", 1.0, 16000, 0.01), "burn-in")])
    now = save(tmp_path / "b", [collective("sweep", 1.0, 16000, 0.01)])
    planned(now, {"selected": 1, "collected": 3, "deselected": ["gate::lat[vm]", "burn-in::soak[vm]"], "more": 0})
    out = cc("compare", str(base), str(now), cwd=tmp_path)
    assert out.returncode == 3, out.stdout
    assert [l for l in out.stdout.splitlines() if l.startswith("NOT MEASURED NOW")] == [
        "NOT MEASURED NOW  gate::lat[vm]: passed in the baseline, not in this run",
        "NOT MEASURED NOW  burn-in::soak[vm]: passed in the baseline, in a suite this run did not run"]


def test_a_wrong_count_that_rose_or_a_verdict_that_failed_now_exits_1(tmp_path: Path) -> None:
    base = save(tmp_path / "a", [collective("sweep", 1.0, 16000, 0.0, wrong=2, outcome="failed")])
    now = save(tmp_path / "b", [collective("sweep", 1.0, 16000, 0.0, wrong=5, outcome="failed")])
    out = cc("compare", str(base), str(now), cwd=tmp_path)
    assert out.returncode == 1 and "FAILED NOW  gate::sweep[vm]: wrong rose: 2 -> 5 wrong element(s)" in out.stdout
    assert "improvement" not in out.stdout.splitlines()[-2]
    fine = save(tmp_path / "c", [collective("sweep", 1.0, 16000, 0.0)])
    out = cc("compare", str(fine), str(base), cwd=tmp_path)
    assert out.returncode == 1 and "wrong passed in the baseline (0), fails now (2 count" in out.stdout


@pytest.mark.parametrize("which", ["baseline", "run"])
def test_an_incomplete_run_on_either_side_exits_2(tmp_path: Path, which: str) -> None:
    base = save(tmp_path / "a", [collective("sweep", 1.0, 16000, 0.0)])
    now = save(tmp_path / "b", [collective("sweep", 1.0, 16000, 0.0)])
    cut = base if which == "baseline" else now
    lines = (cut / "run.jsonl").read_text().splitlines()
    (cut / "run.jsonl").write_text("\n".join(lines[:-1]) + "\n")  # killed: no end line
    out = cc("compare", str(base), str(now), cwd=tmp_path)
    assert out.returncode == 2
    assert f"INCOMPLETE: the {which} " in out.stderr and "no end line" in out.stderr


@pytest.mark.parametrize("schema", ["2", "0", "-1", str(10**30), None, "true", '"1"'])
def test_report_and_compare_refuse_the_same_schemas(tmp_path: Path, schema: str | None) -> None:
    run = save(tmp_path / "r", [collective("sweep", 1.0, 16000, 0.0)])
    lines = (run / "run.jsonl").read_text().splitlines()
    header = json.loads(lines[0])
    header.pop("schema")
    text = json.dumps(header)
    if schema is not None:
        text = text[:-1] + f', "schema": {schema}}}'
    (run / "run.jsonl").write_text("\n".join([text, *lines[1:]]) + "\n")
    for args in (("report", str(run)), ("compare", str(run), str(run))):
        out = cc(*args, cwd=tmp_path)
        assert out.returncode == 4, (args, out.stderr)
        assert len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr
        assert "this clustercheck reads schema 1" in out.stderr


@pytest.mark.parametrize("measured", ["Infinity", "-Infinity", "NaN", '"abc"', "1e400"])
def test_odd_measured_values_never_end_in_a_traceback(tmp_path: Path, measured: str) -> None:
    base = save(tmp_path / "a", [collective("sweep", 1.0, 16000, 0.0)])
    now = save(tmp_path / "b", [collective("sweep", 1.0, 16000, 0.0)])
    text = (now / "run.jsonl").read_text().replace('"measured": 1.0', f'"measured": {measured}')
    (now / "run.jsonl").write_text(text)
    out = cc("compare", str(base), str(now), cwd=tmp_path)
    assert "Traceback" not in out.stderr, out.stderr
    if measured == '"abc"':
        # a value of this run that is no number: what the baseline judged is not judged now, never a pass
        assert out.returncode == 3 and "NOT COMPARED  gate::sweep[vm]: busbw: this run measured abc, not a number" \
            in out.stdout, out.stdout
    else:  # a verdict that passed on a value judging never passes: a record edited by hand, refused by its line
        assert out.returncode == 4 and len(out.stderr.splitlines()) == 1, out.stderr
        assert "line 2: result.verdicts[0]: passed with measured" in out.stderr
    out = cc("report", str(now), cwd=tmp_path)
    assert "Traceback" not in out.stderr and out.returncode in (0, 1, 4), out.stderr


def test_report_when_a_report_path_is_a_directory_is_one_line(tmp_path: Path) -> None:
    run = save(tmp_path / "r", [collective("sweep", 1.0, 16000, 0.0)])
    text = (run / "run.jsonl").read_text().replace('"thresholds": {}', '"thresholds": {"file": "t.yaml", "sha256": ""}')
    (run / "run.jsonl").write_text(text)
    (run / "results.json").mkdir()
    out = cc("report", str(run), cwd=tmp_path)
    assert out.returncode == 4 and "Traceback" not in out.stderr
    assert out.stderr.strip().splitlines() == [f"clustercheck: error: {run / 'results.json'}: cannot write the report "
                                               "(Is a directory); reports left as they were"]
    assert not [p for p in run.iterdir() if p.name.startswith(".")]  # no temporary file left
