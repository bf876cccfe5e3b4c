"""nccl-log probe, fail closed: real captures (tests/fixtures/nccl-debug/, source on line 1) edited the way
a broken run prints them must never read as a pass."""

from __future__ import annotations

from pathlib import Path

import pytest

from test_probe_nccl_log import line, probe

LOGS = Path(__file__).parent / "fixtures" / "nccl-debug"
FOUR_NICS = LOGS / "nccl-707-a100-four-nics-gdrdma.txt"
AT = len(FOUR_NICS.read_text().rstrip("\n").split("\n")) + 1  # the first line appended to it


def edited_707(tmp_path: Path, *lines: str) -> Path:
    """nccl-707-a100-four-nics-gdrdma.txt (IB, GDRDMA, one host) with `lines` appended."""
    path = tmp_path / "nccl-707-edited.txt"
    path.write_text(FOUR_NICS.read_text().rstrip("\n") + "\n" + "\n".join(lines) + "\n")
    return path


def test_two_channel_records_glued_on_one_line_are_not_judged_as_ib(capsys, tmp_path):
    # a real IB/GDRDMA channel line of #707 with a Socket record of the peer glued after it
    glued = ("10-90-43-152:120890:121560 [0] NCCL INFO Channel 01 : 2[c7000] -> 0[87000] [receive] via "
             "NET/IB/5/GDRDMA Channel 01/0 : 1[0] -> 0[0] [receive] via NET/Socket/0")
    code, lines = probe(capsys, edited_707(tmp_path, glued), "net=IB", "gdr=true")
    assert code != 0, lines
    for what in ("network", "GPUDirect RDMA"):
        assert line(lines, what).startswith(f"NOT JUDGED NCCL: {what}: not judged: garbled channel line(s)"), lines
        assert f"line {AT} on 10-90-43-152" in line(lines, what)
    code, lines = probe(capsys, FOUR_NICS, "net=IB", "gdr=true")  # the capture as printed still passes
    assert code == 0, lines


TWO_NODE = LOGS / "nccl-1453-h100-2node-tuning-unnamed.txt"
CUDA_WARN = ("[0] h100clust-worker-1:497888:498087 [0] enqueue.cc:1234 NCCL WARN Cuda failure 'an illegal memory "
             "access was encountered'")
PROXY_WARN = ("[0] h100clust-worker-1:497888:498090 [3] proxy.cc:1456 NCCL WARN [Service thread] Error encountered "
              "progressing operation=Connect, res=3, closing connection")


def edited(tmp_path: Path, base: Path, *lines: str) -> Path:
    path = tmp_path / f"{base.stem}-edited.txt"
    path.write_text(base.read_text().rstrip("\n") + "\n" + "\n".join(lines) + "\n")
    return path


def test_a_healthy_two_node_ib_log_passes_as_captured(capsys):
    code, lines = probe(capsys, TWO_NODE, "net=IB", "gdr=true")
    assert code == 0 and not [x for x in lines if "NCCL errors" in x], lines


@pytest.mark.parametrize("warn", [CUDA_WARN, PROXY_WARN], ids=["enqueue-cuda-failure", "proxy-service-thread"])
def test_an_nccl_warn_outside_the_network_code_fails_naming_host_and_gpu(capsys, tmp_path, warn):
    code, lines = probe(capsys, edited(tmp_path, TWO_NODE, warn), "net=IB", "gdr=true")
    assert code == 1, lines
    got = line(lines, "NCCL errors")
    dev = warn.split("[")[2].split("]")[0]
    assert got.startswith(f"FAIL h100clust-worker-1: NCCL errors: NCCL WARN on h100clust-worker-1 GPU [{dev}]"), got
    assert warn.split("NCCL WARN ")[1] in got


def test_every_warn_of_a_line_and_its_error_return_are_read(capsys, tmp_path):
    # two WARNs glued on one line, then an error-return trace glued after them
    glued = (CUDA_WARN + " " + PROXY_WARN.removeprefix("[0] ")
             + " h100clust-worker-1:497888:498087 [0] NCCL INFO enqueue.cc:1300 -> 1")
    code, lines = probe(capsys, edited(tmp_path, TWO_NODE, glued), "nics=1")
    assert code == 1, lines
    got = line(lines, "NCCL errors")
    assert "Cuda failure 'an illegal memory access was encountered'" in got
    assert "then \"enqueue.cc:1300 -> 1\"" in got and "1 more error line(s)" in got, got
    from clustercheck.fabric import transport
    assert sorted(e.text for e in transport.errors(glued)) == sorted([
        CUDA_WARN.split("NCCL WARN ")[1], PROXY_WARN.split("NCCL WARN ")[1], "enqueue.cc:1300 -> 1"])


SHM_8X = LOGS / "deepseek-coder-v2-29-8xa100pcie-shm.txt"   # every GPU pair of fd8c67c1741e via SHM
P2P_2X = LOGS / "rccl-6074-2x7900xtx-channels-p2p-ipc.txt"  # two GPUs of one host via P2P/IPC


def test_shm_between_gpus_of_one_host_fails_p2p_naming_host_and_ranks(capsys):
    code, lines = probe(capsys, SHM_8X, "p2p=true")
    assert code == 1, lines
    got = line(lines, "P2P between GPUs")
    assert got.startswith("FAIL fd8c67c1741e: P2P between GPUs: SHM between ranks "), got
    assert "7 -> 6" in got and "on fd8c67c1741e (line 4," in got, got


def test_p2p_between_gpus_passes_p2p(capsys):
    code, lines = probe(capsys, P2P_2X, "p2p=true")
    assert line(lines, "P2P between GPUs").startswith("PASS"), lines
