"""`clustercheck probe nccl-log --input FILE` on real NCCL_DEBUG=INFO captures from public issues (each
fixture names its thread): the network, GPUDirect RDMA and NICs per node judged against --expect, through
the real CLI (exit 0 passed, 1 failed, 3 not judged, 4 bad input)."""

from __future__ import annotations

from pathlib import Path

import pytest

from clustercheck.cli import main

LOGS = Path(__file__).parent / "fixtures" / "nccl-debug"
SOCKET = LOGS / "nccl-226-ec2-socket-fallback-no-ib-device.txt"
IB_DISABLED = LOGS / "nccl-tests-188-ib-disabled-using-network-socket.txt"
NO_GDR = LOGS / "nccl-1412-ib-without-gdrdma.txt"
GDR_DISTANCE = LOGS / "nv_peer_memory-56-ib-without-gdr-distance-socket-init.txt"
FOUR_NICS = LOGS / "nccl-707-a100-four-nics-gdrdma.txt"
SHARP = LOGS / "nccl-1357-h100-ibext-sharp-four-nics.txt"
EFA = LOGS / "aws-ofi-nccl-715-efa-pxn-gdrdma-timestamps.txt"
ROCE = LOGS / "nccl-392-roce-ring-via-net-ib-no-prefix.txt"
IBEXT_V8 = LOGS / "nccl-1453-h100-2node-tuning-unnamed.txt"
P3DN = Path(__file__).parent / "fixtures" / "tool-outputs" / "nccl-tests" / "allreduce-p3dn-2node-efa-nccl-debug-info.txt"


def probe(capsys: pytest.CaptureFixture[str], path: Path, *expect: str) -> tuple[int, list[str]]:
    args = ["probe", "nccl-log", "--input", str(path)]
    for e in expect:
        args += ["--expect", e]
    code = main(args)
    return code, capsys.readouterr().out.splitlines()


def line(lines: list[str], what: str) -> str:
    (found,) = [x for x in lines if f": {what}: " in x]
    return found


@pytest.mark.parametrize("path, expect, code, verdict", [
    (SOCKET, "net=IB", 1, "FAIL NCCL: network: NCCL fell back to TCP sockets: channel lines show Socket on "),
    # an excerpt: 11 of its hosts show no channel line, so Socket is not shown for them (never passed on the others)
    (SOCKET, "net=Socket", 3, "NOT JUDGED NCCL: network: not judged: no network line read from the NCCL log of "
                              "ip-172-31-1-[23,46],ip-172-31-11-39,"),
    (NO_GDR, "gdr=true", 1, "FAIL NCCL: GPUDirect RDMA: network channels without GDRDMA on swat1-04 (2 of 2 receive "
                            "channel(s)), GPUDirect RDMA expected; the usual culprit: nvidia_peermem not loaded"),
    (NO_GDR, "gdr=false", 0, "PASS NCCL: GPUDirect RDMA: off: no GDRDMA on swat1-04"),
    (FOUR_NICS, "nics=8", 1, "FAIL NCCL: NICs per node: 4 NIC(s) carried the network channels on 10-90-43-152 "
                             "(IB/0, IB/2, IB/4, IB/5); 8 expected per node"),
    (FOUR_NICS, "nics=4", 0, "PASS NCCL: NICs per node: 4 NIC(s) carried the network channels on 10-90-43-152"),
])
def test_the_acceptance_cases_fail_and_pass_as_expected(capsys, path, expect, code, verdict):
    got, lines = probe(capsys, path, expect)
    what = {"net": "network", "gdr": "GPUDirect RDMA", "nics": "NICs per node"}[expect.split("=")[0]]
    assert got == code, lines
    assert line(lines, what).startswith(verdict), lines


def test_a_socket_fallback_names_no_ib_device_as_the_culprit(capsys):
    _, lines = probe(capsys, SOCKET, "net=IB")
    assert "NET/IB : No device found on ip-172-31-1-[23,46,93],ip-172-31-11-39,ip-172-31-12-21,ip-172-31-5-233," \
           "ip-172-31-7-53,ip-172-31-8-135: no RDMA device visible to the ranks" in line(lines, "network")


