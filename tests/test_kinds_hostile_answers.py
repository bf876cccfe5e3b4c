"""Judges against ranks' answers no healthy rank writes (a missing key, a string for a number, two ranks
answering for one GPU, a rank answering nothing): each is a named harness error, a failed verdict or a
`not judged`, never a pass, a traceback or silence (the fail-closed rule, README.md)."""

from __future__ import annotations

from typing import Any

import pytest

from clustercheck.errors import HarnessError, NotMeasured
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


# -- 3. per-subject kinds: every rank answers its own subjects, in full ---------------------------------

def spread(value: Any) -> dict[str, Any]:
    return {"median": value, "min": value, "max": value}


TWO_GPUS = [{"host": "n1", "rank": 0, "device": "cuda:0"}, {"host": "n1", "rank": 1, "device": "cuda:1"}]
BOTH = {"h2d": spread(20.0), "d2h": spread(20.0)}


def host_device(per_rank: list[Any], ranks: list[dict[str, Any]] = TWO_GPUS) -> Any:
    from clustercheck.judging.limits import Limit

    limits = {m: Limit("x", m, ">=", 10.0, "GB/s", ">= 10", "test", "test") for m in ("h2d", "d2h")}
    return judge(Answers(spec("host_device", {"size": "1MiB"}, "gpu"), per_rank, ranks, "nccl"), Rules(limits), {})


def test_two_healthy_gpus_each_answering_their_own_subject_pass() -> None:
    out = host_device([{"subjects": {"GPU0": BOTH}}, {"subjects": {"GPU1": BOTH}}])
    assert sorted((v.subject, v.metric, v.passed) for v in out.verdicts) == [
        ("GPU0", "d2h", True), ("GPU0", "h2d", True), ("GPU1", "d2h", True), ("GPU1", "h2d", True)]


@pytest.mark.parametrize("per_rank, ranks, message", [
    # two ranks answering GPU0: the merge kept the second (good) and hid the first's 1e-9 GB/s; the run passed
    ([{"subjects": {"GPU0": {"h2d": spread(1e-9), "d2h": spread(1e-9)}}}, {"subjects": {"GPU0": BOTH}}], TWO_GPUS,
     "host_device x: GPU0 answered by rank 0 on n1 and by rank 1 on n1: two ranks bound to one device"),
    ([{"subjects": {"GPU0": BOTH}}, {"subjects": {}}], TWO_GPUS, "rank 1 on n1 answered no subject"),
    ([{"subjects": {"GPU0": BOTH}}], TWO_GPUS, "1 answer\\(s\\) from the 2 rank\\(s\\) on n1"),
    ([{"subjects": {"GPU0": BOTH}}, {"subjects": {"GPU1": {"h2d": spread(20.0)}}}], TWO_GPUS,
     "rank 1 on n1 answered no number for GPU1 d2h \\(no d2h\\)"),
    ([{"subjects": {"GPU0": BOTH}}, {"subjects": {"GPU1": {**BOTH, "d2h": 20.0}}}], TWO_GPUS,
     "rank 1 on n1 answered no number for GPU1 d2h \\(20.0\\)"),
    ([{"subjects": {"GPU0": BOTH}}, {"subjects": {"GPU1": {**BOTH, "h2d": spread(True)}}}], TWO_GPUS,
     "rank 1 on n1 answered no number for GPU1 h2d \\(median True\\)"),
])
def test_a_subject_answered_twice_missing_or_without_a_number_is_a_harness_error_naming_rank_host_and_gpu(
        per_rank: list[Any], ranks: list[dict[str, Any]], message: str) -> None:
    with pytest.raises(HarnessError, match=message):
        host_device(per_rank, ranks)


def test_one_subject_on_two_nodes_cannot_be_judged_apart() -> None:
    gemm = spec("gemm", {"m": 64})
    ranks = [{"host": "n1", "rank": 0}, {"host": "n2", "rank": 1}]
    answers = [{"subjects": {"GPU0": {"tflops": spread(1.0)}}}, {"subjects": {"GPU0": {"tflops": spread(90.0)}}}]
    with pytest.raises(HarnessError, match="GPU0 answered by rank 0 on n1 and by rank 1 on n2: one subject on two"):
        KINDS["gemm"].judge(Answers(gemm, answers, ranks, "nccl"), Rules({}))


