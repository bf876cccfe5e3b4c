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
