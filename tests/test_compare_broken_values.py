"""compare and run --compare on a value of this run that is no measurement: one that is not a number or
outside its domain is NOT COMPARED, exit 3 (never a pass)."""

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
from clustercheck.run.judge import Baseline
from test_compare import cc, result, save, verdict


def _one(tmp_path: Path, name: str, v: dict, measure: str = "all_reduce") -> Path:
    return save(tmp_path / name, [{**result("ar", "n1", [v]), "measure": measure}])


def _outcome(metric: str, measured: float | str, unit: str, op: str, value: float) -> Outcome:
    limit = Limit("ar", metric, op, value, unit, f"{op} {value}", "test", "test")
    v = Verdict(metric, measured, unit, limit, True, 0.0)
    return Outcome(Measurement({}, {}), [v], {})


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
