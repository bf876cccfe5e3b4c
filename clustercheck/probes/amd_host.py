"""The host settings AMD documents for RCCL performance on Instinct nodes: NUMA auto-balancing off and the
IOMMU in passthrough (`iommu=pt` on the kernel command line). AMD's MI300X system optimization guide
(https://instinct.docs.amd.com/projects/amdgpu-docs/en/latest/system-optimization/mi300x.html) sets both,
and RCCL checks them itself at init ("NCCL WARN NUMA auto balancing enabled which can lead to variability in
the RCCL performance!", "NCCL WARN Missing "iommu=pt" from kernel command line ...").

Evidence (any mix): `sysctl kernel.numa_balancing` ("kernel.numa_balancing = 0"), `cat /proc/cmdline` (the
line with BOOT_IMAGE= or root=), or an RCCL NCCL_DEBUG=INFO log, whose warnings (or, for NUMA balancing,
their absence under an RCCL banner) say the same. Live: /proc/sys/kernel/numa_balancing and /proc/cmdline,
on machines with an AMD accelerator on the PCI bus; a file that cannot be read fails, never passes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from clustercheck.probes.base import Probe, ProbeParseError, ProbeSkip, ProbeVerdict
from clustercheck.toolout import evidence_lines

_SYSCTL = re.compile(r"^\s*kernel\.numa_balancing\s*=\s*(\S+)\s*$")
_CMDLINE = re.compile(r"(?:^|\s)(?:BOOT_IMAGE|root)=\S+")
_UNREAD = "unreadable"


@dataclass(frozen=True)
class HostSettings:
    numa_balancing: str | None   # "0", "1", _UNREAD, or None when the evidence does not say
    cmdline: str | None          # the kernel command line, _UNREAD, or None
    iommu_pt: bool | None = None  # from an RCCL log: False when RCCL warned that iommu=pt is missing
    source: str = ""             # where the facts came from: "sysctl/cmdline", "RCCL log", "/proc"


def parse(text: str) -> HostSettings:
    lines = evidence_lines(text)
    numa = next((m.group(1) for m in map(_SYSCTL.match, lines) if m), None)
    cmdline = next((l.strip() for l in lines if ("BOOT_IMAGE=" in l or "root=" in l) and _CMDLINE.search(l)), None)
    if numa is not None or cmdline is not None:
        return HostSettings(numa, cmdline, source="sysctl/cmdline")
    from clustercheck.fabric import nccl_debug

    log = nccl_debug.parse(text)
    if log.is_rccl or log.numa_balancing_on or log.iommu_pt_missing:
        on = log.numa_balancing_on
        return HostSettings(None if on is None else ("1" if on else "0"), None,
                            iommu_pt=False if log.iommu_pt_missing else None, source="RCCL log")
    raise ProbeParseError("expected 'kernel.numa_balancing = N' (sysctl), the kernel command line (/proc/cmdline, "
                          "with BOOT_IMAGE= or root=), or an RCCL NCCL_DEBUG=INFO log with its 'RCCL version' banner")


def judge(s: HostSettings, expect: Mapping[str, Any]) -> list[ProbeVerdict]:
    out = []
    if s.numa_balancing is not None:
        ok = s.numa_balancing == "0"
        detail = ("kernel.numa_balancing could not be read" if s.numa_balancing == _UNREAD else
                  f"kernel.numa_balancing = {s.numa_balancing} ({s.source})")
        out.append(ProbeVerdict("node", "NUMA auto-balancing off", ok,
                                detail + ("" if ok else "; AMD: sudo sysctl kernel.numa_balancing=0"),
                                s.numa_balancing, "0"))
    if s.cmdline is not None:
        ok = s.cmdline != _UNREAD and "iommu=pt" in s.cmdline.split()
        shown = [t for t in s.cmdline.split() if "iommu" in t] if s.cmdline != _UNREAD else []
        detail = ("/proc/cmdline could not be read" if s.cmdline == _UNREAD else
                  f"kernel command line has {' '.join(shown) or 'no iommu= setting'}")
        out.append(ProbeVerdict("node", "IOMMU passthrough", ok,
                                detail + ("" if ok else "; AMD: add iommu=pt to GRUB_CMDLINE_LINUX and reboot"),
                                " ".join(shown) or None, "iommu=pt"))
    elif s.iommu_pt is False:
        out.append(ProbeVerdict("node", "IOMMU passthrough", False,
                                'RCCL warned: Missing "iommu=pt" from kernel command line', "missing", "iommu=pt"))
    return out


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return _UNREAD


def collect(proc: Path = Path("/proc"), pci_root: Path = Path("/sys/bus/pci/devices")) -> HostSettings:
    from clustercheck.judging.platform import _pci_functions

    if not any(vendor == 0x1002 for _, vendor, _ in _pci_functions(pci_root)):
        raise ProbeSkip("no AMD accelerator on the PCI bus: AMD's RCCL host settings do not apply")
    return HostSettings(_read(proc / "sys" / "kernel" / "numa_balancing"), _read(proc / "cmdline"), source="/proc")


PROBE = Probe(
    name="amd-host",
    description="AMD's RCCL prerequisites: NUMA auto-balancing off, IOMMU passthrough (iommu=pt)",
    input_help="`sysctl kernel.numa_balancing` and/or `cat /proc/cmdline`, or an RCCL NCCL_DEBUG=INFO log",
    scope="node",
    parse=parse,
    collect=collect,
    judge=judge,
)
