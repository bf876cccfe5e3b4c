"""GPUDirect Storage (NVIDIA GPUDirect Storage docs, https://docs.nvidia.com/gpudirect-storage/): `gdscheck -p` or /proc/driver/nvidia-fs/stats.

gdscheck: the nvidia_fs driver must be loaded, at least one storage transport Supported (`Unsupported` and
`compat`, cuFile's POSIX fallback through host memory, are not), every GPU "supports GDS", and the run must
end with "Platform verification succeeded"; cuFile's use_compat_mode (silent POSIX fallback) fails only
where the platform says `gds_compat_mode: false`. A node without GPUDirect Storage (no nvidia_fs module,
no gdscheck) is skipped, unless `gds: true` expects it there: then it fails. Output that stops before GPU INFO is judged on what it
shows when that already decides: a DRIVER CONFIGURATION in which no transport is Supported fails, and what
the capture does not reach is `not judged`. Output that stops early with a transport Supported decides
nothing (the GPUs and the verification are not in it) and is refused as bad input. nvidia-fs stats: every
err= counter is 0.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from clustercheck.probes import tool
from clustercheck.probes.base import Probe, ProbeParseError, ProbeSkip, ProbeVerdict, not_judged
from clustercheck.toolout import count, evidence_lines

_GPU = re.compile(r"^GPU index (\d{1,6}) (.+?) bar:\d{1,6} bar size \(MiB\):\s*\d{1,12}\s*(.*)$")
_TRANSPORTS = ("NVMe", "NVMe P2PDMA", "NVMeOF", "SCSI", "ScaleFlux CSD", "NVMesh", "DDN EXAScaler",
               "IBM Spectrum Scale", "NFS", "BeeGFS", "ScaTeFS", "VIRTIOFS", "WekaFS", "Userspace RDMA")
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
    complete: bool = True                         # False: the capture stops before GPU INFO
    no_gpu: str = ""                              # gdscheck's "No GPU found in the system ..." line


@dataclass(frozen=True)
class Absent:
    """What collect() found of a node without GPUDirect Storage: judge() skips it, or fails it where `gds: true`."""
    why: str


@dataclass(frozen=True)
class NvfsStats:
    version: str
    errors: tuple[tuple[str, int], ...]           # "Reads err" -> count, for every err-like counter
    ops: tuple[tuple[str, int], ...]
    unread: tuple[str, ...] = ()                  # error counters whose value is no count ("err=-1")


def parse(text: str) -> GdsCheck | NvfsStats:
    tool.refuse_crashed(text)
    lines = [l.strip() for l in evidence_lines(text)]
    if any(l.startswith("NVFS statistics") for l in lines):
        return _stats(lines)
    named = sum(1 for l in lines if l.partition(":")[0].strip() in _TRANSPORTS and ":" in l)
    if not any(l.startswith("GDS release version") or l == "DRIVER CONFIGURATION:" for l in lines) and named < 3:
        raise ProbeParseError("expected `gdscheck -p` output ('GDS release version: ...', its DRIVER CONFIGURATION "
                              "lines) or /proc/driver/nvidia-fs/stats ('NVFS statistics(ver: ...)')")
    version = nvfs = None
    transports, props, gpus, verification = [], [], [], ""
    no_gpu = ""
    for l in lines:
        key, _, value = l.partition(":")
        key, value = key.strip(), value.strip()
        if key == "GDS release version":
            version = value
        elif key == "nvidia_fs version":
            nvfs = value.split()[0] if value else None
        elif l.startswith("No GPU found"):
            no_gpu = l
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
    complete = bool(verification) or any(l == "GPU INFO:" for l in lines)
    if not complete and (not transports or any(_supported(v) for _, v in transports)):
        # a transport Supported decides nothing while the GPUs and the verification are cut off
        last = next((l for l in reversed(lines) if l), "")
        raise ProbeParseError(f"incomplete `gdscheck -p` output: it stops at {last[:120]!r}, before GPU INFO and "
                              "'Platform verification ...', and nothing it shows fails; capture the whole run")
    return GdsCheck(version or "", nvfs, tuple(transports), tuple(props), tuple(gpus), verification, complete,
                    no_gpu)


def _supported(state: str) -> bool:
    """`Supported`; not `Unsupported` and not `compat` (cuFile falls back to POSIX I/O through host memory)."""
    return state.startswith("Supported")


def _stats(lines: list[str]) -> NvfsStats:
    version = next((l.partition(":")[2].strip() for l in lines if l.startswith("GDS Version")), "")
    errors: list[tuple[str, int]] = []
    ops: list[tuple[str, int]] = []
    unread: list[str] = []
    for l in lines:
        name, sep, rest = l.partition(":")
        if not sep:
            continue
        name = name.strip()
        for key, value in _counters(rest):
            n = count(value, 20)
            if name != "Ops" and (name == "Error" or "err" in key) and n is None:
                unread.append(f"{name} {key}={value[:20]}")
            elif n is None:
                continue
            elif name == "Ops":
                ops.append((key, n))
            elif name == "Error" or "err" in key:
                errors.append((f"{name} {key}", n))
    if not errors and not unread:
        raise ProbeParseError("expected nvidia-fs stats lines such as 'Reads : err=0 io_state_err=0'")
    return NvfsStats(version, tuple(errors), tuple(ops), tuple(unread))


def _counters(rest: str) -> list[tuple[str, str]]:
    """`err=0 io_state_err=0` as (name, digits); token by token (a regex scan for `name=` from every
    position takes quadratic time on a long word)."""
    out = []
    for token in rest.replace(",", " ").split():
        key, sep, value = token.partition("=")
        if sep and key and value and re.fullmatch(r"[\w-]{1,64}", key):
            out.append((key, value))
    return out


def judge(parsed: GdsCheck | NvfsStats | Absent, expect: Mapping[str, Any]) -> list[ProbeVerdict]:
    if isinstance(parsed, Absent):
        if expect.get("gds") is not True:
            raise ProbeSkip(parsed.why)
        return [ProbeVerdict("node", "GPUDirect Storage", False, f"{parsed.why}; expected: usable (gds: true)",
                             "absent", "nvidia_fs loaded and gdscheck -p")]
    if isinstance(parsed, NvfsStats):
        bad = [(k, v) for k, v in parsed.errors if v]
        if parsed.unread:
            return [ProbeVerdict("nvidia-fs", "GDS error counters", False, f"unreadable: {', '.join(parsed.unread[:4])}"
                                 + (f"; {', '.join(f'{k}={v}' for k, v in bad)}" if bad else ""),
                                 measured=", ".join(parsed.unread), expected=0)]
        return [ProbeVerdict("nvidia-fs", "GDS error counters", not bad,
                             ", ".join(f"{k}={v}" for k, v in bad) if bad else
                             f"{len(parsed.errors)} error counters at 0; ops " +
                             ", ".join(f"{k}={v}" for k, v in parsed.ops), measured=dict(bad) or 0, expected=0)]
    cut = "the capture stops before GPU INFO"
    if parsed.nvidia_fs or parsed.version:
        out = [ProbeVerdict("nvidia-fs", "driver loaded", parsed.nvidia_fs is not None,
                            f"nvidia_fs {parsed.nvidia_fs}, GDS {parsed.version}" if parsed.nvidia_fs else
                            "nvidia_fs version missing: the kernel module is not loaded")]
    else:
        out = [not_judged("nvidia-fs", "driver loaded", "the capture starts after gdscheck's version lines")]
    supported = sorted(t for t, v in parsed.transports if _supported(v))
    states = sorted({v.split()[0] for _, v in parsed.transports if v and not _supported(v)})
    out.append(ProbeVerdict("gdscheck", "storage transport", bool(supported),
                            f"supported: {', '.join(supported)}" if supported else
                            f"no storage transport is Supported ({len(parsed.transports)} read: "
                            f"{' or '.join(states) or 'none'}): GDS falls back to POSIX I/O through host memory",
                            measured=supported, expected="at least one Supported"))
    if parsed.no_gpu:
        out.append(ProbeVerdict("gdscheck", "GPUs", False, parsed.no_gpu, 0, "a GPU"))
    indices = [index for index, _, _ in parsed.gpus]
    twice = sorted({i for i in indices if indices.count(i) > 1}) if len(set(indices)) != len(indices) else []
    if twice:
        out.append(ProbeVerdict("gdscheck", "GPUs", False, f"GPU index {', '.join(map(str, twice[:8]))} listed twice",
                                len(indices), len(set(indices))))
    for index, name, ok in parsed.gpus:
        out.append(ProbeVerdict(f"GPU{index}", "GDS support", ok, f"{name}: {'supports GDS' if ok else 'no GDS support'}"))
    if not parsed.complete:
        if not parsed.gpus and not parsed.no_gpu:
            out.append(not_judged("gdscheck", "GDS support", f"{cut}: no GPU is listed"))
        out.append(not_judged("gdscheck", "platform verification", f"{cut} and 'Platform verification ...'"))
        return out
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


def collect() -> str | Absent:
    found = str(GDSCHECK) if GDSCHECK.is_file() else tool.locate("gdscheck")
    loaded = Path("/sys/module/nvidia_fs").is_dir()
    if found:
        # through tool.run: a gdscheck that printed its report and then crashed or exited non-zero is an
        # error naming it, never judged on the report it printed before dying
        return tool.run([found, "-p"], missing="gdscheck is gone (it was there a moment ago)")
    if loaded and STATS.is_file():
        return STATS.read_text()
    return Absent("GPUDirect Storage is not installed: no nvidia_fs module and no gdscheck")


PROBE = Probe(
    name="gds",
    description="GPUDirect Storage: nvidia-fs loaded, transports, cuFile configuration, gdscheck verification",
    input_help="`gdscheck -p` output, or /proc/driver/nvidia-fs/stats",
    scope="node",
    parse=parse,
    collect=collect,
    judge=judge,
    expect_keys=("gds", "gds_compat_mode"),
)
