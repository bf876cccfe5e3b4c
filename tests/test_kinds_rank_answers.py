"""Judges against ranks' answers that would pass by accident: rows paired by position, a `wrong` that cancels,
a NaN pair, a port rate of -400, a GPU never run. Each is a named harness error, a failed verdict or
`not judged`, never a pass (the fail-closed rule, README.md)."""

from __future__ import annotations

import math
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from clustercheck.errors import HarnessError, NotMeasured
from clustercheck.judging.limits import Limit
from clustercheck.kinds import KINDS
from clustercheck.kinds.base import Answers, CheckSpec, Rules
from clustercheck.run.judge import judge
from clustercheck.schema import Fields

sys.path.insert(0, str(Path(__file__).resolve().parent))
from evidence import TOOLS, text  # noqa: E402

MiB = 1 << 20


def spec(measure: str, params: dict[str, Any], scope: str = "node") -> CheckSpec:
    kind = KINDS[measure]
    return CheckSpec("x", measure, scope, kind.parse(Fields(params, "s.yaml", "checks[0].params")), (), 60.0, "",
                     "s.yaml", 1)


def limit(metric: str, op: str, value: float, unit: str) -> Limit:
    return Limit("x", metric, op, value, unit, f"{op} {value}", "test source", "t.yaml:3")


# -- ib_write_bw: a port rate that is no rate ---------------------------------------------------------------

def _ib(rate: Any, peers: dict[str, Any] | None = None) -> Answers:
    client = {"outcome": "ran", "stdout": (TOOLS / "ib_write_bw" / "roce-cx5-100g-deepops.txt").read_text(),
              "returncode": 0, "timed_out": False}  # 92.40 Gb/s
    run = {"device": "mlx5_0", "port": 1, "rate_gbps": rate, "up": True, "client": client, "server": {}}
    result = {"host": "n1", "binary": "ib_write_bw", "outcome": "ran", "runs": [run], **({"peers": peers} if peers else {})}
    return Answers(spec("ib_write_bw", {}), [result, {}], [{"host": "n1"}, {"host": "n1"}], "nccl")


@pytest.mark.parametrize("rate", [-400.0, 0.0, math.nan, math.inf, "400", True])
def test_a_port_rate_that_is_no_rate_leaves_the_nic_not_judged_naming_it(rate: Any) -> None:
    """A rate of -400 made a floor of -360 Gb/s that every NIC passed."""
    with pytest.raises(HarnessError, match=r"ib_write_bw on n1 \(mlx5_0\): not judged: the port's rate from sysfs "
                                           r"\(.*\) is not a rate and no ib_write_bw_min is given"):
        judge(_ib(rate), Rules({}), {})


def test_a_sibling_rate_that_is_no_rate_leaves_the_ports_own_rate_as_the_floor() -> None:
    out = judge(_ib(400.0, {"mlx5_0/1": {"fastest_gbps": -1, "others": 1, "model": "MT4129"}}), Rules({}), {})
    assert [(v.subject, v.passed) for v in out.verdicts] == [("mlx5_0", False)]  # 92.4 of 400 Gb/s
    assert out.verdicts[0].rule.value == pytest.approx(360.0)  # type: ignore[union-attr]
    assert "its sibling ports' fastest rate -1 is not a rate" in out.verdicts[0].rule.source


# -- gdsio: the node's last GPU never run ------------------------------------------------------------------

def _gdsio(gpus_run: list[int], **result: Any) -> Answers:
    lines = text("gdsio", "wrx90-2gpu-raid0-write-gpud-cpuonly-stelline.txt").split("\n")
    line = next(x for x in lines if x.startswith("IoType: WRITE XferType: GPUD"))
    runs = [{"gpu": g, "io": "write", "outcome": "ran", "stdout": line + "\n", "returncode": 0, "timed_out": False}
            for g in gpus_run]
    answer = {"host": "n1", "binary": "gdsio", "outcome": "ran", "runs": runs, **result}
    return Answers(spec("gdsio", {"io": ["write"]}), [answer, {}, {}, {}], [{"host": "n1"}] * 4, "nccl")


