"""NCCL and CUDA environment settings known to destroy collective performance.

Each entry names the variable, the values that hurt and why, after NCCL's environment variable reference
(https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html) and CUDA's programming guide
(CUDA_LAUNCH_BLOCKING). A platform may allow some on purpose (`expect: {nccl_env_allow: [...]}`), e.g. EFA
benchmarking runs with NCCL_P2P_DISABLE=1 to force traffic through the NICs (seeds/003).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any, Mapping

from clustercheck.probes import Probe, ProbeParseError, ProbeVerdict, evidence_lines

_ASSIGN = re.compile(r"^(?:export\s+|declare -x\s+)?([A-Za-z_][A-Za-z0-9_]*)=(.*)$")
_PREFIXES = ("NCCL_", "CUDA_", "TORCH_NCCL_", "FI_")

# variable -> (harmful when the value, normalised, is one of these; why)
HARMFUL: dict[str, tuple[tuple[str, ...], str]] = {
    "NCCL_P2P_DISABLE": (("1",), "disables NVLink/PCIe peer-to-peer between GPUs; intra-node traffic goes "
                                 "through host memory"),
    "NCCL_P2P_LEVEL": (("LOC", "0"), "LOC never uses peer-to-peer between GPUs"),
    "NCCL_SHM_DISABLE": (("1",), "disables shared-memory transport; with P2P off, traffic goes to the NIC"),
    "NCCL_IB_DISABLE": (("1",), "disables InfiniBand/RoCE; inter-node traffic falls back to TCP sockets"),
    "NCCL_NET_GDR_LEVEL": (("LOC", "0"), "LOC disables GPUDirect RDMA; NIC traffic is staged in host memory"),
    "NCCL_NVLS_ENABLE": (("0",), "disables NVLink SHARP on NVSwitch systems; all_reduce busbw drops to ring/tree"),
    "NCCL_MAX_NCHANNELS": (("1",), "one channel cannot fill NVLink or several NICs"),
    "NCCL_MAX_CTAS": (("1",), "one CTA per collective cannot fill NVLink or several NICs"),
    "NCCL_DEBUG": (("TRACE",), "TRACE logs every call and slows collectives"),
    "CUDA_LAUNCH_BLOCKING": (("1",), "makes every kernel launch synchronous"),
}


@dataclass(frozen=True)
class Environment:
    variables: tuple[tuple[str, str], ...]   # relevant variables only (NCCL_*, CUDA_*, ...)
    total: int                               # assignments read


def parse(text: str) -> Environment:
    found: list[tuple[str, str]] = []
    total = 0
    for line in evidence_lines(text):
        m = _ASSIGN.match(line.strip())
        if not m:
            continue
        total += 1
        value = m.group(2).strip().strip("'\"")
        if m.group(1).startswith(_PREFIXES):
            found.append((m.group(1), value))
    if not total:
        raise ProbeParseError("expected `env` output: KEY=VALUE lines such as NCCL_P2P_DISABLE=1")
    return Environment(tuple(found), total)


def judge(env: Environment, expect: Mapping[str, Any]) -> list[ProbeVerdict]:
    allowed = set(expect.get("nccl_env_allow", ()))
    out = []
    for name, value in env.variables:
        if name not in HARMFUL:
            continue
        bad_values, why = HARMFUL[name]
        if value.upper() not in bad_values:
            continue
        ok = name in allowed
        out.append(ProbeVerdict(name, "NCCL environment", ok,
                                f"{name}={value}: {why}" + (" (allowed by the platform's nccl_env_allow)" if ok else ""),
                                measured=value, expected="unset" if not ok else "allowed"))
    if not any(not v.passed for v in out):
        seen = ", ".join(f"{k}={v}" for k, v in env.variables) or "none set"
        out.append(ProbeVerdict("environment", "NCCL environment", True,
                                f"no known-harmful setting; NCCL/CUDA variables: {seen}", measured=len(env.variables)))
    return out


def collect() -> Environment:
    items = sorted(os.environ.items())
    return Environment(tuple((k, v) for k, v in items if k.startswith(_PREFIXES)), len(items))


PROBE = Probe(
    name="env",
    description="NCCL/CUDA environment settings known to destroy performance (e.g. NCCL_P2P_DISABLE=1)",
    input_help="`env` output of the job (KEY=VALUE lines)",
    scope="node",
    parse=parse,
    collect=collect,
    judge=judge,
    expect_keys=("nccl_env_allow",),
)
