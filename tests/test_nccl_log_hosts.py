"""Every host a captured NCCL log names is judged on its own lines: one without network channels, or one whose NCCL
found no IB device, never passes `net`, `gdr` or `nics` on another host's channels (the fail-closed rule)."""

from __future__ import annotations

from pathlib import Path

import pytest

from clustercheck.fabric import nccl_net, transport
from test_probe_nccl_log import probe

# hostB found no RDMA device and says nothing of channels; hostA's IB channels must not pass for it
NO_IB_ON_B = """\
hostA:100:100 [0] NCCL INFO NCCL version 2.21.5+cuda12.4
hostA:100:100 [0] NCCL INFO Using network IB
hostA:100:150 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[0] [receive] via NET/IB/0/GDRDMA
hostA:100:150 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/0/GDRDMA
hostB:200:200 [0] NCCL INFO NCCL version 2.21.5+cuda12.4
hostB:200:200 [0] NCCL INFO NET/IB : No device found.
hostB:200:200 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.2<0>
"""


def test_a_host_without_channels_that_found_no_ib_device_fails_net_and_passes_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "cap.txt"
    path.write_text(NO_IB_ON_B)
    code, lines = probe(capsys, path, "net=IB", "gdr=true", "nics=1")
    net = next(x for x in lines if ": network: " in x)
    assert net.startswith("FAIL NCCL: network: NCCL found no IB device on hostB"), lines
    assert [x.split(" NCCL: ")[0] for x in lines if ": GPUDirect RDMA: " in x or ": NICs per node: " in x] == \
        ["NOT JUDGED", "NOT JUDGED"], lines
    assert all("hostB" in x for x in lines if x.startswith("NOT JUDGED")), lines
    assert code == 1


def test_a_host_with_only_p2p_channels_keeps_ib_from_passing_on_the_other_hosts(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "cap.txt"
    path.write_text(NO_IB_ON_B.replace("hostB:200:200 [0] NCCL INFO NET/IB : No device found.\n", "")
                    + "hostB:200:250 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read\n")
    code, lines = probe(capsys, path, "net=IB")
    assert [x for x in lines if ": network: " in x] == [
        "NOT JUDGED NCCL: network: not judged: no network line read from the NCCL log of hostB (no channel line via "
        "the network there; channels via the network on hostA)"], lines
    assert code == 3


def test_a_live_node_whose_log_only_chose_ib_is_silent() -> None:
    """A run's node whose log says `Using network IB` and shows only P2P channels: NCCL's choice, not traffic."""
    _, hosts = nccl_net.read("hostA:100:100 [0] NCCL INFO Using network IB\n"
                             "hostA:100:150 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[0] [receive] via NET/IB/0/GDRDMA\n"
                             "hostB:300:300 [0] NCCL INFO Using network IB\n"
                             "hostB:300:350 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read\n")
    found = transport.judge(hosts, {}, {"net": "IB", "gdr": True, "nics": 1}, ["hostA", "hostB"])
    assert [(f.what, f.passed) for f in found] == [("network", None), ("GPUDirect RDMA", None), ("NICs per node", None)]
    assert all("hostB" in f.detail for f in found)


RCCL_P2P = Path(__file__).parent / "fixtures" / "nccl-debug" / "rccl-6074-2x7900xtx-channels-p2p-ipc.txt"


def test_ring_gdr_1_without_network_channels_judges_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    """RCCL on one host, P2P/IPC channels only, then `use ring PXN 0 GDR 1`: NCCL's useGdr starts at 1 and is
    lowered only for a network connection, so GDR 1 there shows nothing of GPUDirect RDMA."""
    code, lines = probe(capsys, RCCL_P2P, "gdr=true")
    assert [x.split(" NCCL: ")[0] for x in lines if ": GPUDirect RDMA: " in x] == ["NOT JUDGED"], lines
    assert code == 3


def test_ring_gdr_0_without_network_channels_still_fails() -> None:
    _, hosts = nccl_net.read("hostA:1:1 [0] NCCL INFO Connected all rings, use ring PXN 0 GDR 0\n")
    assert hosts["hostA"].gdr is False
    assert [f.passed for f in transport.judge(hosts, {}, {"gdr": True})] == [False]


def test_one_ranks_socket_choice_is_not_masked_by_a_sibling_ranks_ib_channels(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """hostA's rank in pid 200 chose Socket; pid 100 on the same host has IB channels: the host is merged, the
    choice is not."""
    path = tmp_path / "mixed.txt"
    path.write_text("hostA:100:100 [0] NCCL INFO Using network IB\n"
                    "hostA:100:150 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[0] [receive] via NET/IB/0/GDRDMA\n"
                    "hostA:200:200 [1] NCCL INFO Using network Socket\n"
                    "hostB:300:300 [0] NCCL INFO Using network IB\n"
                    "hostB:300:350 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [receive] via NET/IB/0/GDRDMA\n")
    code, lines = probe(capsys, path, "net=IB")
    net = next(x for x in lines if ": network: " in x)
    assert net.startswith("FAIL NCCL: network: NCCL fell back to TCP sockets: 'Using network' lines show Socket on "
                          "hostA (hostA pid 200), IB expected"), lines
    assert code == 1


def test_network_pids_survive_a_round_trip_through_a_record() -> None:
    _, hosts = nccl_net.read("hostA:200:200 [1] NCCL INFO Using network Socket\n")
    h = hosts["hostA"]
    assert h.network_pids == (("Socket", "200"),)
    assert nccl_net.HostNet.from_dict(h.as_dict()) == h
