"""ib: ibstat and ibv_devinfo fixtures; down ports and slow ports fail."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from clustercheck.probes import ib
from clustercheck.probes.base import ProbeParseError, ProbeSkip
from evidence import files, ids, text

IB_FIXTURES = files("ibstat") + files("ibv_devinfo")
EXPECTED = {  # file -> {port: state}
    "2x-connectx3-mlx4-dualport-fdr56-active": {"mlx4_0/1": "ACTIVE", "mlx4_0/2": "ACTIVE", "mlx4_1/1": "ACTIVE", "mlx4_1/2": "ACTIVE"},
    "2x-connectx3-mlx4-dualport-port2-down": {"mlx4_1/1": "ACTIVE", "mlx4_1/2": "DOWN", "mlx4_0/1": "ACTIVE", "mlx4_0/2": "DOWN"},
    "4x-cx7-all-port-down-ethernet-stelline-asus": {f"mlx5_{i}/1": "DOWN" for i in range(4)},
    "connectx3-mlx4_1-port2-verbose": {"mlx4_1/2": "DOWN"},
    "cx7-mlx5_1-ethernet-stelline": {"mlx5_1/1": "ACTIVE"},
}


@pytest.mark.parametrize("path", IB_FIXTURES, ids=ids(IB_FIXTURES))
def test_every_fixture_parses_port_states(path):
    ports = ib.parse(path.read_text())
    assert {p.subject: p.state for p in ports} == EXPECTED[path.stem]
    verdicts = ib.judge(ports, {})
    shown = [v for v in verdicts if v.what != "ports listed"]
    assert [v.passed for v in shown] == [s == "ACTIVE" for s in EXPECTED[path.stem].values()]
    # `ibv_devinfo -i 2` shows one of the two ports phys_port_cnt promises: the port not shown is not cleared
    listed = [(v.subject, v.passed) for v in verdicts if v.what == "ports listed"]
    assert listed == ([("mlx4_1", False)] if path.stem == "connectx3-mlx4_1-port2-verbose" else [])


def test_ibstat_rate_against_the_platform_rate():
    ports = ib.parse(text("ibstat", "2x-connectx3-mlx4-dualport-fdr56-active.txt"))
    assert all(p.rate_gbps == 56 and p.link_layer == "InfiniBand" for p in ports)
    assert all(v.passed for v in ib.judge(ports, {"ib_rate_gbps": 56}))
    assert not any(v.passed for v in ib.judge(ports, {"ib_rate_gbps": 400}))


def test_verbose_devinfo_rate_and_physical_state():
    (port,) = ib.parse(text("ibv_devinfo", "connectx3-mlx4_1-port2-verbose.txt"))
    assert (port.rate_gbps, port.phys_state) == (10.0, "POLLING")


def test_active_port_count_expectation():
    ports = ib.parse(text("ibv_devinfo", "2x-connectx3-mlx4-dualport-port2-down.txt"))
    node = [v for v in ib.judge(ports, {"ib_ports": 4}) if v.subject == "node"][0]
    assert not node.passed and node.measured == 2


def test_not_ib_output_is_a_parse_error():
    with pytest.raises(ProbeParseError):
        ib.parse("mlx5_0 port 1 ACTIVE\n")


def test_ibstat_port_cut_after_its_state_line_is_not_judged_with_or_without_a_rate_expected():
    # the head of a real ibstat capture, cut after the port's State line: no Rate, Physical state or Link
    # layer, which ibstat prints for every port (tests/test_probe_cut_captures.py cuts the last port of two)
    lines = text("ibstat", "2x-connectx3-mlx4-dualport-fdr56-active.txt").splitlines()
    port = next(i for i, l in enumerate(lines) if l.strip() == "Port 1:")
    state = next(i for i, l in enumerate(lines) if i > port and l.strip().startswith("State:"))
    cut = "\n".join(l for l in lines[:state + 1] if not l.strip().startswith("Number of ports")) + "\n"
    (p,) = ib.parse(cut)
    assert p.state == "ACTIVE" and p.rate_gbps is None and p.cut
    verdicts = ib.judge((p,), {"ib_rate_gbps": 400, "ib_ports": 1})
    rate = [v for v in verdicts if v.subject == p.subject]
    assert [(v.what, v.judged, v.passed) for v in rate] == [("port state", False, False)]
    assert "port section cut" in rate[0].detail
    node = [v for v in verdicts if v.subject == "node"][0]
    assert not node.passed and node.measured == 0
    # without an expected rate too: an ACTIVE state alone is no pass of a port whose section was cut
    assert [v.word for v in ib.judge((p,), {})] == ["NOT JUDGED"]


def test_plain_ibv_devinfo_has_no_rate_to_judge():
    ports = ib.parse(text("ibv_devinfo", "cx7-mlx5_1-ethernet-stelline.txt"))
    (v,) = [v for v in ib.judge(ports, {"ib_rate_gbps": 56}) if v.what != "ports listed"]
    assert (v.subject, v.judged, v.passed) == ("mlx5_1/1", False, False) and "-v" in v.detail


def test_gdr_expected_with_an_ibstat_capture_is_not_judged():
    ports = ib.parse(text("ibstat", "2x-connectx3-mlx4-dualport-fdr56-active.txt"))
    gdr = [v for v in ib.judge(ports, {"gdr": True}) if v.what == "GPUDirect RDMA"]
    assert [(v.subject, v.judged) for v in gdr] == [("node", False)]
    assert gdr[0].detail == "not judged: GDR is not in an ibstat capture"


@pytest.mark.parametrize("expect, named", [({"ib_ports": 8}, "8 active port(s) (ib_ports)"),
                                           ({"ib_rate_gbps": 400}, "ports at 400 Gb/s (ib_rate_gbps)"),
                                           ({"fabric_ports": ["mlx5_0"]}, "mlx5_0 (fabric_ports)"),
                                           ({"gdr": True}, "GPUDirect RDMA (gdr: true)")])
def test_a_node_with_no_rdma_device_fails_where_an_rdma_expectation_applies(tmp_path: Path, expect: dict[str, Any],
                                                                           named: str) -> None:
    (tmp_path / "sys" / "bus" / "pci" / "devices").mkdir(parents=True)  # a PCI bus, no /sys/class/infiniband
    reading = ib.collect(tmp_path / "sys")
    (v,) = ib.judge(reading, expect)
    assert (v.subject, v.what, v.passed) == ("node", "RDMA devices", False)
    assert v.detail.startswith("no InfiniBand/RoCE device") and named in v.detail
    with pytest.raises(ProbeSkip, match="no InfiniBand/RoCE device"):  # nothing expects one: a skip
        ib.judge(reading, {"ib_rate_gbps": None, "gdr": False})
