"""compare and run --compare on a value from 0 and on a value of this run that is no measurement: a metric
that got worse from a baseline of 0 is a regression `from 0` (never `not compared`, never an inf%), and a
value of this run that is not a number or outside its domain is NOT COMPARED, exit 3 (never a pass)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clustercheck.errors import HarnessError
from clustercheck.judging.limits import Limit
from clustercheck.judging.measurement import Measurement, Outcome
from clustercheck.judging.verdicts import Verdict
from clustercheck.kinds.base import CheckSpec
from clustercheck.record.compare import compare, load_run
from clustercheck.record.lines import check
from clustercheck.report.jsontext import json_bytes
from clustercheck.run.judge import Baseline
from test_compare import cc, result, save, verdict


def _one(tmp_path: Path, name: str, v: dict, measure: str = "all_reduce") -> Path:
    return save(tmp_path / name, [{**result("ar", "n1", [v]), "measure": measure}])


@pytest.mark.parametrize("metric, unit, limit, now", [("throttled_s", "s", 60, 45.0),  # a GPU throttled 0 s -> 45 s
                                                     ("busbw", "GB/s", 100, 60.0)])  # a `<= 100` busbw 0 -> 60
def test_a_lower_is_better_metric_that_rose_from_0_is_a_regression(tmp_path: Path, metric: str, unit: str,
                                                                   limit: float, now: float) -> None:
    """It was `not compared ... the baseline measured 0`, exit 0, however far it rose under its limit."""
    base = _one(tmp_path, "b", verdict(metric, 0.0, "<=", limit, unit))
    run = _one(tmp_path, "n", verdict(metric, now, "<=", limit, unit))
    c = compare(load_run(base), load_run(run))
    (ch,) = c.changes
    assert (ch.kind, ch.baseline, ch.current, ch.percent()) == ("regression", 0.0, now, "from 0")
    assert c.regressions == [ch] and c.not_compared == []
    out = cc(str(base), str(run), cwd=tmp_path)
    assert out.returncode == 1, out.stdout + out.stderr
    row = next(line for line in out.stdout.splitlines() if line.startswith("REGRESSION"))
    assert f"0 -> {now:g} {unit}" in row and "from 0" in row and "inf" not in out.stdout, out.stdout
    # back to 0 is an improvement of it, and 0 then and now the same: neither is a regression
    assert [x.kind for x in compare(load_run(run), load_run(base)).changes] == ["improvement"]
    assert [x.kind for x in compare(load_run(base), load_run(base)).changes] == ["same"]


def test_a_higher_is_better_metric_that_rose_from_0_is_still_not_compared(tmp_path: Path) -> None:
    """A change for the better from 0 has nothing to compare it with: named, never an infinite improvement."""
    base = _one(tmp_path, "b", verdict("busbw", 0.0, ">=", 0, "GB/s"))
    run = _one(tmp_path, "n", verdict("busbw", 60.0, ">=", 0, "GB/s"))
    c = compare(load_run(base), load_run(run))
    assert c.changes == [] and c.lost == []
    assert c.not_compared == [("gate::ar[n1]", "busbw: the baseline measured 0 GB/s, nothing to compare a change with")]


def _outcome(metric: str, measured: float | str, unit: str, op: str, value: float) -> Outcome:
    limit = Limit("ar", metric, op, value, unit, f"{op} {value}", "test", "test")
    v = Verdict(metric, measured, unit, limit, True, 0.0)
    return Outcome(Measurement({}, {}), [v], {})


def test_run_compare_fails_a_rise_from_0_with_a_finite_verdict(tmp_path: Path) -> None:
    """run --compare gave the item a note (`not compared`) and passed it; the verdict is now this run's value
    against the baseline's 0 in the metric's unit: no inf% in the record, results.json or the HTML."""
    base = _one(tmp_path, "b", verdict("throttled_s", 0.0, "<=", 60, "s"))
    spec = CheckSpec("ar", "all_reduce", "node", {}, (), 60.0, "", "s.yaml", 1)
    verdicts, notes = Baseline(str(base), tmp_path, 0.05).regressions(spec, "gate::ar[n1]",
                                                                      _outcome("throttled_s", 45.0, "s", "<=", 60))
    assert notes == ()
    (v,) = verdicts
    entry = v.as_dict()
    assert (entry["metric"], entry["measured"], entry["unit"], entry["op"], entry["limit"], entry["passed"]) == (
        "throttled_s vs baseline", 45.0, "s", "<=", 0.0, False)
    assert entry["expression"] == "throttled_s <= 0 s (from 0)" and "(from 0; lower is better" in str(entry["detail"])
    assert entry["margin"] == -45.0
    line = {"type": "result", "name": "ar[n1]", "check": "ar", "suite_file": "s.yaml", "outcome": "failed",
            "verdicts": [entry]}
    check(line, 2)  # the run's own reader takes it
    assert b"Infinity" not in json_bytes(line) and b"inf" not in json_bytes(line)


def test_this_runs_value_that_is_no_number_is_not_compared_and_never_exits_0(tmp_path: Path) -> None:
    """A "passed" verdict on text, or on a ratio outside its kind's domain, was `not compared` (lowercase),
    exit 0: what the baseline judged, this run did not measure; now NOT COMPARED, exit 3."""
    base = _one(tmp_path, "b", verdict("busbw", 100.0, ">=", 50, "GB/s"))
    text = _one(tmp_path, "t", {**verdict("busbw", 100.0, ">=", 50, "GB/s"), "measured": "abc"})
    c = compare(load_run(base), load_run(text))
    assert c.changes == [] and c.lost == [("gate::ar[n1]", "busbw: this run measured abc, not a number")]
    out = cc(str(base), str(text), cwd=tmp_path)
    assert out.returncode == 3 and "NOT COMPARED  gate::ar[n1]: busbw: this run measured abc" in out.stdout, out.stdout
    ratio = _one(tmp_path, "r", verdict("p2p_min_ratio", 0.9, ">=", 0.5, "ratio"), measure="p2p")
    above = _one(tmp_path, "a", verdict("p2p_min_ratio", 1.5, ">=", 0.5, "ratio"), measure="p2p")
    c = compare(load_run(ratio), load_run(above))
    assert c.changes == [] and len(c.lost) == 1 and "this run measured 1.5 ratio, outside 0 to 1" in c.lost[0][1], c.lost
    assert cc(str(ratio), str(above), cwd=tmp_path).returncode == 3
    # the baseline's broken value gives nothing to compare with: not compared, as a metric it did not judge
    c = compare(load_run(above), load_run(ratio))
    assert c.lost == [] and "the baseline measured 1.5 ratio" in c.not_compared[0][1]


def test_run_compare_never_passes_an_item_whose_value_is_no_number(tmp_path: Path) -> None:
    base = _one(tmp_path, "b", verdict("busbw", 100.0, ">=", 50, "GB/s"))
    spec = CheckSpec("ar", "all_reduce", "node", {}, (), 60.0, "", "s.yaml", 1)
    with pytest.raises(HarnessError, match="not judged against the baseline.*busbw: this run measured abc, not a number"):
        Baseline(str(base), tmp_path, 0.05).regressions(spec, "gate::ar[n1]", _outcome("busbw", "abc", "GB/s", ">=", 50))


def test_a_passed_verdict_out_of_its_domain_is_refused_by_the_reader(tmp_path: Path) -> None:
    """busbw -1 GB/s that says it passed was read, and compare filed it as `not compared`, exit 0; judging never
    passes it (Limit.passes), so the record is refused at its line, as a passed NaN is (exit 4)."""
    base = _one(tmp_path, "b", verdict("busbw", 50.0, "<=", 100, "GB/s"))  # a `<= 100` limit: -1 holds it
    neg = _one(tmp_path, "n", {**verdict("busbw", 50.0, "<=", 100, "GB/s"), "measured": -1.0})
    out = cc(str(base), str(neg), cwd=tmp_path)
    assert out.returncode == 4 and len(out.stderr.strip().splitlines()) == 1, out.stdout + out.stderr
    assert "line 2: result.verdicts[0]: passed with measured -1.0: a bandwidth cannot be negative (-1 GB/s)" in out.stderr
    failed = _one(tmp_path, "f", {**verdict("busbw", 50.0, "<=", 100, "GB/s"), "measured": -1.0, "passed": False})
    assert json.loads((failed / "run.jsonl").read_text().splitlines()[1])["verdicts"][0]["measured"] == -1.0
    assert cc(str(base), str(failed), cwd=tmp_path).returncode == 1  # read; it fails, and compare says so