def test_using_network_socket_alone_fails_ib_naming_nccl_ib_disable_but_cannot_pass_socket(capsys):
    code, lines = probe(capsys, IB_DISABLED, "net=IB")
    assert code == 1 and line(lines, "network").endswith(
        "'Using network' lines show Socket on user (user pid 852750, user pid 852751), IB expected; "
        "NCCL_IB_DISABLE=1 (set by environment) turns NCCL's "
        "IB transport off")
    code, lines = probe(capsys, IB_DISABLED, "net=Socket")
    assert code == 3 and line(lines, "network").startswith(
        "NOT JUDGED NCCL: network: not judged: no channel lines (only 'Using network' on user)")


def test_a_socket_init_line_beside_ib_channels_is_no_fallback_and_gdr_names_the_distance_rule(capsys):
    code, lines = probe(capsys, GDR_DISTANCE, "net=IB", "gdr=true", "nics=1")
    assert line(lines, "network") == "PASS NCCL: network: channels via NET/IB on master_node,secondary_node"
    gdr = line(lines, "GPUDirect RDMA")
    assert gdr.startswith("FAIL") and "NCCL: GPU Direct RDMA Disabled for GPU 2[2] / HCA 0 (distance 3 >= 2)" in gdr
    assert "NCCL_NET_GDR_LEVEL: the GPU-NIC PCI distance is beyond the level" in gdr
    assert line(lines, "NICs per node").startswith("PASS") and code == 1


def test_ibext_with_sharp_lists_four_nics_which_fails_eight(capsys):
    code, lines = probe(capsys, SHARP, "net=IB", "nics=8", "gdr=true")
    transport = line(lines, "transport")
    assert "network IBext" in transport and "SHARP/CollNet: collnet plugin SHARP" in transport and "NICs found 4" in transport
    # qh100-gpu20's lines show `Using network IBext` and P2P channels only: its network is not shown, not passed
    assert line(lines, "network").startswith("NOT JUDGED NCCL: network: not judged: no network line read from the NCCL "
                                             "log of qh100-gpu20 (no channel line via the network there; channels via "
                                             "the network on qh100-gpu19)")
    nics = line(lines, "NICs per node")
    assert nics.startswith("FAIL NCCL: NICs per node: NCCL found 4 NIC(s) on qh100-gpu19 (mlx5_0, mlx5_1, mlx5_4, "
                           "mlx5_5); NCCL found 4 NIC(s) on qh100-gpu20"), nics
    assert line(lines, "GPUDirect RDMA").startswith("NOT JUDGED") and code == 1


def test_efa_through_aws_ofi_with_pxn(capsys):
    code, lines = probe(capsys, EFA, "net=OFI", "gdr=true")
    assert code == 0 and "PXN used" in line(lines, "transport")
    assert line(lines, "network") == "PASS NCCL: network: channels via NET/AWS Libfabric on algo-1"
    code, lines = probe(capsys, EFA, "net=IB")
    assert code == 1 and "show AWS Libfabric on algo-1, IB expected" in line(lines, "network")


def test_roce_goes_through_nccl_ib_and_ibext_v8_is_ib(capsys):
    code, lines = probe(capsys, ROCE, "net=IB")
    assert code == 0 and line(lines, "network") == "PASS NCCL: network: channels via NET/IB on lines without a host name"
    code, lines = probe(capsys, IBEXT_V8, "net=IB", "gdr=true")
    assert code == 0 and line(lines, "network") == "PASS NCCL: network: channels via NET/IBext_v8 on h100clust-worker-1"


def test_no_channel_lines_is_not_judged_and_no_expectation_is_not_judged(capsys):
    code, lines = probe(capsys, P3DN, "net=OFI", "gdr=true")
    assert code == 3
    assert line(lines, "network").startswith("NOT JUDGED NCCL: network: not judged: no channel lines")
    assert line(lines, "GPUDirect RDMA").startswith("NOT JUDGED NCCL: GPUDirect RDMA: not judged: no channel lines")
    code, lines = probe(capsys, FOUR_NICS)  # nothing to judge against: nothing judged
    assert code == 5 and line(lines, "transport").startswith("NOT JUDGED NCCL: transport: not judged: no expectation "
                                                             "given (--expect net=IB gdr=true nics=8, or --platform P)")


