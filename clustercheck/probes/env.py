"""NCCL and CUDA environment settings known to destroy collective performance.

Each entry names the variable, the values that hurt and why, after NCCL's environment variable reference
(https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html) and CUDA's programming guide
(CUDA_LAUNCH_BLOCKING). A platform may allow some on purpose (`expect: {nccl_env_allow: [...]}`), e.g. EFA
benchmarking runs with NCCL_P2P_DISABLE=1 to force traffic through the NICs (Hugging Face's smol training playbook,
https://huggingfacetb-smol-training-playbook.hf.space/, "Outside a GPU").

Values are read the way NCCL reads them (NVIDIA/nccl at 5067397c, v2.30): integer variables go through
`strtoll(str, nullptr, 0)` (src/misc/param.cc, ncclLoadParam) and NCCL_P2P_DISABLE through
`strtol(str, NULL, 0) == 1` (src/graph/paths.cc, ncclGetLevel). Base 0 accepts 0x1 (hex) and 01 (octal),
and strtol stops at the first character that is not a digit: `1 # comment` is 1, `0x1` is 1, `true` is 0.
The input is `env` output, where a value is everything after the first `=`; a ` # comment` is part of the
value there (no shell strips it), and NCCL, reading the same string, stops before it.
Level variables (NCCL_P2P_LEVEL, NCCL_NET_GDR_LEVEL) are compared case-sensitively with NCCL's level
names ("LOC", "NVL", ...), else read as an old-style integer when they start with a digit (0 is LOC).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from clustercheck.probes import tool
from clustercheck.probes.base import Probe, ProbeParseError, ProbeVerdict
from clustercheck.toolout import evidence_lines

_ASSIGN = re.compile(r"^(?:export\s+|declare -x\s+)?([A-Za-z_][A-Za-z0-9_]*)=(.*)$")
_PREFIXES = ("NCCL_", "CUDA_", "TORCH_NCCL_", "FI_")
_INT = re.compile(r"^\s*([+-]?)(0[xX](?=[0-9a-fA-F])|0)?([0-9a-fA-F]*)")


def c_strtol(text: str) -> int | None:
    """C strtoll(text, NULL, 0): leading blanks, a sign, 0x (hex) or 0 (octal) prefix, then digits up to the
    first character that is not one. No digits gives 0, as in C; out of int64 range gives None (ERANGE)."""
    m = _INT.match(text)
    assert m is not None  # every group is optional
    sign, prefix, rest = m.groups()
    base = 16 if prefix and prefix[1:] else 8 if prefix == "0" else 10
    digits = "0123456789abcdef"[:base]
    run = re.match(f"[{digits}]*", rest.lower())
    value = int(run.group(0), base) if run and run.group(0) else 0
    value = -value if sign == "-" else value
    return value if -2**63 <= value < 2**63 else None


# NCCL's level names (src/graph/topo.cc topoPathTypeStr) and old integer levels (paths.cc levelsOldToNew)
_LEVELS = ("LOC", "NVL", "NVB", "C2C", "PIX", "PXB", "P2C", "PXN", "PHB", "SYS", "NET", "DIS")
_OLD_LEVELS = ("LOC", "PIX", "PXB", "PHB", "SYS", "SYS")


def nccl_level(value: str) -> str | None:
    """The path level NCCL takes from a *_LEVEL variable, or None when NCCL ignores the value."""
    if value in _LEVELS:
        return value
    if value[:1].isdigit():
        old = c_strtol(value)
        return _OLD_LEVELS[min(old, len(_OLD_LEVELS) - 1)] if old is not None and old >= 0 else None
    return None


@dataclass(frozen=True)
class Rule:
    reads: str                              # how NCCL reads it, for the verdict line
    read: Callable[[str], object]           # the value as NCCL sees it
    harmful: Callable[[object], bool]
    why: str


def _param(value: str) -> int | None:
    """An integer variable as ncclLoadParam reads it: an empty value keeps NCCL's default (None here)."""
    return c_strtol(value) if value else None


def _int(pred: Callable[[int], bool]) -> Callable[[object], bool]:
    return lambda v: isinstance(v, int) and pred(v)


