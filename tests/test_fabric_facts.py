"""A node's network facts (clustercheck/fabric/rdma.py, pcitree.py, linerate.py) read from sysfs trees
built from real captures of real machines (tests/sysfs_tree.py says how): the relation of every GPU and
NIC is checked against nvidia-smi topo -m of the same machine, the line rate is summed from the ports,
and an unreadable or inconsistent tree is a problem of the node, never a pass."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from clustercheck.fabric import linerate, rdma
from clustercheck.fabric.pcitree import PciTree
from clustercheck.probes import ib, topo

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sysfs_tree import add_ports, from_lspci, from_lstopo, strip_source  # noqa: E402

FIX = Path(__file__).parent / "fixtures"
HOSTS = FIX / "hosts"
TOOLS = FIX / "tool-outputs"


def _text(path: Path) -> str:
    return strip_source(path.read_text())


def _ib_ports(path: Path) -> list[tuple[str, int, str, str | None, float | None, str | None]]:
    return [(p.device, p.port, p.state, p.phys_state, p.rate_gbps, p.link_layer)
            for p in ib.parse(path.read_text())]


def asus(tmp_path: Path) -> Path:
    """ASUS ESC8000A-E12 (host coyote2): lspci -tv, lspci -vvv, numactl and ibv_devinfo of the same machine.
    The four RDMA devices are the ConnectX-7 functions in PCI order (21:00.0/.1, 81:00.0/.1), as nvidia-smi's
    NIC legend of the same host pairs them (NIC0/NIC1 PIX to each other, near GPU0/GPU1)."""
    h = HOSTS / "asus-esc8000a-e12"
    tree = from_lspci(_text(h / "lspci-tv.txt"), _text(h / "lspci-vvv.txt"), _text(h / "numactl.txt"))
    nics = ["0000:21:00.0", "0000:21:00.1", "0000:81:00.0", "0000:81:00.1"]
    add_ports(tree, _ib_ports(TOOLS / "ibv_devinfo" / "4x-cx7-all-port-down-ethernet-stelline-asus.txt"),
              {f"mlx5_{i}": bdf for i, bdf in enumerate(nics)})
    return tree.write(tmp_path / "sys")


def wrx90(tmp_path: Path) -> Path:
    h = HOSTS / "puget-wrx90"
    tree = from_lspci(_text(h / "lspci-tv.txt"), _text(h / "lspci-vvv.txt"), _text(h / "numactl.txt"))
    add_ports(tree, _ib_ports(h / "ibv_devinfo.txt"), {"mlx5_0": "0000:21:00.0", "mlx5_1": "0000:21:00.1"})
    return tree.write(tmp_path / "sys")


def p5(tmp_path: Path) -> Path:
    """One PCIe switch of an AWS p5.48xlarge (lstopo -v): an H100, one of its four EFA NICs (Port1State=4,
    ACTIVE) and an NVMe drive. fi_info names the EFA link's speed (100 Gb/s) and state (FI_LINK_UP)."""
    tree = from_lstopo(_text(HOSTS / "aws-p5" / "lstopo-fi_info.txt"))
    add_ports(tree, [("rdmap79s0", 1, "ACTIVE", "LinkUp", 100.0, "Ethernet")], {"rdmap79s0": "0000:4f:00.0"})
    return tree.write(tmp_path / "sys")


def _topo(name: str) -> topo.TopoMatrix:
    return topo.parse((TOOLS / "nvidia-smi-topo" / name).read_text())


@pytest.mark.parametrize("build, topo_file, gpus, nics", [
    (asus, "asus-esc8000a-4x-rtx6000ada-4nic-mlx5.txt",
     ["0000:01:00.0", "0000:41:00.0", "0000:c1:00.0", "0000:e1:00.0"],
     ["0000:21:00.0", "0000:21:00.1", "0000:81:00.0", "0000:81:00.1"]),
    (wrx90, "puget-wrx90-2gpu-phb-2nic.txt", ["0000:c1:00.0", "0000:c2:00.0"], ["0000:21:00.0", "0000:21:00.1"]),
])
def test_every_gpu_and_nic_relation_is_what_nvidia_smi_topo_says_on_the_same_machine(tmp_path, build, topo_file,
                                                                                     gpus, nics):
    root = build(tmp_path)
    tree = PciTree(root)
    assert tree.problems == [] and [g.bdf for g in tree.gpus()] == gpus  # the audio functions are not GPUs
    m = _topo(topo_file)
    names = {**{f"GPU{i}": b for i, b in enumerate(gpus)}, **{f"NIC{i}": b for i, b in enumerate(nics)}}
    checked = 0
    for a, bdf_a in names.items():
        for b, bdf_b in names.items():
            if a < b:
                path = tree.path(bdf_a, bdf_b)
                assert path is not None and path.level == m.level(a, b), (a, b, path)
                checked += 1
    assert checked == len(names) * (len(names) - 1) // 2


