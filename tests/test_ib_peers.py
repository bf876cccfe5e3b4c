"""A port trained down below its sibling ports of the same HCA model fails, in the ib probe (ibstat,
ibv_devinfo, sysfs) and in ib_write_bw's line fraction, without any site's ib_rate_gbps."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from clustercheck.kinds.base import Answers, CheckSpec, Rules
from clustercheck.kinds.ib_write_bw import judge as judge_ib_write_bw
from clustercheck.probes import ib
from evidence import text

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sysfs_tree import Tree, add_ports  # noqa: E402

TOOLS = Path(__file__).parent / "fixtures" / "tool-outputs"


def _ibstat_one_port_at(rate: str) -> str:
    """The real ibstat capture of two dual-port ConnectX-3 (4 ports, FDR 56) with mlx4_1 port 2's Rate edited
    to `rate`: the capture of a port that trained down."""
    capture = text("ibstat", "2x-connectx3-mlx4-dualport-fdr56-active.txt")
    head, sep, tail = capture.rpartition("Rate: 56")
    return head + sep.replace("56", rate) + tail


def test_a_port_slower_than_its_sibling_ports_fails_naming_both_rates():
    ports = ib.parse(_ibstat_one_port_at("28"))
    assert {p.hca_type for p in ports} == {"MT4099"}
    verdicts = ib.judge(ports, {})
    (slow,) = [v for v in verdicts if not v.passed]
    assert (slow.subject, slow.what, slow.measured) == ("mlx4_1/2", "port rate", 28.0)
    assert "mlx4_1/2: 28 Gb/s, its 3 sibling ConnectX-3 ports run 56 Gb/s: trained down" in slow.detail
    assert all(v.passed for v in verdicts if v.subject != "mlx4_1/2")
    # the healthy capture passes, and an absolute ib_rate_gbps still judges as before
    assert all(v.passed for v in ib.judge(ib.parse(_ibstat_one_port_at("56")), {}))
    (absolute,) = [v for v in ib.judge(ports, {"ib_rate_gbps": 56}) if not v.passed]
    assert absolute.subject == "mlx4_1/2" and "platform expects 56 Gb/s" in absolute.detail


def test_ports_of_another_model_or_link_layer_are_no_siblings():
    ports = ib.parse(_ibstat_one_port_at("28"))
    other = tuple(p if p.subject != "mlx4_1/2" else ib.IbPort(**{**p.__dict__, "hca_type": "MT4129"}) for p in ports)
    assert all(v.passed for v in ib.judge(other, {}))
    roce = tuple(p if p.subject != "mlx4_1/2" else ib.IbPort(**{**p.__dict__, "link_layer": "Ethernet"}) for p in ports)
    assert all(v.passed for v in ib.judge(roce, {}))
    # a model that could not be read compares with nothing; a port whose rate was not read stays not judged
    unknown = tuple(ib.IbPort(**{**p.__dict__, "hca_type": None}) for p in ports)
    assert all(v.passed for v in ib.judge(unknown, {}))


def test_a_trained_down_port_read_from_sysfs_fails(tmp_path):
    ports = ib.parse(_ibstat_one_port_at("28"))
    tree = add_ports(Tree(), [(p.device, p.port, p.state, p.phys_state, p.rate_gbps, p.link_layer) for p in ports],
                     {})
    root = tree.write(tmp_path / "sys")
    for dev in ("mlx4_0", "mlx4_1"):
        (root / "class" / "infiniband" / dev / "hca_type").write_text("MT4099\n")
        (root / "class" / "infiniband" / dev / "board_id").write_text("MT_1090120019\n")
    reading = ib.collect(root)
    slow = [v for v in ib.judge(reading, {}) if v.what == "port rate"]
    assert [(v.subject, v.passed) for v in slow] == [("mlx4_1/2", False)]


def _answers(result: dict[str, Any]) -> Answers:
    check = CheckSpec("c", "ib_write_bw", "node", {}, (), 60, "", "s.yaml", 1)
    return Answers(check, [result, {}], [{"host": "n1"}, {"host": "n1"}], "nccl")


def test_ib_write_bw_line_fraction_is_against_the_siblings_rate():
    """A real ib_write_bw run (RoCE CX5, 92.40 Gb/s) on a port at 100 Gb/s whose sibling ports run 200."""
    client = {"outcome": "ran", "stdout": (TOOLS / "ib_write_bw" / "roce-cx5-100g-deepops.txt").read_text(),
              "returncode": 0, "timed_out": False}
    runs = [{"device": "mlx5_3", "port": 1, "rate_gbps": 100.0, "up": True, "client": client, "server": {}}]
    peers = {"mlx5_3/1": {"fastest_gbps": 200.0, "at_fastest": 7, "others": 7, "model": "ConnectX-5"}}
    result = {"host": "n1", "binary": "ib_write_bw", "outcome": "ran", "runs": runs, "peers": peers}
    m, (v,) = judge_ib_write_bw(_answers(result), Rules({}))
    assert m.subjects["mlx5_3"]["line_fraction"] == pytest.approx(92.40 / 200)
    assert not v.passed and v.rule.value == pytest.approx(180.0)  # type: ignore[union-attr]
    assert "the fastest rate of its 7 sibling ConnectX-5 port(s) on the node, 200 Gb/s" in v.rule.source  # type: ignore[union-attr]
    # a record without the siblings' rates: its own rate, as before, saying so
    m, (v,) = judge_ib_write_bw(_answers({**result, "peers": {}}), Rules({}))
    assert m.subjects["mlx5_3"]["line_fraction"] == pytest.approx(0.924) and v.passed
    assert "the port's own rate 100 Gb/s from sysfs" in v.rule.source  # type: ignore[union-attr]


def test_ibv_devinfo_gives_the_model_of_each_port():
    ports = ib.parse(text("ibv_devinfo", "4x-cx7-all-port-down-ethernet-stelline-asus.txt"))
    assert {(p.hca_type, p.board_id, p.link_layer) for p in ports} == {("4129", "MT_0000000834", "Ethernet")}
