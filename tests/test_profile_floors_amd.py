"""The shipped MI300X all_reduce floor fails a node with one xGMI link per GPU down and passes a healthy one:
healthy 8x MI300X measured 312.9 GB/s (stas00/ml-engineering network/README.md) and Azure gates 314 at 16G
(Azure/azurehpc-health-checks conf/nd96isr_mi300x_v5.conf); one of 7 links down reads about 6/7 of that."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers import load_named

THRESHOLDS = Path(__file__).resolve().parent.parent / "thresholds"
HEALTHY = 312.9


@pytest.mark.parametrize("check", ["allreduce-default", "allreduce-ring"])
def test_mi300x_all_reduce_floor_fails_a_node_with_one_xgmi_link_down(check):
    limits = load_named(THRESHOLDS, "mi300x-8x").limits_for(check)
    assert limits is not None
    floor = limits["busbw"].value
    assert 6 / 7 * HEALTHY < floor - 10 and floor < 0.92 * HEALTHY
    if check == "allreduce-default":
        assert "check_rccl_allreduce 314 1 16G" in limits["busbw"].source