_STRTOL, _LEVEL, _NAME = "strtoll base 0", "a level name", "case-insensitively"
HARMFUL: dict[str, Rule] = {
    "NCCL_P2P_DISABLE": Rule(_STRTOL, _param, _int(lambda v: v == 1),
                             "disables NVLink/PCIe peer-to-peer between GPUs; intra-node traffic goes through host memory"),
    "NCCL_P2P_LEVEL": Rule(_LEVEL, nccl_level, lambda v: v == "LOC", "LOC never uses peer-to-peer between GPUs"),
    "NCCL_SHM_DISABLE": Rule(_STRTOL, _param, _int(lambda v: v == 1),
                             "disables shared-memory transport; with P2P off, traffic goes to the NIC"),
    "NCCL_IB_DISABLE": Rule(_STRTOL, _param, _int(lambda v: v != 0),  # net_ib/init.cc: if (ncclParamIbDisable())
                            "disables InfiniBand/RoCE; inter-node traffic falls back to TCP sockets"),
    "NCCL_NET_GDR_LEVEL": Rule(_LEVEL, nccl_level, lambda v: v == "LOC",
                               "LOC disables GPUDirect RDMA; NIC traffic is staged in host memory"),
    "NCCL_NVLS_ENABLE": Rule(_STRTOL, _param, _int(lambda v: v == 0),
                             "disables NVLink SHARP on NVSwitch systems; all_reduce busbw drops to ring/tree"),
    "NCCL_MAX_NCHANNELS": Rule(_STRTOL, _param, _int(lambda v: v == 1), "one channel cannot fill NVLink or several NICs"),
    "NCCL_MAX_CTAS": Rule(_STRTOL, _param, _int(lambda v: v == 1),
                          "one CTA per collective cannot fill NVLink or several NICs"),
    "NCCL_DEBUG": Rule(_NAME, lambda s: s.strip().upper(), lambda v: v == "TRACE",  # debug.cc compares ignoring case
                       "TRACE logs every call and slows collectives"),
    # CUDA's parser is not public: read like NCCL's integers, so 0x1 and "1 # ..." count as 1 (fail closed)
    "CUDA_LAUNCH_BLOCKING": Rule(_STRTOL, _param, _int(lambda v: v == 1), "makes every kernel launch synchronous"),
}


@dataclass(frozen=True)
class Environment:
    variables: tuple[tuple[str, str], ...]   # relevant variables only (NCCL_*, CUDA_*, ...)
    total: int                               # assignments read


def parse(text: str) -> Environment:
    tool.refuse_crashed(text)
    found: list[tuple[str, str]] = []
    total = 0
    other: list[tuple[int, str]] = []
    for number, line in enumerate(evidence_lines(text), 1):
        m = _ASSIGN.match(line.strip())
        if not m:
            if line.strip():
                other.append((number, line.strip()))
            continue
        total += 1
        # quotes come from `export -p` / `declare -x` or a hand-written file: read NCCL_X="1" as 1 (fail closed)
        value = m.group(2).strip().strip("'\"")
        if m.group(1).startswith(_PREFIXES):
            found.append((m.group(1), value))
    # `env` prints only assignments (a multi-line value adds a few other lines): mostly-other text is a log
    if not total or len(other) > total:
        where = f"; line {other[0][0]}: {other[0][1][:60]!r}" if other else ""
        raise ProbeParseError(f"expected `env` output: KEY=VALUE lines such as NCCL_P2P_DISABLE=1{where}")
    return Environment(tuple(found), total)


def judge(env: Environment, expect: Mapping[str, Any]) -> list[ProbeVerdict]:
    allowed = set(expect.get("nccl_env_allow", ()))
    out = []
    for name, value in env.variables:
        rule = HARMFUL.get(name)
        if rule is None:
            continue
        seen = rule.read(value)
        if not rule.harmful(seen):
            continue
        ok = name in allowed
        reads = "" if str(seen) == value else f" (NCCL reads {seen}: {rule.reads})"
        out.append(ProbeVerdict(name, "NCCL environment", ok,
                                f"{name}={value}{reads}: {rule.why}" +
                                (" (allowed by the platform's nccl_env_allow)" if ok else ""),
                                measured=value, expected="unset" if not ok else "allowed"))
    if not any(not v.passed for v in out):
        seen_vars = ", ".join(f"{k}={v}" for k, v in env.variables) or "none set"
        out.append(ProbeVerdict("environment", "NCCL environment", True,
                                f"no known-harmful setting; NCCL/CUDA variables: {seen_vars}", measured=len(env.variables)))
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
