"""A multi-node nccl-tests capture whose own NCCL INFO lines show NCCL's TCP socket fallback (`Using network
Socket`, channels `via NET/Socket/0`) measured the sockets, not the RDMA fabric: `probe nccl-tests` leaves
its fabric floor not judged, naming the host and the line, never a PASS (clustercheck/probes/nccl_tests.py,
reading the lines with fabric/nccl_net.py). The capture is the real 2-node H100 run with those lines added
(its second line says so); the same run without them still passes at 800 Gb/s."""

from __future__ import annotations

from pathlib import Path

import pytest

from clustercheck.cli import main

NCCL = Path(__file__).parent / "fixtures" / "tool-outputs" / "nccl-tests"
SOCKET = NCCL.parent.parent / "nccl-tests-derived" / "allreduce-h100-2node-16rank-mpirun-socket.txt"
IB = NCCL / "allreduce-h100-2node-16rank-mpirun.txt"


def _busbw(capsys: pytest.CaptureFixture[str], path: Path, *expect: str) -> tuple[int, str]:
    code = main(["probe", "nccl-tests", "--input", str(path), *[a for e in expect for a in ("--expect", e)]])
    return code, next(l for l in capsys.readouterr().out.splitlines() if ": busbw: " in l)


@pytest.mark.parametrize("expect", [("fabric_gbps=800",), ("busbw_min_multinode=10",)])
def test_a_socket_fallback_capture_leaves_the_fabric_floor_not_judged(capsys, expect) -> None:
    code, line = _busbw(capsys, SOCKET, *expect)
    assert code == 3 and line.startswith("NOT JUDGED all_reduce_perf: busbw: "), line
    assert "ztan-mig-235z's network is NCCL's Socket fallback (line 6: 'ztan-mig-235z:6899:6899 [0] NCCL INFO " \
           "Using network Socket') (and 1 more host(s))" in line, line


def test_the_same_run_without_socket_lines_is_judged(capsys) -> None:
    code, line = _busbw(capsys, IB, "fabric_gbps=800")
    assert code == 0 and line.startswith("PASS all_reduce_perf: busbw: "), line
