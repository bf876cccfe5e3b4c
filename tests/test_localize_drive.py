"""A localize group's outcome from its ranks' all_reduce rows (clustercheck.localize.drive): wrong elements
at any size fail the group, the check's `judge_at` row is read (never the largest size instead), and rows
that cannot be paired or judged are no result naming why, never a crash out of the round. Real
components: the planner, clustercheck.localize.check, the row checks the collectives' judge runs; the
answers are the shape the all_reduce runner's ranks give (clustercheck.measure.collectives)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Callable

import pytest

from clustercheck.localize.check import localize
from clustercheck.localize.drive import all_reduce_busbw, group_outcomes

sys.path.insert(0, str(Path(__file__).resolve().parent))
from joining import LIMITS, results as run_results  # noqa: E402
from test_hosts_agents import run as run_hosts  # noqa: E402

MIB, GIB = 1 << 20, 1 << 30
NODES = ["a", "b", "c", "d"]
RANKS_OF = {n: [i] for i, n in enumerate(NODES)}


def row(size: int, gbps: float, n: int = 2, wrong: int | None = 0) -> dict[str, Any]:
    """One rank's row at `size` for a group of `n` ranks reading `gbps` GB/s busbw (algbw x 2(n-1)/n)."""
    return {"size": size, "count": size // 4, "bytes": size, "placement": "in",
            "seconds": size / 1e9 / gbps * 2 * (n - 1) / n, "iter_seconds": [], "wrong": wrong}


def answer(*rows: dict[str, Any]) -> dict[str, Any]:
    return {"rows": list(rows), "dtype": "float32"}


def fabric(rank_rows: Callable[[int, int], list[dict[str, Any]]]) -> Callable[[list[list[int]]], dict[int, Any]]:
    """The localize check's `run`: each rank of each group answers `rank_rows(rank, group size)`."""
    return lambda groups: {r: answer(*rank_rows(r, len(g))) for g in groups for r in g}


def test_wrong_elements_at_a_smaller_size_fail_the_group() -> None:
    """Only the largest size's `wrong` was read: 3 wrong elements at 1 MiB passed the group (and cleared
    its nodes) because 1 GiB came back right."""
    right = answer(row(MIB, 10.0), row(GIB, 10.0))
    wrong = answer(row(MIB, 10.0, wrong=3), row(GIB, 10.0))
    assert all_reduce_busbw([right, wrong]) is False
    assert all_reduce_busbw([right, right]) == pytest.approx(10.0)


def test_a_node_counting_wrong_elements_at_a_smaller_size_is_named_not_cleared() -> None:
    """d's rank counts 2 wrong elements at 1 MiB in every group, fast and right at 1 GiB: d is named bad
    with its evidence `wrong results`; before, every group passed and d was cleared."""
    items, rows = localize(NODES, RANKS_OF, 1.0, fabric(
        lambda r, n: [row(MIB, 10.0, n, wrong=2 if r == 3 else 0), row(GIB, 10.0, n)]), "fabric")
    assert [v.passed for v in items["d"][0]] == [False], items["d"]
    assert "wrong results" in items["d"][1]
    assert all(items[n][0] and items[n][0][0].passed for n in "abc"), items


def test_the_judged_size_is_read_not_a_faster_larger_one() -> None:
    """judge_at 1 GiB, where the group reads 5 GB/s; 8 GiB reads 50 GB/s. The floor written for 1 GiB was
    applied to the 8 GiB reading."""
    a = answer(row(GIB, 5.0), row(8 * GIB, 50.0))
    assert all_reduce_busbw([a, a], judge_at=GIB) == pytest.approx(5.0)
    assert all_reduce_busbw([a, a]) == pytest.approx(50.0)  # no judge_at: the largest, as before


def test_the_check_judges_its_judge_at_row_against_the_floor() -> None:
    """Through clustercheck.localize.check: a 10 GB/s floor for judge_at 1 GiB, where every group reads
    5 GB/s (50 GB/s at 8 GiB). No node passes and the cluster item fails: every group failed."""
    items, rows = localize(NODES, RANKS_OF, 10.0, fabric(lambda r, n: [row(GIB, 5.0, n), row(8 * GIB, 50.0, n)]),
                           "fabric", judge_at=GIB)
    assert not any(v.passed for n in NODES for v in items[n][0]), items
    assert [v.measured for v in items[None][0]] == ["every group failed"], items[None]
    assert rows and all(r["busbw"] == pytest.approx(5.0) for r in rows), rows


