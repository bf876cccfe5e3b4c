"""`measure: ib_write_bw` per NIC, as a run judges it: a NIC that gave no bandwidth never discards the
verdicts of the others, each port of a multi-port HCA is its own run and its own subject, a device the
check names that is not on the node fails, on real perftest captures."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from clustercheck.errors import HarnessError
from clustercheck.kinds.base import Answers, CheckSpec, Rules
from clustercheck.kinds.ib_write_bw import judge
from evidence import TOOLS

IBW = TOOLS / "ib_write_bw"


def _answers(result: dict[str, Any], params: dict[str, Any] | None = None) -> Answers:
    check = CheckSpec("ib-write-bw", "ib_write_bw", "node", params or {}, (), 60, "", "s.yaml", 1)
    return Answers(check, [result, {}], [{"host": "n1"}, {"host": "n1"}], "nccl")


def _client(path: Path) -> dict[str, Any]:
    return {"outcome": "ran", "stdout": path.read_text(), "returncode": 0, "timed_out": False}


def _run(device: str, client: dict[str, Any], rate: float = 400.0, port: int = 1) -> dict[str, Any]:
    return {"device": device, "port": port, "rate_gbps": rate, "up": True, "client": client, "server": {}}


def test_a_nic_that_could_not_start_keeps_the_failure_of_the_one_measured() -> None:
    """mlx5_0 gave 92.40 Gb/s on a 400 Gb/s port (a failure); mlx5_1's client could not start."""
    runs = [_run("mlx5_0", _client(IBW / "roce-cx5-100g-deepops.txt")),
            _run("mlx5_1", {"outcome": "unrunnable", "reason": "could not start"})]
    result = {"host": "n1", "binary": "ib_write_bw", "outcome": "ran", "runs": runs}
    _, verdicts = judge(_answers(result), Rules({}))
    got = [(v.subject, v.metric, v.passed) for v in verdicts]
    assert got == [("mlx5_0", "bw_gbps", False), ("mlx5_1", "run", False)]
    assert "could not start" in (verdicts[1].detail or "")


def test_a_nic_that_gave_no_bandwidth_beside_passing_ones_is_the_items_error() -> None:
    runs = [_run("mlx5_0", _client(IBW / "roce-cx5-100g-deepops.txt"), rate=100.0),
            _run("mlx5_1", {"outcome": "unrunnable", "reason": "could not start"})]
    result = {"host": "n1", "binary": "ib_write_bw", "outcome": "ran", "runs": runs}
    with pytest.raises(HarnessError, match=r"\(mlx5_1\): could not start"):
        judge(_answers(result), Rules({}))