def test_text_without_nccl_lines_is_bad_input(capsys, tmp_path):
    path = tmp_path / "x.txt"
    path.write_text("hello\n")
    code = main(["probe", "nccl-log", "--input", str(path)])
    err = capsys.readouterr().err
    assert code == 4 and "expected NCCL_DEBUG=INFO output" in err
    code = main(["probe", "nccl-log", "--input", str(FOUR_NICS), "--expect", "nics=0"])
    assert code == 4 and "nics: expected a NIC count above 0, got 0" in capsys.readouterr().err


# NVIDIA/nccl #707's title: "A100 GDRDMA failed. transport/net_ib.cc:818 Got completion with error 4, opcode 8983,
# len 0, vendor err 81". The fixture keeps the channel lines before it; these are that failure's lines as NCCL prints
# them on the same rank (host 10-90-43-152, GPU [0]): the WARN, then the error-return trace passing it up.
IB_ERROR = ("10-90-43-152:120890:121560 [0] transport/net_ib.cc:818 NCCL WARN NET/IB : Got completion with error 4, "
            "opcode 8983, len 0, vendor err 81")
ERROR_RETURN = "10-90-43-152:120890:121560 [0] NCCL INFO transport/net.cc:1067 -> 6"


def _edited_707(tmp_path: Path, *lines: str) -> Path:
    """nccl-707-a100-four-nics-gdrdma.txt with `lines` appended (what the audit's repro did)."""
    path = tmp_path / "nccl-707-edited.txt"
    path.write_text(FOUR_NICS.read_text().rstrip("\n") + "\n" + "\n".join(lines) + "\n")
    return path


def test_an_ib_completion_error_after_gdrdma_channels_fails_naming_the_host_gpu_and_line(capsys, tmp_path):
    path = _edited_707(tmp_path, IB_ERROR, ERROR_RETURN)
    at = len(FOUR_NICS.read_text().rstrip("\n").split("\n")) + 1
    code, lines = probe(capsys, path, "net=IB", "gdr=true")
    assert code == 1, lines  # it read "GPUDirect RDMA: on", exit 0, before
    assert line(lines, "NCCL errors") == (
        f"FAIL 10-90-43-152: NCCL errors: NCCL WARN on 10-90-43-152 GPU [0] (line {at}): \"NET/IB : Got completion "
        "with error 4, opcode 8983, len 0, vendor err 81\", then \"transport/net.cc:1067 -> 6\"; NCCL reported an error "
        "on its network path there: channel lines show what was set up, not that it worked")
    assert line(lines, "GPUDirect RDMA").startswith("PASS")  # the channels did show GDRDMA
    code, lines = probe(capsys, path)  # nothing expected: the error still fails
    assert code == 1 and line(lines, "NCCL errors").startswith("FAIL 10-90-43-152: NCCL errors: NCCL WARN")


def test_an_error_return_trace_alone_fails(capsys, tmp_path):
    code, lines = probe(capsys, _edited_707(tmp_path, ERROR_RETURN), "nics=4")
    assert code == 1 and line(lines, "NCCL errors").startswith(
        f"FAIL 10-90-43-152: NCCL errors: error return on 10-90-43-152 GPU [0] (line "
        f"{len(FOUR_NICS.read_text().rstrip(chr(10)).split(chr(10))) + 1}): \"transport/net.cc:1067 -> 6\"")


@pytest.mark.parametrize("path", sorted(LOGS.glob("*.txt")) + [P3DN], ids=lambda p: p.name)
def test_no_real_capture_reads_as_an_nccl_error(capsys, path):
    # RCCL's NUMA-balancing WARN (init.cc) is a host setting, not the network: amd-host judges it
    main(["probe", "nccl-log", "--input", str(path), "--expect", "nics=1"])
    out = capsys.readouterr().out
    assert "NCCL errors" not in out, out