def test_asus_ports_are_down_so_the_node_has_no_line_rate_and_the_ib_probe_fails_each(tmp_path):
    root = asus(tmp_path)
    net = rdma.read(root, proc_root=tmp_path / "proc", kernel="6.8.0")
    assert [p.name for p in net.ports] == ["mlx5_0/1", "mlx5_1/1", "mlx5_2/1", "mlx5_3/1"]
    assert {p.state for p in net.ports} == {"DOWN"} and {p.link_layer for p in net.ports} == {"Ethernet"}
    # ibv_devinfo prints no physical state and no speed for a port that is down, so the tree built from it
    # has neither file: a port directory the kernel would never leave so is a problem of the node
    assert sorted(p.split(": ", 1)[0] + ": " + p.rsplit("/", 1)[1] for p in net.problems) == sorted(
        f"mlx5_{i}/1: {name} cannot be read" for i in range(4) for name in ("phys_state", "rate"))
    # the NICs hang off their own root complexes: NODE to the GPUs of their socket, not GPU-facing
    assert {d: (v["to"], v["level"]) for d, v in net.nic_paths.items()} == {
        "mlx5_0": ("0000:01:00.0", "NODE"), "mlx5_1": ("0000:01:00.0", "NODE"),
        "mlx5_2": ("0000:c1:00.0", "NODE"), "mlx5_3": ("0000:c1:00.0", "NODE")}
    rate = linerate.of_node(net)
    assert rate.gbps is None and rate.why.startswith("its network facts have 8 problem(s)")
    clean = rdma.NetFacts(net.ports, net.gdr, net.nic_paths, net.nvme_paths, net.gpus)
    assert "none of its 4 RDMA port(s) shares a PCIe switch with a GPU" in linerate.of_node(clean).why
    named = linerate.of_node(clean, ["mlx5_0", "mlx5_1"])
    assert named.gbps is None and named.why == "none of the 2 port(s) named (mlx5_0, mlx5_1) is ACTIVE/LinkUp"
    verdicts = ib.judge(ib.collect(root), {})
    assert [v.what for v in verdicts if v.what == "sysfs"] == ["sysfs"] * 8 and all(not v.passed for v in verdicts)
    assert [v.subject for v in verdicts if v.what == "port state"] == [f"mlx5_{i}/1" for i in range(4)]
    # no NVIDIA driver on the stand-in /proc, no peer memory: GPUDirect RDMA not available, and why
    assert net.gdr is not None and not net.gdr.available
    assert net.gdr.text() == ("not available: no nvidia_peermem (or nv_peer_mem) loaded; no NVIDIA driver version in "
                              "/proc/driver/nvidia/version")


def test_wrx90_nvme_paths_name_the_gpu_and_the_links_lspci_reports(tmp_path):
    root = wrx90(tmp_path)
    net = rdma.read(root, proc_root=tmp_path / "proc", kernel="6.8.0")
    assert sorted(net.nvme_paths) == ["0000:05:00.0", "0000:06:00.0", "0000:07:00.0", "0000:08:00.0",
                                      "0000:0b:00.0", "0000:0c:00.0", "0000:0d:00.0", "0000:0e:00.0"]
    path = net.nvme_paths["0000:05:00.0"]
    # the drives sit under 0000:00's root port 03.1, the GPUs under 0000:c0: another host bridge, one NUMA node
    assert (path["to"], path["level"]) == ("0000:c1:00.0", "NODE")
    assert path["via"][:5] == ["0000:04:10.0", "0000:03:00.0", "0000:02:00.0", "0000:01:00.0", "0000:00:03.1"]
    # lspci -vvv gave the GPU's link: trained down to 2.5 GT/s x16 (idle), 0.25 GB/s a lane: 4 GB/s
    assert path["bottleneck"] == "0000:c1:00.0 2.5 GT/s x16 (below its max)" and path["bottleneck_gbs"] == 4.0


