"""`measure: ib_write_bw` per NIC, as a run judges it: a NIC that gave no bandwidth never discards the
verdicts of the others, each port of a multi-port HCA is its own run and its own subject, a device the
check names that is not on the node fails, on real perftest captures."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from clustercheck.errors import HarnessError
from clustercheck.kinds.base import Rules
from clustercheck.kinds.ib_write_bw import judge
from evidence import TOOLS

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ib_write_bw_node import answers as _answers, connectx3_sys, first_rank, on_node  # noqa: E402

IBW = TOOLS / "ib_write_bw"


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


# -- the rank side on a real sysfs tree (two dual-port ConnectX-3, from a real ibstat capture) ----------

def _node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capture: Path) -> Path:
    """The node's /sys from the ibstat capture and the stand-in ib_write_bw printing `capture`. Returns its log."""
    return on_node(tmp_path, monkeypatch, connectx3_sys(tmp_path), capture)


def test_a_named_device_not_on_the_node_fails_naming_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _node(tmp_path, monkeypatch, IBW / "roce-cx5-100g-deepops.txt")
    params = {"devices": ["mlx4_0", "mlx5_9"]}
    _, verdicts = judge(_answers(first_rank(params), params), Rules({}))
    failed = [(v.subject, v.detail) for v in verdicts if not v.passed]
    assert failed == [("mlx5_9", "named in the check's devices: and not on n1")]


def test_each_port_of_a_dual_port_hca_is_run_on_its_own_ib_port_and_judged_as_its_own_subject(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = _node(tmp_path, monkeypatch, IBW / "roce-cx5-100g-deepops.txt")
    result = first_rank({"devices": ["mlx4_0"]})
    clients = [line.split() for line in log.read_text().splitlines() if line.endswith("localhost")]
    assert [c[c.index("-d") + 1:c.index("-d") + 4] for c in clients] == [["mlx4_0", "-i", "1"], ["mlx4_0", "-i", "2"]]
    m, verdicts = judge(_answers(result, {"devices": ["mlx4_0"]}), Rules({}))
    assert sorted(m.subjects) == ["mlx4_0/1", "mlx4_0/2"]
    assert [(v.subject, v.passed) for v in verdicts] == [("mlx4_0/1", True), ("mlx4_0/2", True)]  # 92.40 >= 0.9 * 56
