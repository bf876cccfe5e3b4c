"""NCCL log readers are linear on a line with a long run of blanks: `.+?\\s*$` and an unanchored `\\s+tail$`
tried the blanks from every one of them (23 s for an 80k-blank `Using network` line). Each input here is
6 MB, where the quadratic patterns take hours; each is parsed, not timed (speed goals live in benchmarks/)."""

from __future__ import annotations

from clustercheck.fabric import nccl_debug, nccl_net

BLANKS = " " * (6 << 20)
PREFIX = "node1:101:101 [0] NCCL INFO "


def test_using_network_with_a_run_of_blanks_is_read():
    assert ".+?" not in nccl_net._NETWORK.pattern
    hosts = nccl_net.scan(PREFIX + "Using network x" + BLANKS + "y\n")
    (name,) = hosts["node1"].networks
    assert name.startswith("x ") and name.endswith(" y") and len(name) == len(BLANKS) + 2


def test_socket_and_gdr_lines_with_a_run_of_blanks_are_read():
    text = (PREFIX + "NET/Socket : Using [0]eth0" + BLANKS + "[1]eth1\n"
            + PREFIX + "NET/IB : GPU Direct RDMA Disabled for HCA 0" + BLANKS + "'mlx5_0'\n"
            + PREFIX + "NET/IB : GPU Direct RDMA Enabled for HCA 1" + BLANKS + "'mlx5_1'\n")
    for pattern in (nccl_net._SOCKET, nccl_net._GDR_OFF, nccl_net._GDR_ON):
        assert ".+?" not in pattern.pattern
    host = nccl_net.scan(text)["node1"]
    assert host.socket_ifs == ("eth0", "eth1")
    assert host.gdr_disabled[0].endswith("'mlx5_0'") and host.gdr_enabled[0].endswith("'mlx5_1'")


def test_channel_via_with_a_run_of_blanks_is_read():
    assert nccl_debug._VIA_TAIL.pattern.startswith(r"(?<!\s)")
    parsed = nccl_debug.parse(PREFIX + "Channel 00/0 : 0[0] -> 1[1] via P2P/IPC" + BLANKS + "x\n")
    (t,) = parsed.transports
    assert t.via.startswith("P2P/IPC ") and t.via.endswith("x")
