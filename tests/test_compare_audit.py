"""Faults an audit of compare found: each test failed before its fix."""

from __future__ import annotations

import time
from pathlib import Path

from clustercheck.record.compare import compare, load_run
from test_compare import result, save, verdict


def _per_gpu(n: int, value: float) -> dict:
    """One cluster item with n per-GPU busbw verdicts and a row of samples for each."""
    vs = [{**verdict("busbw", value, ">=", 1, "GB/s"), "subject": f"GPU{i}"} for i in range(n)]
    rows = [{"subject": f"GPU{i}", "metric": "busbw", "min": value * 0.99, "max": value * 1.01, "median": value}
            for i in range(n)]
    return {**result("h2d", None, vs), "rows": rows}


def test_compare_is_linear_in_the_subjects_of_an_item(tmp_path: Path) -> None:
    """spread() scanned every row for each per-GPU verdict: 8000 subjects took seconds (quadratic)."""
    def took(n: int) -> float:
        base = save(tmp_path / f"b{n}", [_per_gpu(n, 100.0)])
        now = save(tmp_path / f"n{n}", [_per_gpu(n, 100.0)])
        b, c = load_run(base), load_run(now)
        start = time.perf_counter()
        assert len(compare(b, c).changes) == n
        return time.perf_counter() - start
    small, large = took(1000), took(8000)
    assert large < 2.0 and large < small * 8 * 3, (small, large)  # linear: 8x the subjects, ~8x the time
