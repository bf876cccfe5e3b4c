"""What a collective reports beside its headline numbers: the spread of its iterations (iter_cv, iter_us) and
each row's `wrong`. Each must come from what was measured: one iteration has no spread, a row never checked
has no `#wrong 0` (the fail-closed rule, README.md)."""

from __future__ import annotations

import json
import math

import pytest

from clustercheck.kinds.collectives import iteration_problem, iteration_stats
from helpers import write_suite


def _results(p: pytest.Pytester) -> list[dict]:
    return json.loads((p.path / "out" / "latest" / "results.json").read_text())["results"]


def _profile(p: pytest.Pytester, limits: str) -> None:
    (p.path / "thresholds" / "cpu.yaml").write_text(
        f"platform: cpu\ndetect: {{gpu_count: 0}}\nchecks:\n  ar: {{{limits}}}\n")


# -- iters: 1 ------------------------------------------------------------------------------------------------

def test_one_timed_iteration_has_no_spread() -> None:
    """pstdev of one time is 0: iter_cv 0.0 passed any ceiling (`iter_cv <= 0.0001`)."""
    assert iteration_problem([[3e-6], [5e-6]], ["n1", "n2"]) == "1 timed iteration per rank: no spread"
    stats = iteration_stats([[3e-6], [5e-6]])
    assert math.isnan(stats["iter_cv"]) and "iter_us_min" not in stats
    assert iteration_problem([[3e-6, 4e-6], [5e-6, 5e-6]]) is None  # two are a spread


def test_iters_1_with_an_iter_cv_limit_is_not_judged_on_real_gloo_ranks(project: pytest.Pytester) -> None:
    write_suite(project, "checks:\n  - id: ar\n    measure: all_reduce\n    params: {sizes: [1MiB], iters: 1, "
                         "warmup: 1}\n")
    _profile(project, "iter_cv: {limit: '<= 0.0001', unit: ratio}")
    res = project.runpytest("suites/s.yaml", "--thresholds", "thresholds", "--cc-out", "out", "--ranks", "2")
    res.assert_outcomes(errors=1)  # was: 1 passed
    (r,) = _results(project)
    assert r["outcome"] == "error", r
    assert "iter_cv at 1MiB (in-place) is not judged: 1 timed iteration per rank: no spread" in r["message"], r
    assert not any(v["metric"] == "iter_cv" and v["passed"] for v in r.get("verdicts") or ()), r["verdicts"]


# -- check_iters: 0 ------------------------------------------------------------------------------------------

def test_rows_never_checked_say_no_wrong_count_on_real_gloo_ranks(project: pytest.Pytester) -> None:
    """check_iters: 0 compared nothing, yet every row said `wrong: 0` (results.json, the report's #wrong column):
    checked and clean. Now None, as nccl-tests prints N/A; the headline `wrong` stays dropped."""
    write_suite(project, "checks:\n  - id: ar\n    measure: all_reduce\n    params: {sizes: [1KiB, 1MiB], iters: 3, "
                         "warmup: 1, check_iters: 0}\n")
    _profile(project, "busbw: {limit: '>= 0.000001', unit: GB/s}")
    res = project.runpytest("suites/s.yaml", "--thresholds", "thresholds", "--cc-out", "out", "--ranks", "2")
    res.assert_outcomes(passed=1)
    (r,) = _results(project)
    assert len(r["rows"]) == 2 and all(row["wrong"] is None and row["wrong_ranks"] == [] for row in r["rows"]), r["rows"]
    assert "wrong" not in r["metrics"] and any("correctness not checked (check_iters: 0)" in n for n in r["notes"])
    run = project.path / "out" / "latest"
    for name in ("sla.json", "ctrf.json", "junit.xml", "report.html"):  # every writer took the None
        assert (run / name).stat().st_size > 0, name


def test_a_rank_that_did_not_count_when_asked_to_fails_wrong_naming_it() -> None:
    """None where check_iters asked for a count (a rank that skipped the check) is no count: NaN, named."""
    from clustercheck.kinds.collectives import reduce_collective

    def rank(wrong: object) -> dict:
        return {"dtype": "float32", "rows": [{"size": 1 << 20, "count": 1 << 18, "bytes": 1 << 20, "placement": "in",
                                             "seconds": 1e-3, "wrong": wrong, "iter_seconds": [1e-3] * 3}]}

    m = reduce_collective("all_reduce", [rank(0), rank(None)], ["n1", "n2"], 1 << 20)
    assert math.isnan(m.rows[0]["wrong"]) and m.rows[0]["wrong_ranks"] == [1] and math.isnan(m.metrics["wrong"])
    assert "rank 1 (n2): wrong None" in m.worst_of["wrong"]
    m = reduce_collective("all_reduce", [rank(0), rank(0)], ["n1", "n2"], 1 << 20, checked=False)
    assert m.rows[0]["wrong"] is None and m.rows[0]["wrong_ranks"] == [] and "wrong" not in m.metrics
