"""A repeated run (a burn-in) as a --compare baseline, or compared by `clustercheck compare`: each item is
its worst repetition, never its last."""

from __future__ import annotations

from pathlib import Path

from clustercheck.errors import Skip
from clustercheck.record.compare import compare, load_run
from clustercheck.run.judge import Baseline
from test_compare import result, save, verdict


def _burn_in(tmp_path: Path) -> Path:
    """allreduce[n1] failed in repetition 2 (busbw 10 under its floor 50) and passed in 1 and 3."""
    reps = [(1, 100.0, "passed"), (2, 10.0, "failed"), (3, 100.0, "passed")]
    return save(tmp_path / "base", [{**result("allreduce", "n1", [verdict("busbw", v, ">=", 50, "GB/s")], outcome=o),
                                     "repeat": k} for k, v, o in reps])


def test_a_repeated_baseline_is_its_worst_repetition(tmp_path: Path) -> None:
    base = _burn_in(tmp_path)
    now = save(tmp_path / "now", [result("allreduce", "n1", [verdict("busbw", 100.0, ">=", 50, "GB/s")])])
    c = compare(load_run(base), load_run(now))
    # the failed repetition, not the last one's 100: a baseline failure is no reference, never compared
    assert c.changes == [] and c.no_reference == [
        ("gate::allreduce[n1]", "failed in the baseline: a baseline failure is no reference")]
    b = Baseline(str(base / "run.jsonl"), tmp_path, 0.05)
    old = b.items["gate::allreduce[n1]"]
    assert old["outcome"] == "failed" and old["message"].startswith("failed in repetition(s) 2 of 3")
    # a skip now of an item that failed in the baseline's repetition 2 is no 'passed in the baseline'
    assert isinstance(b.skipped_now("gate::allreduce[n1]", Skip("no tool")), Skip)
    assert any("compared with its worst repetition" in line for line in b.said("cpu", []))


def test_a_repeated_run_compared_is_its_worst_repetition(tmp_path: Path) -> None:
    base = save(tmp_path / "b", [result("allreduce", "n1", [verdict("busbw", 100.0, ">=", 50, "GB/s")])])
    c = compare(load_run(base), load_run(_burn_in(tmp_path)))
    assert [(ch.baseline, ch.current, ch.kind) for ch in c.changes] == [(100.0, 10.0, "regression")]


def test_clustercheck_compare_says_a_run_was_folded_to_its_worst_repetitions(tmp_path: Path) -> None:
    """`clustercheck compare` folded a repeated run too, but only `run --compare` said so."""
    from clustercheck.record.compare_report import report_lines

    base = save(tmp_path / "b", [result("allreduce", "n1", [verdict("busbw", 100.0, ">=", 50, "GB/s")])])
    lines = report_lines(compare(load_run(base), load_run(_burn_in(tmp_path))))
    assert ("the current run repeated (3 repetition(s)): each item is compared with its worst repetition, "
            "each metric with its worst value of them all") in lines
    assert not any(line.startswith("the baseline repeated") for line in lines)
