"""Judges against ranks' answers that would pass by accident: rows paired by position, a `wrong` that cancels,
a NaN pair, a port rate of -400, a GPU never run. Each is a named harness error, a failed verdict or
`not judged`, never a pass (the fail-closed rule, README.md)."""

from __future__ import annotations

import math
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
