"""NCCL's transport between nodes, from any `NCCL_DEBUG=INFO` output: `clustercheck probe nccl-log
--input FILE` (nccl-tests, a training log, a torchrun log, one rank's NCCL_DEBUG_FILE or several
concatenated).

Reports the network NCCL used, the channel lines' transports, the NICs per host, GPUDirect RDMA, NVLS,
SHARP/CollNet and PXN; judges the expectations `net` (IB, Socket, OFI), `gdr` (true/false), `nics`
(per node) and `p2p` (true: SHM between two GPUs of one host fails, naming host and ranks) with the
rules of clustercheck/fabric/transport.py, which a run applies to each collective too (net, gdr and nics
to multi-node ones). A failure names its cause and the usual culprit. Nothing expected, or a log without
the lines a property needs, is not judged (exit 3), never a pass. Every `NCCL WARN` (but RCCL's NUMA-balancing
notice, amd-host's), or an error-return trace (`transport/net.cc:1067 -> 6`), fails whatever is expected, per host,
quoting the line (NVIDIA/nccl #707: GDRDMA channels, then `Got completion with error 4`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Mapping

from clustercheck.fabric import nccl_debug, nccl_net, nccl_summary, transport
from clustercheck.fabric.nccl_net import HostNet
from clustercheck.probes.base import Probe, ProbeParseError, ProbeSkip, ProbeVerdict, not_judged
from clustercheck.toolout import evidence_lines


@dataclass(frozen=True)
class NcclLog:
    parsed: nccl_debug.NcclDebug
    hosts: dict[str, HostNet]
    errors: tuple[transport.ErrorLine, ...] = ()
    offset: int = 0   # lines of the capture before the text parsed (its source note)


def parse(raw: str) -> NcclLog:
    lines = evidence_lines(raw)
    if not any("NCCL INFO " in line for line in lines):
        raise ProbeParseError("expected NCCL_DEBUG=INFO output (lines with 'NCCL INFO'); set NCCL_DEBUG=INFO and "
                              "NCCL_DEBUG_SUBSYS=INIT,NET (or ALL) for the run you capture")
    text = "\n".join(lines)
    parsed, hosts = nccl_net.read(text)
    skipped = len(raw.replace("\r\n", "\n").split("\n")) - len(lines)  # the source note
    hosts = {k: replace(h, garbled=tuple(n + skipped for n in h.garbled)) for k, h in hosts.items()}
    return NcclLog(parsed, hosts, tuple(replace(e, line=e.line + skipped) for e in transport.errors(text)), skipped)


def collect() -> str:
    raise ProbeSkip("this probe judges a captured NCCL_DEBUG=INFO log: give --input FILE; in a run every multi-node "
                    "NCCL collective is judged against the same expectations from its ranks' own logs")


def judge(log: NcclLog, expect: Mapping[str, Any]) -> list[ProbeVerdict]:
    env = log.parsed.env_dict
    version = f"NCCL {log.parsed.version}; " if log.parsed.version else ""
    nvls = {True: "NVLS multicast available", False: "NVLS multicast not available"}.get(
        log.parsed.nvls_capable, "") if log.parsed.nvls_capable is not None else ""
    facts = f"{version}{nccl_summary.summary(log.hosts, env)}" + (f"; {nvls}" if nvls else "")
    out = [ProbeVerdict("NCCL", "transport", True, facts, len(log.hosts))]
    # every host the log names is judged: one without network channel lines keeps the others' from passing
    named = tuple(dict.fromkeys([*log.hosts, *(t.host or "" for t in log.parsed.transports)]))
    findings = transport.judge(log.hosts, env, expect, nodes=named)
    if expect.get("p2p") is True:
        findings += transport.p2p_findings(log.parsed.transports, log.offset)
    failed = transport.error_findings(log.errors)
    if not findings and not failed:
        return [not_judged("NCCL", "transport", f"no expectation given (--expect net=IB gdr=true nics=8, or "
                           f"--platform P); {facts}")]
    for f in failed + findings:
        if f.passed is None:
            out.append(not_judged(f.subject, f.what, f.detail.removeprefix("not judged: "), f.measured))
        else:
            out.append(ProbeVerdict(f.subject, f.what, f.passed, f.detail, f.measured, f.expected))
    return out


PROBE = Probe(
    name="nccl-log",
    description="NCCL's transport between nodes from an NCCL_DEBUG=INFO log: network, GPUDirect RDMA, NICs per node",
    input_help="NCCL_DEBUG=INFO output (nccl-tests, a training or torchrun log, NCCL_DEBUG_FILE files concatenated)",
    scope="node",
    parse=parse,
    collect=collect,
    judge=judge,
    expect_keys=("net", "gdr", "nics", "p2p"),
)