def test_a_group_without_a_row_at_the_judged_size_gives_no_result() -> None:
    a = answer(row(MIB, 5.0))
    said: dict[int, str] = {}
    assert group_outcomes([[0, 1]], {0: a, 1: a}, lambda x, h: all_reduce_busbw(x, h, judge_at=GIB), said=said) \
        == [None]
    assert said == {0: "no row at the judged size 1GiB (rows at 1MiB)"}


def test_a_rank_answering_no_rows_is_no_result_for_its_group_named_not_a_crash() -> None:
    """b's rank answers `rows: []`: max() of nothing raised ValueError out of the round (a traceback, an
    internal error). Now each group with b gives no result saying which rank; the others are judged."""
    def run(groups: list[list[int]]) -> dict[int, Any]:
        return {r: answer() if r == 1 else answer(row(MIB, 10.0, len(g))) for g in groups for r in g}

    items, rows = localize(NODES, RANKS_OF, 1.0, run, "fabric")
    assert items["b"][0] == [] and items["b"][1].startswith("not judged: its groups gave no result ("), items["b"]
    assert "answered" in items["b"][1] and "pool rank 1 on b" in items["b"][1], items["b"]
    assert all(items[n][0] and items[n][0][0].passed for n in "acd"), items
    assert items[None][0] == [] and "gave no result" in items[None][1], items[None]
    assert any(r["outcome"] == "no result" and "b" in r["members"] for r in rows)


def test_group_outcomes_say_why_and_name_the_rank_and_node() -> None:
    good = answer(row(MIB, 10.0))
    said: dict[int, str] = {}
    out = group_outcomes([[0, 1], [2, 3]], {0: good, 1: good, 2: good, 3: {"rows": []}}, all_reduce_busbw,
                         hosts={0: "a", 1: "b", 2: "c", 3: "d"}, said=said)
    assert out[0] == pytest.approx(10.0) and out[1] is None
    assert said == {1: "rank 1 (pool rank 3 on d) answered rows for none; rank 0 answered 1MiB in: its times "
                       "cannot be paired with the other ranks', not judged"}


@pytest.mark.parametrize("wrong", [-5, float("nan"), "3", True, None])
def test_a_wrong_that_is_no_count_is_no_result_not_a_reading(wrong: object) -> None:
    """Where elements were compared, a `wrong` that is no count cannot say the group was right: no result
    naming the rank (never a pass, and never a node blamed for the harness's answer)."""
    bad = answer(row(MIB, 10.0, wrong=wrong))  # type: ignore[arg-type]
    said: dict[int, str] = {}
    assert group_outcomes([[0, 1]], {0: answer(row(MIB, 10.0)), 1: bad}, all_reduce_busbw, said=said) == [None]
    assert said[0].startswith("rank 1 (pool rank 1) answered wrong ") and "at 1MiB: no count" in said[0], said


def test_check_iters_0_reads_the_bandwidth_without_a_wrong() -> None:
    """check_iters: 0 compares nothing: each row's `wrong` is None, which is no failure and no refusal."""
    a = answer(row(MIB, 10.0, wrong=None))
    assert all_reduce_busbw([a, a], checked=False) == pytest.approx(10.0)


@pytest.mark.pool
def test_a_localize_run_with_check_iters_0_and_a_judged_size_passes_on_loopback(tmp_path: Path) -> None:
    """`clustercheck run` on two hosts, fabric localized with check_iters: 0 and judge_at the smaller of
    two sizes: the runner hands the check's judge_at and check_iters to the rounds, so the rows' `wrong`
    None (nothing compared) is no refusal and the judged row exists; every item passes."""
    (tmp_path / "th").mkdir()
    (tmp_path / "th" / "cpu.yaml").write_text(
        LIMITS + "  fabric:\n    busbw: {limit: '>= 0.000001', unit: GB/s, source: any working loopback}\n")
    (tmp_path / "s.yaml").write_text(
        "checks:\n  - id: fabric\n    measure: all_reduce\n    scope: localize\n"
        "    params: {sizes: [64KiB, 128KiB], judge_at: 64KiB, iters: 2, warmup: 1, check_iters: 0}\n")
    ctl = run_hosts(tmp_path, hosts="h[1-2]")
    out, _ = ctl.communicate(timeout=300)
    outcome = {r["name"]: r for r in run_results(tmp_path)["results"]}
    for name in ("fabric[h1]", "fabric[h2]", "fabric"):
        assert outcome[name]["outcome"] == "passed", (name, outcome[name], out[-3000:])
    assert "Traceback" not in out