def test_the_last_gpu_of_the_count_the_rank_ran_for_without_a_run_fails_by_name() -> None:
    """A 4-GPU node whose rank ran GPU0-2 only: the count came from the highest GPU seen (3), so GPU3 passed
    unnoticed."""
    out = judge(_gdsio([0, 1, 2], gpus=4), Rules({}, expect={"gdsio_write_min": 0.1}), {})
    assert [(v.subject, v.metric, v.passed) for v in out.verdicts] == [
        ("GPU3", "run", False), ("GPU0", "write_gibs", True), ("GPU1", "write_gibs", True), ("GPU2", "write_gibs", True)]
    assert out.verdicts[0].detail == "write: no gdsio run of GPU3 in the answer: never measured"


@pytest.mark.parametrize("gpus", [None, True, "4", -1])
def test_a_rank_that_does_not_say_how_many_gpus_it_ran_for_is_a_harness_error(gpus: Any) -> None:
    result = {} if gpus is None else {"gpus": gpus}
    with pytest.raises(HarnessError, match=r"gdsio on n1: the rank did not say how many GPUs it ran gdsio for"):
        judge(_gdsio([0, 1, 2], **result), Rules({}, expect={"gdsio_write_min": 0.1}), {})


def test_the_rank_side_says_the_count_it_ran_gdsio_for(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """measure/native_io.py gdsio with a stand-in gdsio on PATH (the rank runs tools from an argument list)."""
    import os
    import stat

    import torch

    from clustercheck.measure import RankContext, native_io

    bin_ = tmp_path / "bin"
    bin_.mkdir()
    tool = bin_ / "gdsio"
    tool.write_text("#!/bin/sh\necho 'IoType: WRITE XferType: GPUD Threads: 1 DataSetSize: 1024/1024(KiB) "
                    "IOSize: 1024(KiB) Throughput: 1.0 GiB/sec, Avg_Latency: 1.0 usecs ops: 1 total_time 1.0 secs'\n")
    tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv(native_io.GDS_DIR, str(tmp_path))
    ctx = RankContext(0, 1, 0, "gloo", torch.device("cpu"), "n1")
    params = {**spec("gdsio", {"io": ["write"], "gpus": 3}).params, "tool_timeout": 30.0}
    out = native_io.gdsio(ctx, params)
    assert out["outcome"] == "ran" and out["gpus"] == 3 and [r["gpu"] for r in out["runs"]] == [0, 1, 2]


# -- p2p: a pair that is no bandwidth, or no pair at all ------------------------------------------------------

def _p2p(bandwidths: dict[str, Any]) -> Answers:
    """Three GPUs of n1, each rank answering its own row of the matrix (measure/copies.py p2p)."""
    per_rank: list[dict[str, Any]] = [{"subjects": {}} for _ in range(3)]
    for pair, b in bandwidths.items():
        per_rank[int(pair[3])]["subjects"][pair] = {"unidirectional": {"median": b, "min": b, "max": b},
                                                    "peer_access": True}
    return Answers(spec("p2p", {}, "gpu-pair"), per_rank, [{"host": "n1"}] * 3, "nccl")


FULL = {f"GPU{a}->GPU{b}": 100.0 for a in range(3) for b in range(3) if a != b}


@pytest.mark.parametrize("bad", [math.nan, math.inf, 0.0, -100.0, "100", True])
@pytest.mark.parametrize("metric", ["p2p_min", "p2p_min_ratio", "asymmetry_max"])
def test_a_pair_that_is_no_bandwidth_fails_the_node_wide_figures_naming_that_pair(bad: Any, metric: str) -> None:
    """A NaN pair passed p2p_min and p2p_min_ratio (min() and median() skip a NaN by where it stands); an inf
    pair passed p2p_min_ratio; a 0 divided by zero."""
    unit = {"p2p_min": "GB/s"}.get(metric, "ratio")
    op, value = ("<=", 0.2) if metric == "asymmetry_max" else (">=", 0.5 if unit == "ratio" else 50.0)
    out = judge(_p2p({**FULL, "GPU2->GPU0": bad}), Rules({metric: limit(metric, op, value, unit)}), {})
    assert [(v.metric, v.passed, v.worst) for v in out.verdicts] == [(metric, False, "GPU2->GPU0")]
    assert math.isnan(float(out.verdicts[0].measured))


def test_one_dead_pair_fails_its_own_ratio_to_median_not_the_healthy_pairs() -> None:
    out = judge(_p2p({**FULL, "GPU2->GPU0": 0.0}), Rules({"ratio_to_median": limit("ratio_to_median", ">=", 0.8, "ratio")}), {})
    assert [v.subject for v in out.verdicts if not v.passed] == ["GPU2->GPU0"]
    assert len(out.verdicts) == 6


@pytest.mark.parametrize("gone", [["GPU2->GPU0", "GPU0->GPU2"], list(FULL)])
def test_a_pair_missing_from_the_answers_is_a_harness_error_naming_it(gone: list[str]) -> None:
    with pytest.raises(HarnessError, match=rf"p2p x on n1: no bandwidth of {len(gone)} of the 6 ordered pair\(s\) of 3 "
                                           rf"GPU\(s\) in the ranks' answers \(.*GPU0->GPU2, .*GPU2->GPU0.*\)"):
        judge(_p2p({k: v for k, v in FULL.items() if k not in gone}), Rules({"p2p_min": limit("p2p_min", ">=", 1, "GB/s")}), {})


# -- collectives: rows paired by position, a `wrong` that cancels, a spread that is not known -------------------

def _coll_rank(t: float = 1e-3, wrong: Any = 0, sizes: tuple[int, ...] = (MiB, 4 * MiB),
               iters: list[Any] | None = None) -> dict[str, Any]:
    return {"dtype": "float32", "rows": [{"size": s, "count": s // 4, "bytes": s, "placement": "in", "seconds": t,
                                          "wrong": wrong, "iter_seconds": [t] * 5 if iters is None else iters}
                                         for s in sizes]}


def _coll(*per_rank: dict[str, Any]) -> Answers:
    check = spec("all_reduce", {"sizes": [MiB, 4 * MiB], "iters": 5}, "cluster")
    return Answers(check, list(per_rank), [{"host": "n1"}, {"host": "n2"}], "gloo")


BUSBW = Rules({"busbw": limit("busbw", ">=", 1.0, "GB/s")})


def _short(r: dict[str, Any]) -> dict[str, Any]:
    return {**r, "rows": r["rows"][:1]}


def _reversed(r: dict[str, Any]) -> dict[str, Any]:
    rows = list(reversed(r["rows"]))
    return {**r, "rows": [{**rows[0], "seconds": 10.0}, rows[1]]}  # its 4 MiB row took 10 s


@pytest.mark.parametrize(("rank1", "said"), [
    (_short(_coll_rank()), r"rank 1 \(n2\) answered rows for 1MiB in; the suite asks 1MiB in, 4MiB in"),
    (_reversed(_coll_rank()), r"rank 1 \(n2\) answered rows for 4MiB in, 1MiB in; the suite asks 1MiB in, 4MiB in"),
    (_coll_rank(sizes=(2 * MiB, 8 * MiB)), r"rank 1 \(n2\) answered rows for 2MiB in, 8MiB in"),
    ({"dtype": "float32", "rows": []}, r"rank 1 \(n2\) answered rows for none"),
])
def test_a_rank_whose_rows_are_not_the_suites_sizes_in_order_is_a_harness_error_naming_it(rank1: dict[str, Any],
                                                                                          said: str) -> None:
    """The rows were paired by position: zip() cut the longer rank short (the judged size fell back to the
    last one left), and a rank's rows in another order paired its 10 s at 4 MiB with rank 0's 1 MiB."""
    with pytest.raises(HarnessError, match=rf"^x: {said}"):
        judge(_coll(_coll_rank(), rank1), BUSBW, {})


def test_ranks_that_agree_on_rows_the_suite_did_not_ask_for_are_a_harness_error() -> None:
    with pytest.raises(HarnessError, match=r"^x: rank 0 \(n1\) answered rows for 1MiB in; the suite asks"):
        judge(_coll(_short(_coll_rank()), _short(_coll_rank())), BUSBW, {})


def test_a_missing_judged_row_is_not_measured_never_the_last_size_instead() -> None:
    from clustercheck.kinds.collectives import reduce_collective

    with pytest.raises(NotMeasured, match=r"no row at the judged size 4MiB \(rows at 1MiB\)"):
        reduce_collective("all_reduce", [_short(_coll_rank()), _short(_coll_rank())], ["n1", "n2"], 4 * MiB)


@pytest.mark.parametrize("bad", [-5, True, 1.5, math.nan, "3", None])
def test_a_wrong_that_is_no_count_fails_wrong_naming_the_rank(bad: Any) -> None:
    """+5 on rank 0 and -5 on rank 1 summed to 0: a pass."""
    out = judge(_coll(_coll_rank(wrong=5 if bad == -5 else 0), _coll_rank(wrong=bad)), BUSBW, {})
    wrong = next(v for v in out.verdicts if v.metric == "wrong")
    assert not wrong.passed and math.isnan(float(wrong.measured))
    assert f"rank 1 (n2): wrong {bad!r}"[:20] in (wrong.worst or "") and "no count" in (wrong.worst or ""), wrong.worst


@pytest.mark.parametrize("bad", [True, False, -1e-3, 0.0, math.nan, math.inf, "1", None])
def test_a_time_that_is_no_time_is_a_harness_error_naming_the_rank_and_row(bad: Any) -> None:
    """True read as 1 s and was judged as a time; a NaN or negative time made a NaN busbw, a failed verdict the
    hardware never earned; a string raised TypeError inside the formula."""
    with pytest.raises(HarnessError, match=rf"^x: rank 1 \(n2\) answered {re.escape(repr(bad))} s for 1MiB in: no "
                                           r"time \(a broken timer\), not judged"):
        judge(_coll(_coll_rank(), _coll_rank(t=bad)), BUSBW, {})


def test_iteration_stats_of_unequal_counts_or_a_broken_timer_have_no_spread() -> None:
    from clustercheck.kinds.collectives import iteration_stats

    spike = [1e-6, 1e-6, 1e-6, 1e-6, 9.0]
    assert math.isnan(iteration_stats([spike, [1e-6] * 4])["iter_cv"])  # zip() dropped the spike: cv 0
    assert math.isnan(iteration_stats([[1e-6] * 5, [1e-6, math.nan, 1e-6, 1e-6, 1e-6]])["iter_cv"])  # read 0
    assert math.isnan(iteration_stats([[0.0] * 5, [0.0] * 5])["iter_cv"])  # read 0 (mean 0)
    assert math.isnan(iteration_stats([[-1.0, 1.0] * 2, [-1.0, 1.0] * 2])["iter_cv"])
    assert math.isnan(iteration_stats([spike, []])["iter_cv"])  # one rank kept none: it failed iter_cv NaN...
    assert iteration_stats([[], []]) == {}  # none kept (per_iteration: false): no spread row at all


def test_a_spread_that_is_not_known_is_not_judged_and_never_fails_a_healthy_busbw() -> None:
    uneven = _coll(_coll_rank(iters=[1e-3] * 4 + [9.0]), _coll_rank(iters=[1e-3] * 4))
    out = judge(uneven, BUSBW, {})  # no limit on iter_cv: the busbw passes, the note says the spread is not known
    assert [(v.metric, v.passed) for v in out.verdicts] == [("busbw", True), ("wrong", True)]
    assert math.isnan(out.measurement.metrics["iter_cv"])
    assert any("iter_cv at 4MiB (in-place) is not known: rank 1 (n2) kept 4 per-iteration time(s), rank 0 (n1) 5"
               in n for n in out.notes), out.notes
    cv = Rules({"busbw": limit("busbw", ">=", 1.0, "GB/s"), "iter_cv": limit("iter_cv", "<=", 0.5, "ratio")})
    with pytest.raises(HarnessError, match=r"^x: iter_cv at 4MiB \(in-place\) is not judged: rank 1 \(n2\) kept 4"):
        judge(uneven, cv, {})  # read 0 before: a pass on a spread no one measured
    slow = Rules({"busbw": limit("busbw", ">=", 1e6, "GB/s"), "iter_cv": limit("iter_cv", "<=", 0.5, "ratio")})
    out = judge(uneven, slow, {})  # beside a failure, the failure stands and the spread is the item's note
    assert [(v.metric, v.passed) for v in out.verdicts] == [("busbw", False), ("wrong", True)]
    assert any("iter_cv at 4MiB (in-place) is not judged" in n for n in out.notes), out.notes


def test_a_judged_size_the_ranks_round_is_judged_at_its_rounded_size_on_real_gloo_ranks(project: Any) -> None:
    """all_gather of 100000 B over 3 ranks moves 99984 B (per-rank counts rounded down to 16 B, nccl-tests):
    judge_at 100000 matched no row and the headline fell back to the last size, 1 MiB."""
    import json

    from helpers import write_suite

    write_suite(project, "checks:\n  - id: ag\n    measure: all_gather\n    params: {sizes: [100000, 1MiB], "
                         "judge_at: 100000, iters: 2, warmup: 1, placements: [out]}\n")
    (project.path / "thresholds" / "cpu.yaml").write_text(
        "platform: cpu\ndetect: {gpu_count: 0}\nchecks:\n  ag: {busbw: {limit: '>= 0.000001', unit: GB/s}}\n")
    project.runpytest("suites/s.yaml", "--thresholds", "thresholds", "--cc-out", "out", "--ranks", "3")
    result = json.loads((project.path / "out" / "latest" / "results.json").read_text())["results"][0]
    assert result["outcome"] == "passed", result.get("message")
    assert result["judged_at"] == 8332 * 4 * 3


def test_a_wrong_that_was_no_count_fails_again_when_verify_rebuilds_the_answers_from_the_record() -> None:
    from clustercheck.kinds.collectives import judge as judge_collective
    from clustercheck.record.rebuild import answers

    a = _coll(_coll_rank(wrong=5), _coll_rank(wrong=-5))
    m, _ = judge_collective(a, BUSBW)
    entry: Any = {"rows": m.rows, "nodes": ["n1", "n2"]}
    again = judge(Answers(a.check, answers(entry, a.check, {}), a.ranks, "gloo"), BUSBW, {})  # int(NaN) raised
    assert [(v.metric, v.passed) for v in again.verdicts] == [("busbw", True), ("wrong", False)]


@pytest.mark.parametrize("returncode", [None, False, "0"])
def test_a_gdsio_run_without_an_exit_status_fails_its_run_verdict_by_gpu(returncode: Any) -> None:
    """A returncode of None or False (no exit status read) was taken for a clean exit: both GPUs passed."""
    a = _gdsio([0, 1], gpus=2)
    a.per_rank[0]["runs"] = [{**run, "returncode": returncode} for run in a.per_rank[0]["runs"]]
    out = judge(a, Rules({}, expect={"gdsio_write_min": 0.1}), {})
    runs = [(v.subject, v.passed, v.detail) for v in out.verdicts if v.metric == "run"]
    assert runs == [(f"GPU{g}", False, f"no exit status ({returncode!r})") for g in (0, 1)]


@pytest.mark.parametrize("gpu", [True, "1", -1, None])
def test_a_gdsio_run_whose_gpu_is_no_index_is_a_harness_error_naming_the_node(gpu: Any) -> None:
    """gpu True counted as GPU1 (True == 1): GPU1, never run, passed behind it."""
    a = _gdsio([0, 1], gpus=2)
    a.per_rank[0]["runs"][1]["gpu"] = gpu
    with pytest.raises(HarnessError, match=rf"^gdsio on n1: a run answered gpu {re.escape(repr(gpu))}, no GPU index"):
        judge(a, Rules({}, expect={"gdsio_write_min": 0.1}), {})


@pytest.mark.parametrize("returncode", [None, False, "0"])
def test_an_ib_write_bw_client_without_an_exit_status_fails_its_run_verdict_by_nic(returncode: Any) -> None:
    """A client returncode of None or False (no exit status read) was taken for a clean exit: the NIC passed."""
    a = _ib(100.0)
    a.per_rank[0]["runs"][0]["client"]["returncode"] = returncode
    runs = [(v.subject, v.passed, v.detail) for v in judge(a, Rules({}), {}).verdicts if v.metric == "run"]
    assert runs == [("mlx5_0", False, f"no exit status ({returncode!r})")]
