"""Judges against ranks' answers no healthy rank writes (a missing key, a string for a number, two ranks
answering for one GPU, a rank answering nothing): each is a named harness error, a failed verdict or a
`not judged`, never a pass, a traceback or silence (the fail-closed rule, README.md)."""

from __future__ import annotations

from typing import Any

import pytest

from clustercheck.errors import HarnessError
from clustercheck.kinds import KINDS
from clustercheck.kinds.base import Answers, CheckSpec, Rules
from clustercheck.run.judge import judge
from clustercheck.schema import Fields


def spec(measure: str, params: dict[str, Any], scope: str = "node") -> CheckSpec:
    kind = KINDS[measure]
    return CheckSpec("x", measure, scope, kind.parse(Fields(params, "s.yaml", "checks[0].params")), (), 60.0, "",
                     "s.yaml", 1)


def nccl_ran(**over: Any) -> dict[str, Any]:
    """What the node's first rank answers after all_reduce_perf ran (measure/native.py), with `over` on top."""
    return {"host": "node7", "binary": "all_reduce_perf", "argv": ["all_reduce_perf"], "outcome": "ran",
            "returncode": 0, "timed_out": False, "timeout": 54.0, "seconds": 1.0, "stdout": "", "stdout_bytes": 0,
            "truncated": False, "stderr_tail": "", **over}


# -- 1. a judge that cannot read the answers: one line for that item -------------------------------------

def test_an_answer_a_judge_cannot_read_is_one_harness_error_line_naming_the_check_and_hosts() -> None:
    broken = nccl_ran()
    del broken["truncated"]  # the kind's judge reads it: a KeyError inside the judge
    answers = Answers(spec("nccl_tests", {}), [broken, {}], [{"host": "node7"}, {"host": "node8"}], "nccl")
    with pytest.raises(HarnessError) as caught:
        judge(answers, Rules({}), {})
    assert str(caught.value) == "x on node[7-8]: the ranks' answers cannot be judged (KeyError: 'truncated')"


# -- 2. a bool or a string is no measurement -------------------------------------------------------------

@pytest.mark.parametrize("value", [True, False, "1", None])
def test_a_bool_or_a_string_is_not_a_number_and_passes_no_limit(value: Any) -> None:
    from clustercheck import units
    from clustercheck.judging.limits import Limit

    assert units.out_of_domain(value, "GB/s") == f"{value!r} is not a number"
    assert units.out_of_domain(value, "ratio") == f"{value!r} is not a number"  # a family with any sign
    at_least = Limit("x", "h2d", ">=", 0.5, "GB/s", ">= 0.5", "test", "test")
    assert at_least.passes(value) is False  # True >= 0.5 held; "1" >= 0.5 raised TypeError
