"""Copies and compute: CPU equivalents measured for real, GPU-only ones skipped with a reason, and the
p2p matrix arithmetic on hand-made per-rank results."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from clustercheck.kinds import KINDS
from clustercheck.judging.measurement import evaluate
from clustercheck.kinds.p2p import reduce_p2p
from clustercheck.judging.limits import Limit
from helpers import write_suite

SUITE = """checks:
  - id: hostmem
    measure: host_memory
    params: {size: 16MiB, loops: 2, samples: 2}
  - id: gemm
    measure: gemm
    scope: node
    params: {m: 256, loops: 3, samples: 2}
  - id: h2d
    measure: host_device
  - id: mem
    measure: device_memory
  - id: p2p
    measure: p2p
"""
LIMITS = """platform: cpu
detect: {gpu_count: 0}
checks:
  hostmem: {bandwidth: {limit: '>= 0.01', unit: GB/s}}
  gemm: {tflops: {limit: '>= 0.000001', unit: TFLOP/s}}
  h2d: {h2d: {limit: '>= 1', unit: GB/s}}
  mem: {bandwidth: {limit: '>= 1', unit: GB/s}}
  p2p: {ratio_to_median: {limit: '>= 0.9', unit: ratio}}
"""


def test_cpu_measures_run_and_gpu_ones_skip_with_reasons(project: pytest.Pytester) -> None:
    (project.path / "thresholds" / "cpu.yaml").write_text(LIMITS)
    write_suite(project, SUITE)
    res = project.runpytest("suites/s.yaml", "--thresholds", "thresholds", "--cc-out", "out", "-rs")
    res.assert_outcomes(passed=2, skipped=3)
    res.stdout.fnmatch_lines(["*host_device needs GPUs and this node has none*"])
    results = {r["check"]: r for r in json.loads((project.path / "out" / "latest" / "results.json").read_text())["results"]}
    assert [v["subject"] for v in results["hostmem"]["verdicts"]] == ["rank0", "rank1"]
    assert all(row["min"] <= row["median"] <= row["max"] for row in results["gemm"]["rows"])
    assert results["gemm"]["metrics"]["tflops"]["value"] > 0


def _rank(i: int, row: dict[int, float], shares: dict[int, float]) -> dict:
    subjects = {f"GPU{i}->GPU{j}": {"unidirectional": {"median": b, "min": b, "max": b}, "peer_access": True}
                for j, b in row.items()}
    subjects |= {f"GPU{i}->GPU{j}:bidir": {"share": {"median": b, "min": b, "max": b}} for j, b in shares.items()}
    return {"subjects": subjects}


def test_p2p_matrix_ratios_asymmetry_and_bidirectional_sum() -> None:
    per_rank = [_rank(0, {1: 100.0, 2: 100.0}, {1: 90.0, 2: 80.0}),
                _rank(1, {0: 100.0, 2: 100.0}, {0: 90.0, 2: 85.0}),
                _rank(2, {0: 60.0, 1: 100.0}, {0: 70.0, 1: 85.0})]
    m = reduce_p2p(per_rank, KINDS["p2p"].metrics)
    assert m.metrics["p2p_min"] == 60.0 and m.metrics["p2p_median"] == 100.0
    assert m.metrics["p2p_min_ratio"] == pytest.approx(0.6)
    assert m.metrics["asymmetry_max"] == pytest.approx(0.4)  # GPU0->GPU2 100 against GPU2->GPU0 60
    assert m.worst == "GPU2->GPU0"
    assert m.subjects["GPU0<->GPU2"]["bidirectional"] == 150.0
    limit = Limit("p2p", "ratio_to_median", ">=", 0.9, "ratio", ">= 0.9", "", "t.yaml:1")
    verdicts = evaluate(m, {"ratio_to_median": limit})
    assert len(verdicts) == 6 and [v.subject for v in verdicts if not v.passed] == ["GPU2->GPU0"]
    assert verdicts[0].line().startswith("GPU0->GPU1 ratio_to_median 1 ratio meets")


def test_a_group_of_one_rank_waits_for_nobody(monkeypatch: pytest.MonkeyPatch) -> None:
    """The copies and the burn take turns through barriers; with NCCL the first barrier builds the
    communicator, which a one-GPU node never needs. A group of one skips it; a group of two still waits."""
    import torch

    from clustercheck.measure import RankContext
    from clustercheck.measure import collectives

    called: list[object] = []
    monkeypatch.setattr(collectives.dist, "barrier", lambda **kw: called.append(kw))
    alone = RankContext(rank=0, world_size=1, local_rank=0, backend="nccl", device=torch.device("cpu"), host="n0")
    collectives._barrier(alone)
    assert called == []
    pair = RankContext(rank=0, world_size=2, local_rank=0, backend="gloo", device=torch.device("cpu"), host="n0")
    collectives._barrier(pair)
    assert called == [{"group": None}]


@pytest.mark.parametrize("share", [-5.0, 0.0, math.nan, math.inf, True, "90", None, "missing"])
def test_a_bidirectional_share_that_is_no_bandwidth_fails_the_pairs_limit_naming_it(share: Any) -> None:
    """-5 beside 90 summed to 85 and True to 91, passing `>= 80`; "90" raised TypeError; a pair with one
    share missing was left out of the bidirectional verdicts, unjudged."""
    back = _rank(1, {0: 100.0}, {} if share == "missing" else {0: share})
    m = reduce_p2p([_rank(0, {1: 100.0}, {1: 90.0}), back], KINDS["p2p"].metrics)
    assert math.isnan(m.subjects["GPU0<->GPU1"]["bidirectional"])
    said = "none" if share == "missing" else "nan" if share != share else repr(share)
    assert m.notes == ("bidirectional NaN (failing any limit) where a direction's share is no bandwidth: "
                       f"GPU1->GPU0 {said}",)
    floor = Limit("p2p", "bidirectional", ">=", 80.0, "GB/s", ">= 80", "", "t.yaml:1")
    assert [(v.subject, v.passed) for v in evaluate(m, {"bidirectional": floor})] == [("GPU0<->GPU1", False)]