# -- 4. burn: every rank's answer, once per GPU; a temperature within what a GPU can read -----------------

def burned(host: str, subject: str, rank: int, **over: Any) -> dict[str, Any]:
    """A rank's answer as measure.burn returns it (a healthy GPU, watched), with `over` on top."""
    watch = {"samples": 10, "errors": [], "error_count": 0, "temp_max": 71.0, "throttled_s": 0.0, "clock_drop": 0.02}
    return {"subject": subject, "bus_id": "", "host": host, "dtype": "bfloat16", "m": 8192, "gemms": 100,
            "checked": 10, "wrong": 0, "seconds": 60.0, "tflops": 700.0, "tflops_min": 690.0, "tflops_max": 710.0,
            "watch": watch, "watch_error": "", "interval": 1.0, **over}


def burn(per_rank: list[Any], n: int | None = None, limits: dict[str, Any] | None = None) -> Any:
    ranks = [{"host": "n1", "rank": i} for i in range(len(per_rank) if n is None else n)]
    return judge(Answers(spec("burn", {"duration": 1}), per_rank, ranks, "nccl"), Rules(limits or {}), {})


def test_a_healthy_burn_of_two_gpus_passes() -> None:
    out = burn([burned("n1", "GPU0", 0), burned("n1", "GPU1", 1)])
    assert {(v.subject, v.metric) for v in out.verdicts if v.passed} == {
        ("GPU0", "relative"), ("GPU1", "relative"), ("GPU0", "wrong"), ("GPU1", "wrong")}
    assert all(v.passed for v in out.verdicts)


@pytest.mark.parametrize("per_rank, n, message", [
    # GPU0 answered twice: the second (clean) answer hid the first's 7 wrong elements, and the run passed
    ([burned("n1", "GPU0", 0, wrong=7), burned("n1", "GPU0", 1)], None,
     "burn x: n1 GPU0 answered by rank 0 on n1 and by rank 1 on n1: two ranks bound to one device"),
    # a rank without tflops was dropped: its 9 wrong elements never judged
    ([burned("n1", "GPU0", 0), {k: v for k, v in burned("n1", "GPU1", 1, wrong=9).items() if k != "tflops"}], None,
     "rank 1 on n1 answered no number of tflops for n1 GPU1 \\(None\\)"),
    ([burned("n1", "GPU0", 0), {}], None, "rank 1 on n1 answered no GPU and node"),
    ([burned("n1", "GPU0", 0, wrong="0"), burned("n1", "GPU1", 1)], None,
     "rank 0 on n1 answered no number of wrong for n1 GPU0 \\('0'\\)"),
    ([burned("n1", "GPU0", 0)], 2, "1 answer\\(s\\) from the 2 rank\\(s\\) on n1"),
])
def test_a_burn_answer_missing_twice_or_without_a_number_is_a_harness_error_naming_rank_node_and_gpu(
        per_rank: list[Any], n: int | None, message: str) -> None:
    with pytest.raises(HarnessError, match=message):
        burn(per_rank, n)


@pytest.mark.parametrize("over, error, message", [
    # a burn that compared nothing with the known answer has wrong == 0 by construction: it passed
    ({"checked": 0}, NotMeasured, "burn x: not judged: rank 0 on n1 compared no result with the known answer on "
                                  "n1 GPU0 \\(checked 0\\)"),
    ({"gemms": 0}, NotMeasured, "burn x: not judged: rank 0 on n1 ran no GEMM on n1 GPU0 \\(gemms 0\\)"),
    ({"checked": True}, HarnessError, "rank 0 on n1 answered no count of checked for n1 GPU0 \\(True\\)"),
    ({"gemms": None}, HarnessError, "rank 0 on n1 answered no count of gemms for n1 GPU0 \\(None\\)"),
    ({"checked": -1}, HarnessError, "rank 0 on n1 answered no count of checked for n1 GPU0 \\(-1\\)"),
])
def test_a_burn_that_ran_or_compared_nothing_is_not_judged_naming_rank_node_and_gpu(
        over: dict[str, Any], error: type[HarnessError], message: str) -> None:
    with pytest.raises(error, match=message):
        burn([burned("n1", "GPU0", 0, **over), burned("n1", "GPU1", 1)])