def test_p5_efa_is_gpu_facing_its_rate_is_the_line_rate_and_the_nvme_path_is_its_gen4_x8_link(tmp_path):
    root = p5(tmp_path)
    proc = tmp_path / "proc" / "driver" / "nvidia"
    proc.mkdir(parents=True)
    # the driver banner of NVIDIA's open kernel modules (NVIDIA/open-gpu-kernel-modules README, "NVRM version")
    (proc / "version").write_text("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  535.43.02  Release Build\n")
    net = rdma.read(root, proc_root=tmp_path / "proc", kernel="5.15.0-1048-aws")
    assert net.problems == () and net.gpus == ("0000:53:00.0",)
    efa = net.nic_paths["rdmap79s0"]
    assert (efa["to"], efa["level"], efa["via"]) == ("0000:53:00.0", "PIX", ["0000:46:01.0", "0000:45:00.0", "0000:46:01.4"])
    assert efa["bottleneck"] == "0000:4f:00.0 16 GT/s x8" and efa["bottleneck_gbs"] == 15.75
    nvme = net.nvme_paths["0000:54:00.0"]
    assert (nvme["to"], nvme["level"], nvme["bottleneck_gbs"]) == ("0000:53:00.0", "PIX", 15.75)
    rate = linerate.of_node(net)
    assert rate.gbps == 100.0 and rate.ports == ("rdmap79s0/1",) and rate.why == "1 active of 1 GPU-facing port(s)"
    assert net.gdr is not None and net.gdr.dmabuf and net.gdr.available and "dma-buf" in net.gdr.text()
    assert rdma.NetFacts.from_dict(net.as_dict()) == net


def test_peer_memory_makes_gdr_available_without_dmabuf(tmp_path):
    root = p5(tmp_path)
    (root / "module" / "nvidia_peermem").mkdir(parents=True)
    (root / "module" / "nvidia_peermem" / "version").write_text("535.43.02\n")
    net = rdma.read(root, proc_root=tmp_path / "proc", kernel="5.4.0")
    assert net.gdr is not None and net.gdr.available and not net.gdr.dmabuf
    assert net.gdr.text() == "available: peer memory (/sys/module/nvidia_peermem/version)"


def test_an_inconsistent_or_unreadable_tree_is_a_problem_never_a_pass(tmp_path):
    root = p5(tmp_path)
    port = root / "class" / "infiniband" / "rdmap79s0" / "ports" / "1"
    (port / "phys_state").write_text("2: Polling\n")          # ACTIVE but the link is not up
    (port / "rate").unlink()
    (port / "rate").mkdir()                                    # unreadable as a file
    net = rdma.read(root, proc_root=tmp_path / "proc", kernel="6.8.0")
    assert any("state ACTIVE but physical state Polling" in p for p in net.problems), net.problems
    assert any("rate" in p and "cannot be read" in p for p in net.problems), net.problems
    rate = linerate.of_node(net)
    assert rate.gbps is None and rate.why.startswith("its network facts have 2 problem(s)")
    verdicts = ib.judge(ib.collect(root), {})
    assert [v.what for v in verdicts if not v.passed] == ["sysfs", "sysfs", "port state"]


def test_a_device_without_its_pci_function_and_an_unlistable_class_dir_are_problems(tmp_path):
    root = p5(tmp_path)
    os.unlink(root / "class" / "infiniband" / "rdmap79s0" / "device")
    net = rdma.read(root, proc_root=tmp_path / "proc", kernel="6.8.0")
    assert net.problems == ("rdmap79s0: no PCI device behind it "
                            f"({root / 'class' / 'infiniband' / 'rdmap79s0' / 'device'} is not a link to one)",)
    other = tmp_path / "other"
    (other / "class").mkdir(parents=True)
    (other / "class" / "infiniband").write_text("not a directory\n")
    assert any("cannot be listed" in p for p in rdma.read(other, kernel="6.8.0").problems)


def test_an_rdma_device_whose_ports_dir_lists_no_port_fails_naming_it_never_no_device(tmp_path):
    """An RDMA device with an empty ports/ directory added no port and no problem: the ib probe then
    skipped with "no InfiniBand/RoCE device". It is a problem of the node naming the device, the probe's
    FAIL, and run-side (the facts a rank records) the node's line rate is unknown, naming it."""
    from clustercheck.judging import fabric

    root = p5(tmp_path)
    ports = root / "class" / "infiniband" / "rdmap79s0" / "ports"
    shutil.rmtree(ports)
    ports.mkdir()
    net = rdma.read(root, proc_root=tmp_path / "proc", kernel="6.8.0")
    said = f"rdmap79s0: {ports} lists no port"
    assert net.ports == () and net.problems == (said,), net.problems
    verdicts = ib.judge(ib.collect(root), {})
    assert [(v.word, v.subject, v.detail) for v in verdicts] == [
        ("FAIL", "node", f"{said}: the node's RDMA facts cannot be trusted")]
    recorded = rdma.NetFacts.from_dict(net.as_dict())  # as judging/platform.py records it and a run reads it
    assert recorded.problems == (said,) and linerate.of_node(recorded).gbps is None
    run = fabric.run_fabric({"node1": {"network": net.as_dict()}}, "nccl", {}, fabric.FabricRule())
    assert run.node_rate is not None and run.node_rate[0] is None and said in run.node_rate[1], run.node_rate


