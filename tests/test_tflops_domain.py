"""A rank's TFLOP/s out of any device's reach (1e308, 0, below 0) is a timer or harness fault, never a
measurement: burn and gemm refuse it as a harness error naming the rank, node and GPU (not judged), by one
rule (units.device_tflops_problem), for the sustained figure and the slowest and fastest chunk or sample."""

from __future__ import annotations

from typing import Any

import re

import pytest

from clustercheck import units
from clustercheck.errors import HarnessError
from clustercheck.judging.limits import Limit
from clustercheck.kinds import KINDS
from clustercheck.kinds.base import Answers, Rules
from clustercheck.run.judge import judge
from tests.test_kinds_hostile_answers import burned, spec, spread

FLOOR = {"tflops": Limit("x", "tflops", ">=", 500.0, "TFLOP/s", ">= 500", "test", "test")}
OUT = ["1e308", "0", "-5", "1.5e6"]


def burn(per_rank: list[Any]) -> Any:
    ranks = [{"host": "n1", "rank": i} for i in range(len(per_rank))]
    return judge(Answers(spec("burn", {"duration": 1}), per_rank, ranks, "nccl"), Rules(FLOOR), {})


def gemm(per_rank: list[Any]) -> Any:
    ranks = [{"host": "n1", "rank": i} for i in range(len(per_rank))]
    return judge(Answers(spec("gemm", {"m": 64}, "gpu"), per_rank, ranks, "nccl"), Rules(FLOOR), {})


def test_the_bound_is_one_exaflops_a_device_and_a_real_figure_is_inside_it() -> None:
    assert units.DEVICE_TFLOPS_MAX == 1e6
    assert [units.device_tflops_problem(v) for v in (0.05, 707.0, 1252.0, 1e6)] == [None] * 4
    assert "is above 1000000 (1 EFLOP/s)" in (units.device_tflops_problem(1e308) or "")
    assert "at or below 0" in (units.device_tflops_problem(0.0) or "")


@pytest.mark.parametrize("key", ["tflops", "tflops_min", "tflops_max"])
@pytest.mark.parametrize("value", OUT)
def test_a_burn_rank_answering_tflops_out_of_any_device_is_a_harness_error(key: str, value: str) -> None:
    # a timer that read ~0 s: 1e308 TFLOP/s passed `>= 500` and the node's `relative` (the best of the node)
    with pytest.raises(HarnessError, match=f"burn x: rank 1 on n1 answered {key} for n1 GPU1 out of its domain "
                                           f"\\({re.escape(f'{float(value):.4g}')} TFLOP/s .*\\): not judged"):
        burn([burned("n1", "GPU0", 0), burned("n1", "GPU1", 1, **{key: float(value)})])


@pytest.mark.parametrize("stat", ["median", "min", "max"])
@pytest.mark.parametrize("value", OUT)
def test_a_gemm_rank_answering_tflops_out_of_any_device_is_a_harness_error(stat: str, value: str) -> None:
    bad = {**spread(700.0), stat: float(value)}
    with pytest.raises(HarnessError, match=f"gemm x: rank 1 on n1 answered tflops {stat} for GPU1 out of its "
                                           f"domain \\({re.escape(f'{float(value):.4g}')} TFLOP/s .*\\): not judged"):
        gemm([{"subjects": {"GPU0": {"tflops": spread(700.0)}}}, {"subjects": {"GPU1": {"tflops": bad}}}])


def test_healthy_burn_and_gemm_answers_are_judged_as_before() -> None:
    assert all(v.passed for v in burn([burned("n1", "GPU0", 0), burned("n1", "GPU1", 1)]).verdicts)
    out = gemm([{"subjects": {"GPU0": {"tflops": spread(700.0)}}}, {"subjects": {"GPU1": {"tflops": spread(400.0)}}}])
    assert sorted((v.subject, v.passed) for v in out.verdicts) == [("GPU0", True), ("GPU1", False)]
    # an older record's rows may keep only the median: judged on it (record/rebuild.py)
    only = KINDS["gemm"].judge(Answers(spec("gemm", {"m": 64}, "gpu"), [{"subjects": {"GPU0": {"tflops": {
        "median": 700.0}}}}], [{"host": "n1", "rank": 0}], "nccl"), Rules(FLOOR))
    assert [v.passed for v in only[1]] == [True]