@pytest.mark.parametrize("temp", [-300.0, 250.0])
def test_a_burn_temperature_no_gpu_can_read_fails_its_limit(temp: float) -> None:
    from clustercheck.judging.limits import Limit

    hot = Limit("x", "temp_max", "<=", 84.0, "C", "<= 84", "test", "test")
    watch = {**burned("n1", "GPU0", 0)["watch"], "temp_max": temp}
    out = burn([burned("n1", "GPU0", 0, watch=watch), burned("n1", "GPU1", 1)], limits={"temp_max": hot})
    temps = [(v.subject, v.passed) for v in out.verdicts if v.metric == "temp_max"]
    assert temps == [("GPU0", False), ("GPU1", True)]
    assert "out of the domain of temp_max" in next(v.detail for v in out.verdicts if not v.passed)


# -- 5. probe: an outcome that judged the node, or a harness error naming probe and node -----------------

def probed(verdicts: Any = None, **over: Any) -> list[dict[str, Any]]:
    """The node's two ranks' answers (measure.probe: the first rank runs it, the other answers {})."""
    one = {"subject": "node7", "what": "gpus", "passed": True, "judged": True, "detail": "8 GPUs", "measured": "8",
           "expected": "8"}
    return [{"outcome": "passed", "reason": "", "host": "node7",
             "verdicts": [one] if verdicts is None else [{**one, **v} for v in verdicts], **over}, {}]


def probe(per_rank: list[Any]) -> Any:
    ranks = [{"host": "node7", "rank": 0}, {"host": "node7", "rank": 1}]
    return judge(Answers(spec("probe", {"probe": "ecc"}), per_rank, ranks, "gloo"), Rules({}), {})


def test_a_probe_that_judged_the_node_passes() -> None:
    assert [(v.subject, v.passed) for v in probe(probed()).verdicts] == [("node7", True)]


@pytest.mark.parametrize("per_rank, message", [
    (probed([{"passed": "false"}]), "probe ecc on node7: node7 gpus: passed is 'false', not true or false"),
    (probed([{"passed": None}]), "probe ecc on node7: node7 gpus: passed is None"),
    (probed([{"judged": "no"}]), "probe ecc on node7: node7 gpus: judged is 'no'"),
    (probed([]), "probe ecc on node7: answered passed with no verdict"),
    ([{}, {}], "probe ecc on node7: no rank answered the probe's outcome"),
    (probed(outcome="crashed"), "probe ecc on node7: answered outcome 'crashed', which no probe gives"),
    (probed(outcome="skipped", reason=None), "probe ecc on node7: skipped without a reason"),
])
def test_a_probe_answer_that_judged_nothing_is_a_harness_error_naming_probe_and_node(per_rank: list[Any],
                                                                                    message: str) -> None:
    with pytest.raises(HarnessError, match=message):
        probe(per_rank)


# -- 6. native tools: no exit status read is no clean exit ----------------------------------------------

@pytest.mark.parametrize("returncode, said", [(None, "no exit status (None)"), ("0", "no exit status ('0')"),
                                              (False, "no exit status (False)")])
def test_a_tool_run_without_an_exit_status_fails_its_run_verdict(returncode: Any, said: str) -> None:
    from evidence import text

    from nccl_standin import asked, one_node

    body = one_node("\n".join(text("nccl-tests", "allreduce-h100-2node-16rank-mpirun.txt").split("\n")[2:]))
    ran = nccl_ran(stdout=body, stdout_bytes=len(body), argv=asked(body))
    clean = judge(Answers(spec("nccl_tests", {}), [ran, {}], [{"host": "node7"}] * 2, "nccl"), Rules({}), {})
    assert [(v.metric, v.passed) for v in clean.verdicts if v.metric == "run"] == [("run", True)]
    out = judge(Answers(spec("nccl_tests", {}), [{**ran, "returncode": returncode}, {}], [{"host": "node7"}] * 2,
                        "nccl"), Rules({}), {})
    run = next(v for v in out.verdicts if v.metric == "run")
    assert (run.measured, run.passed) == ("failed", False)
    assert (run.detail or "").startswith(said)
