"""A port rate no kernel writes (clustercheck/fabric/rdma.py, probes/ib.py, fabric/pcitree.py): a malformed
rate ("1.2.3 Gb/sec") raised ValueError out of rdma.read and the ib probe's collect, 400 nines became inf
(Infinity in the JSON facts), and an absurd port (1e8 Gb/s) became the run's line rate, failing every node as
hardware. Each is now that port's Problem (nic=True), the node's line rate unknown, the ib probe's FAIL on that
node; the rates real ports run (1X SDR 2.5 .. NDR, and 0 as the kernel writes it for EFA) are still read. The
sysfs tree is the AWS p5 one test_fabric_facts.py builds from a real lstopo -v capture (tests/sysfs_tree.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from clustercheck.fabric import linerate, rdma
from clustercheck.fabric.pcitree import PciTree
from clustercheck.judging.fabric import run_fabric
from clustercheck.probes import ib

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sysfs_tree import add_ports, from_lstopo, strip_source  # noqa: E402

P5 = Path(__file__).parent / "fixtures" / "hosts" / "aws-p5" / "lstopo-fi_info.txt"
NIC = "rdmap79s0"


def p5(tmp_path: Path, rate: str | None = None) -> Path:
    tree = from_lstopo(strip_source(P5.read_text()))
    add_ports(tree, [(NIC, 1, "ACTIVE", "LinkUp", 100.0, "Ethernet")], {NIC: "0000:4f:00.0"})
    root = tree.write(tmp_path / "sys")
    if rate is not None:
        (root / "class" / "infiniband" / NIC / "ports" / "1" / "rate").write_text(rate + "\n")
    return root


@pytest.mark.parametrize("rate", ["1.2.3 Gb/sec", ". Gb/sec", "9" * 400 + " Gb/sec", "100000000 Gb/sec (4X NDR)",
                                  "0.0000001 Gb/sec", "0.1 Gb/sec", "1e8 Gb/sec", "4000 Gb/sec (12X XDR)"])
def test_a_rate_no_port_runs_is_that_ports_problem_never_a_raise_nor_the_bar(tmp_path: Path, rate: str) -> None:
    root = p5(tmp_path, rate)
    net = rdma.read(root, proc_root=tmp_path / "proc", kernel="6.8.0")
    assert [p.rate_gbps for p in net.ports] == [None]
    mine = [p for p in net.findings if p.subject == f"{NIC}/1"]
    assert len(mine) == 1 and mine[0].nic and not mine[0].unread and "rate" in mine[0].text, net.findings
    assert "Infinity" not in json.dumps(net.as_dict())
    assert linerate.of_node(net).gbps is None
    # one absurd node never sets the run's line rate: the healthy node's 100 Gb/s does
    good = rdma.read(p5(tmp_path / "good"), proc_root=tmp_path / "proc", kernel="6.8.0")
    facts = {"bad": {"network": net.as_dict()}, "good": {"network": good.as_dict()}}
    assert run_fabric(facts, "nccl", {}, None).node_rate[0] == 100.0
    # the ib probe reads the same tree: a failed verdict on the node, no traceback
    verdicts = ib.judge(ib.collect(root), {})
    assert any(not v.passed and mine[0].text in v.detail for v in verdicts), verdicts


@pytest.mark.parametrize("rate, gbps", [("2.5 Gb/sec (1X SDR)", 2.5), ("56 Gb/sec (4X FDR)", 56.0),
                                        ("400 Gb/sec (4X NDR)", 400.0), ("2550 Gb/sec (12X XDR)", 2550.0),
                                        ("0 Gb/sec (1X SDR)", 0.0)])
def test_the_rates_the_kernel_writes_are_read(tmp_path: Path, rate: str, gbps: float) -> None:
    net = rdma.read(p5(tmp_path, rate), proc_root=tmp_path / "proc", kernel="6.8.0")
    assert [p.rate_gbps for p in net.ports] == [gbps] and net.problems == ()


def test_an_ibstat_rate_no_port_runs_fails_the_port() -> None:
    text = ("CA 'mlx5_0'\n\tCA type: MT4129\n\tNumber of ports: 1\n\tPort 1:\n\t\tState: Active\n"
            "\t\tPhysical state: LinkUp\n\t\tRate: 999999\n\t\tLink layer: InfiniBand\n")
    ports = ib.parse(text)
    assert [(p.rate_gbps, p.rate_text) for p in ports] == [(None, "999999")]
    assert [(v.word, v.what) for v in ib.judge(ports, {}) if not v.passed] == [("FAIL", "port rate")]


def test_a_malformed_pcie_link_speed_is_unknown_never_a_raise(tmp_path: Path) -> None:
    root = p5(tmp_path)
    (root / "bus" / "pci" / "devices" / "0000:4f:00.0" / "current_link_speed").write_text("1.2.3 GT/s PCIe\n")
    link = PciTree(root).link("0000:4f:00.0")
    assert link.speed_gts is None and link.text() == "0000:4f:00.0 (link unknown)"