def test_the_run_line_rate_is_the_most_any_node_has(tmp_path):
    good = rdma.read(p5(tmp_path / "a"), proc_root=tmp_path / "proc", kernel="6.8.0")
    root_b = p5(tmp_path / "b")
    (root_b / "class" / "infiniband" / "rdmap79s0" / "ports" / "1" / "state").write_text("1: DOWN\n")
    down = rdma.read(root_b, proc_root=tmp_path / "proc", kernel="6.8.0")
    rate = linerate.of_run({"node1": down, "node2": good, "node3": None})
    assert rate.gbps == 100.0 and rate.why.startswith("node2: 1 active of 1 GPU-facing port(s)")
    assert linerate.of_node(down).gbps is None
    assert linerate.of_run({"node1": None}).why == "node1: no network facts read"


def test_an_active_port_at_rate_0_leaves_the_line_rate_unknown_never_a_floor_of_0(tmp_path: Path) -> None:
    """An EFA port ACTIVE/LinkUp whose kernel rate reads 0 Gb/sec on both nodes: a sum of 0 would make the
    fabric floor >= 0.9 * 0 and pass every busbw; the rate is unknown instead, and the floor not judged."""
    from clustercheck.judging import fabric

    nets = {}
    for node in ("node1", "node2"):
        root = p5(tmp_path / node)
        (root / "class" / "infiniband" / "rdmap79s0" / "ports" / "1" / "rate").write_text("0 Gb/sec (1X SDR)\n")
        nets[node] = rdma.read(root, proc_root=tmp_path / "proc", kernel="6.8.0")
    rate = linerate.of_node(nets["node1"])
    assert rate.gbps is None and rate.why.startswith("rate 0 on rdmap79s0/1"), rate.why
    run = linerate.of_run(nets)
    assert run.gbps is None and "rate 0 on rdmap79s0/1" in run.why
    rule = fabric.FabricRule()
    facts = {node: {"network": net.as_dict()} for node, net in nets.items()}
    floor = fabric.floor(rule, "all_reduce", fabric.line_rate({}, rule, fabric.run_fabric(facts, "nccl", {}, rule)
                                                              .node_rate), "c")
    assert isinstance(floor, str) and "line rate unknown" in floor and "rate 0 on rdmap79s0/1" in floor


def test_an_expected_port_rate_of_0_is_refused_naming_the_key(capsys: pytest.CaptureFixture[str]) -> None:
    from clustercheck.cli import main

    code = main(["probe", "ib", "--input", str(TOOLS / "ibstat" / "2x-connectx3-mlx4-dualport-fdr56-active.txt"),
                 "--expect", "ib_rate_gbps=0"])
    assert code == 4 and "ib_rate_gbps: expected a port rate in Gb/s above 0, got 0" in capsys.readouterr().err


def test_each_problem_travels_with_its_fields_and_a_malformed_one_is_the_harness_error_naming_it(tmp_path, monkeypatch):
    """The facts travel from a rank as JSON: each problem keeps what rdma.py found it to be (its device or port,
    a file unread, the NICs' own or not), and an entry of another shape is never dropped (text alone is how
    records before 2026-11-29 hold it: tests/test_rdma_problems_written_before.py)."""
    import json

    from clustercheck.errors import HarnessError
    from clustercheck.judging import platform

    root = p5(tmp_path)
    os.unlink(root / "class" / "infiniband" / "rdmap79s0" / "device")
    net = rdma.read(root, proc_root=tmp_path / "proc", kernel="6.8.0")
    sent = json.loads(json.dumps(net.as_dict()))
    assert sent["problems"] == [{"subject": "rdmap79s0", "text": net.problems[0], "unread": False, "nic": False}]
    assert rdma.NetFacts.from_dict(sent) == net
    for entry in ({**sent["problems"][0], "nic": "no"}, {"text": net.problems[0]}):
        with pytest.raises(HarnessError, match=r"^network facts: problem .* is not \{subject"):
            rdma.NetFacts.from_dict({**sent, "problems": [entry]})
    with pytest.raises(HarnessError, match="is not a list"):
        rdma.NetFacts.from_dict({**sent, "problems": net.problems[0]})

    def broken(*a, **k):
        raise RuntimeError("a reader bug")

    monkeypatch.setattr(rdma, "read", broken)  # the node's facts when the reader itself breaks: a problem, read back
    fallback = rdma.NetFacts.from_dict(platform._network())
    assert fallback.problems == ("the network facts could not be read: RuntimeError: a reader bug",)
    assert linerate.of_node(fallback).gbps is None
