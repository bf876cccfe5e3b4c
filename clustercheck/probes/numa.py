"""GPU<->NIC NUMA affinity: every GPU's nearest NIC must be on its own CPU socket.

A GPU whose nearest NIC is only reachable at SYS crosses the inter-socket link (QPI/UPI/xGMI) for every
GPUDirect RDMA transfer (nvidia-smi topo -m legend). Evidence: `nvidia-smi topo -m`. The matrix's GPUs are
held against the platform's `gpu_count` as topo holds them: a GPU lost from the matrix has no affinity to judge.
"""

from __future__ import annotations

from typing import Any, Mapping

from clustercheck.probes import nvsmi, tool, topo
from clustercheck.probes.base import Probe, ProbeSkip, ProbeVerdict, not_judged


def judge(m: topo.TopoMatrix, expect: Mapping[str, Any]) -> list[ProbeVerdict]:
    # a matrix not whole (cut off, a row twice) fails first: cut below the GPUs' rows it has no NIC rows,
    # and a skip for "no NIC" would hide it
    out = [ProbeVerdict("node", "topology matrix", False, "; ".join(m.problems[:8]), len(m.problems), 0)] \
        if m.problems else []
    out += topo.gpu_count(m, expect)  # a GPU lost from the matrix has no affinity to judge: it must not go unseen
    if not m.nics and m.problems:
        return out + [not_judged(g, "GPU-NIC NUMA affinity", "no NIC row in the matrix, which is not whole "
                                 "(see the topology matrix verdict)") for g in m.gpus]
    if not m.nics:  # a whole matrix: every header column has its row, so the header names no NIC
        if any(not v.passed for v in out):
            return out
        raise ProbeSkip("no NIC in the topology matrix: nothing to pair GPUs with")
    numa = dict(m.numa)
    for g in m.gpus:
        nic, level = topo._nearest_nic(m, g)  # type: ignore[misc]
        where = f" (GPU NUMA node {numa[g]})" if numa.get(g) not in (None, "", "N/A") else ""
        ok = level != "SYS"
        out.append(ProbeVerdict(g, "GPU-NIC NUMA affinity", ok,
                                f"nearest NIC {m.nic_label(nic)} at {level}{where}" +
                                ("" if ok else ": every RDMA transfer crosses the CPU socket interconnect"),
                                measured=level, expected="PIX, PXB, PHB or NODE"))
    return out


def parse(text: str) -> topo.TopoMatrix:
    tool.refuse_crashed(text)
    return topo.parse(text)


def collect_text() -> str:
    """`nvidia-smi topo -m` through nvsmi.run: a failing nvidia-smi is an error, only a missing one a skip."""
    return nvsmi.run("topo", "-m")


PROBE = Probe(
    name="numa",
    description="GPU<->NIC NUMA affinity (nearest NIC of each GPU on the same socket)",
    input_help="`nvidia-smi topo -m` output",
    scope="gpu",
    parse=parse,
    collect=collect_text,
    judge=judge,
    expect_keys=("gpu_count",),
    by_index=True,
)
