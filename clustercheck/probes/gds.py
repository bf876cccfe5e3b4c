"""GPUDirect Storage (NVIDIA GPUDirect Storage docs, https://docs.nvidia.com/gpudirect-storage/): `gdscheck -p` or /proc/driver/nvidia-fs/stats.

gdscheck: the nvidia_fs driver must be loaded, at least one storage transport Supported, every GPU
"supports GDS", and the run must end with "Platform verification succeeded"; cuFile's use_compat_mode
(silent POSIX fallback) fails only where the platform says `gds_compat_mode: false`. Output that stops
before GPU INFO is incomplete evidence and refused as bad input. nvidia-fs stats: every err= counter is 0.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from clustercheck.probes import tool
from clustercheck.probes.base import Probe, ProbeParseError, ProbeSkip, ProbeVerdict
from clustercheck.toolout import evidence_lines

_GPU = re.compile(r"^GPU index (\d+) (.+?) bar:\d+ bar size \(MiB\):\s*\d+\s*(.*)$")
_TRANSPORTS = ("NVMe", "NVMe P2PDMA", "NVMeOF", "SCSI", "ScaleFlux CSD", "NVMesh", "DDN EXAScaler",
               "IBM Spectrum Scale", "NFS", "BeeGFS", "ScaTeFS", "WekaFS", "Userspace RDMA")
STATS = Path("/proc/driver/nvidia-fs/stats")
GDSCHECK = Path("/usr/local/cuda/gds/tools/gdscheck")


@dataclass(frozen=True)
class GdsCheck:
    version: str
    nvidia_fs: str | None
    transports: tuple[tuple[str, str], ...]
    properties: tuple[tuple[str, str], ...]
    gpus: tuple[tuple[int, str, bool], ...]        # (index, name, supports GDS)
    verification: str                             # the "Platform verification ..." line


@dataclass(frozen=True)
class NvfsStats:
    version: str
    errors: tuple[tuple[str, int], ...]           # "Reads err" -> count, for every err-like counter
    ops: tuple[tuple[str, int], ...]


def parse(text: str) -> GdsCheck | NvfsStats:
    tool.refuse_crashed(text)
    lines = [l.strip() for l in evidence_lines(text)]
    if any(l.startswith("NVFS statistics") for l in lines):
        return _stats(lines)
    if not any(l.startswith("GDS release version") for l in lines):
        raise ProbeParseError("expected `gdscheck -p` output ('GDS release version: ...') or "
                              "/proc/driver/nvidia-fs/stats ('NVFS statistics(ver: ...)')")
    version = nvfs = None
    transports, props, gpus, verification = [], [], [], ""
    for l in lines:
        key, _, value = l.partition(":")
        key, value = key.strip(), value.strip()
        if key == "GDS release version":
            version = value
        elif key == "nvidia_fs version":
            nvfs = value.split()[0] if value else None
        elif key in _TRANSPORTS:
            transports.append((key, value))
        elif re.match(r"^[a-z_]+\.[a-z_.]+$", key):
            props.append((key, value))
        elif l.startswith("Platform verification"):
            verification = l
        else:
            m = _GPU.match(l)
            if m:
                gpus.append((int(m.group(1)), m.group(2), "supports GDS" in m.group(3)))
    if not verification and not any(l == "GPU INFO:" for l in lines):
        last = next((l for l in reversed(lines) if l), "")
        raise ProbeParseError(f"incomplete `gdscheck -p` output: it stops at {last!r}, before GPU INFO and "
                              "'Platform verification ...'; capture the whole run")
    return GdsCheck(version or "", nvfs, tuple(transports), tuple(props), tuple(gpus), verification)


def _stats(lines: list[str]) -> NvfsStats:
    version = next((l.partition(":")[2].strip() for l in lines if l.startswith("GDS Version")), "")
    errors: list[tuple[str, int]] = []
    ops: list[tuple[str, int]] = []
    for l in lines:
        name, sep, rest = l.partition(":")
        if not sep:
            continue
        name = name.strip()
        for key, value in re.findall(r"([\w-]+)=(\d+)", rest):
            if name == "Ops":
                ops.append((key, int(value)))
            elif name == "Error" or "err" in key:
                errors.append((f"{name} {key}", int(value)))
    if not errors:
        raise ProbeParseError("expected nvidia-fs stats lines such as 'Reads : err=0 io_state_err=0'")
    return NvfsStats(version, tuple(errors), tuple(ops))


def judge(parsed: GdsCheck | NvfsStats, expect: Mapping[str, Any]) -> list[ProbeVerdict]:
    if isinstance(parsed, NvfsStats):
        bad = [(k, v) for k, v in parsed.errors if v]
        return [ProbeVerdict("nvidia-fs", "GDS error counters", not bad,
                             ", ".join(f"{k}={v}" for k, v in bad) if bad else
                             f"{len(parsed.errors)} error counters at 0; ops " +
                             ", ".join(f"{k}={v}" for k, v in parsed.ops), measured=dict(bad) or 0, expected=0)]
    out = [ProbeVerdict("nvidia-fs", "driver loaded", parsed.nvidia_fs is not None,
                        f"nvidia_fs {parsed.nvidia_fs}, GDS {parsed.version}" if parsed.nvidia_fs else
                        "nvidia_fs version missing: the kernel module is not loaded")]
    supported = [t for t, v in parsed.transports if v.startswith("Supported")]
    out.append(ProbeVerdict("gdscheck", "storage transport", bool(supported),
                            f"supported: {', '.join(supported)}" if supported else
                            "no storage transport is Supported: GDS falls back to POSIX I/O through host memory",
                            measured=supported, expected="at least one Supported"))
    for index, name, ok in parsed.gpus:
        out.append(ProbeVerdict(f"GPU{index}", "GDS support", ok, f"{name}: {'supports GDS' if ok else 'no GDS support'}"))
    props = dict(parsed.properties)
    compat = props.get("properties.use_compat_mode")
    if expect.get("gds_compat_mode") is False and compat is not None:
        out.append(ProbeVerdict("cufile.json", "compat mode", compat != "true",
                                f"properties.use_compat_mode = {compat}" +
                                (": cuFile silently falls back to POSIX I/O" if compat == "true" else ""),
                                compat, "false"))
    ok = parsed.verification.endswith("succeeded")
    out.append(ProbeVerdict("gdscheck", "platform verification", ok, parsed.verification or "no verification line"))
    return out


def collect() -> str:
    tool = str(GDSCHECK) if GDSCHECK.is_file() else shutil.which("gdscheck")
    loaded = Path("/sys/module/nvidia_fs").is_dir()
    if tool:
        out = subprocess.run([tool, "-p"], capture_output=True, text=True, timeout=120, check=False)
        return out.stdout
    if loaded and STATS.is_file():
        return STATS.read_text()
    raise ProbeSkip("GPUDirect Storage is not installed: no nvidia_fs module and no gdscheck")


PROBE = Probe(
    name="gds",
    description="GPUDirect Storage: nvidia-fs loaded, transports, cuFile configuration, gdscheck verification",
    input_help="`gdscheck -p` output, or /proc/driver/nvidia-fs/stats",
    scope="node",
    parse=parse,
    collect=collect,
    judge=judge,
    expect_keys=("gds_compat_mode",),
)
