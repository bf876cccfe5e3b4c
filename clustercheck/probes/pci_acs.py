"""PCIe ACS redirect on bridges (NCCL troubleshooting guide, PCI Access Control Services:
https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting.html).

ACS request/completion redirect sends peer-to-peer TLPs up to the root complex, which slows GPUDirect
P2P and RDMA or hangs it (NCCL troubleshooting guide). A device whose ACSCtl has ReqRedir+ or CmpltRedir+
fails and is named, and so does one whose ReqRedir or CmpltRedir is neither + nor - (`ReqRedir?`, both,
or absent from its ACSCtl line): a bit nobody can read is not off. A device with an ACS capability
(`Access Control Services`, `ACSCap:`) and no ACSCtl line under it is not judged, named, and so is
the last device of a capture cut inside its block before any ACS line (`capture cut in its block`). Evidence:
`lspci -vvv` (also `lspci -vvv | grep ACSCtl`); live: the ACS extended capability read from
/sys/bus/pci/devices/*/config, falling back to lspci; a PCIe device whose config there is only the 256-byte
standard space (no MMCONFIG, some hypervisors) has an ACS state nobody read: not judged, named.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from clustercheck.probes import tool
from clustercheck.probes.base import Probe, ProbeParseError, ProbeSkip, ProbeVerdict, not_judged
from clustercheck.toolout import evidence_lines

FLAGS = ("SrcValid", "TransBlk", "ReqRedir", "CmpltRedir", "UpstreamFwd", "EgressCtrl", "DirectTrans")
# "BDF class: name", as lspci prints a device; the ": " keeps other tools' BDF-led rows (amd-smi topology) out
# the description starts at its first non-blank: `\s+` and `[^:]+` both taking blanks backtracked quadratically
_HEADER = re.compile(r"^((?:[0-9a-fA-F]{4,}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])\s+([^:\s][^:]*: .+)$")
# what ends an lspci -vvv device block (a blank line ends it too): its driver lines, or the -x hex dump after them
_BLOCK_END = re.compile(r"^(?:Kernel driver in use:|Kernel modules:|[0-9a-f]{2,3}: [0-9a-f]{2}(?: [0-9a-f]{2})*$)")
_ACS_CAP_ID = 0x000D
SYSFS = Path("/sys/bus/pci/devices")


@dataclass(frozen=True)
class AcsDevice:
    subject: str                      # the BDF, or "ACSCtl line N" for grep output without device lines
    description: str                  # the lspci device line after the BDF
    bridge: bool
    ctl: tuple[tuple[str, bool], ...]
    unread: tuple[str, ...] = ()      # redirect flags lspci did not print as + or - ("ReqRedir?", or absent)
    has_ctl: bool = True              # False: an ACS capability whose ACSCtl line the text does not have
    cut: bool = False                 # the capture ends inside its block before any ACS line: nothing read

    def flag(self, name: str) -> bool:
        return dict(self.ctl).get(name, False)

    @property
    def redirect(self) -> bool:
        return self.flag("ReqRedir") or self.flag("CmpltRedir")


@dataclass(frozen=True)
class AcsScan:
    devices: tuple[AcsDevice, ...]    # devices with an ACS control register
    scanned: int                      # devices looked at
    origin: str                       # "lspci" or "sysfs"
    note: str = ""                    # scope and IOMMU state, for the report
    denied: tuple[str, ...] = ()      # devices whose capabilities lspci could not read (`<access denied>`)
    # PCIe devices whose sysfs config holds only the 256-byte standard space: (BDF, description)
    unreadable: tuple[tuple[str, str], ...] = ()


def parse(text: str) -> AcsScan:
    tool.refuse_crashed(text)
    devices: list[AcsDevice] = []
    headers = 0
    current: tuple[str, str] | None = None
    # an ACS capability seen and its ACSCtl line not yet: (its line, whether its ACSCap line was seen too)
    pending: tuple[int, bool] | None = None
    denied: dict[str, None] = {}
    # whether the current device's block ended (driver line, hex dump, blank line) or showed an ACS line: a
    # capture that stops inside the last block before either may have cut its ACS capability off
    ended = shown = False

    def no_ctl() -> None:
        """The capability before has no ACSCtl line: an excerpt or a capture cut short, never left out."""
        if pending is None:
            return
        bdf, desc = current if current is not None else (f"ACSCap at line {pending[0]}", "")
        subject = _full_bdf(bdf) if current is not None else bdf
        devices.append(AcsDevice(subject, desc, _is_bridge(desc), (), (), has_ctl=False))

    lines = evidence_lines(text)
    if lines and not lines[-1]:
        lines.pop()  # the text's final newline ends its last line, not its last block: lspci's blank line does
    for number, line in enumerate(lines, 1):
        m = _HEADER.match(line)
        if m:
            no_ctl()
            pending = None
            headers += 1
            current = (m.group(1), m.group(2))
            ended = shown = False
            continue
        stripped = line.strip()
        if not stripped or _BLOCK_END.match(stripped):
            ended = True
            continue
        if stripped.startswith("Capabilities:") and "<access denied>" in stripped:  # lspci without root
            denied[_full_bdf(current[0]) if current is not None else f"line {number}"] = None
            continue
        capability = stripped.startswith("Capabilities:") and "Access Control Services" in stripped
        shown = shown or capability or stripped.startswith(("ACSCap:", "ACSCtl:"))
        if capability or stripped.startswith("ACSCap:"):
            if capability or pending is None or pending[1]:  # a new capability, not the ACSCap of the one above
                no_ctl()
                pending = (number, not capability)
            else:
                pending = (pending[0], True)
            continue
        if not stripped.startswith("ACSCtl:"):
            continue
        pending = None
        flags, unread = _flags(stripped[len("ACSCtl:"):])
        if not any(name in FLAGS for name, _ in flags) and not unread:
            raise ProbeParseError(f"line {number}: an ACSCtl line without flags such as 'ReqRedir+': "
                                  f"{stripped[:120]!r}")
        if current is None:  # `lspci -vvv | grep ACSCtl` keeps no device lines
            devices.append(AcsDevice(f"ACSCtl line {len(devices) + 1}", "", False, flags, unread))
        else:
            bdf, desc = current
            devices.append(AcsDevice(_full_bdf(bdf), desc, _is_bridge(desc), flags, unread))
    no_ctl()
    if current is not None and not ended and not shown and _full_bdf(current[0]) not in denied:
        devices.append(AcsDevice(_full_bdf(current[0]), current[1], _is_bridge(current[1]), (), (), has_ctl=False,
                                 cut=True))
    if not headers and not devices:
        raise ProbeParseError("expected `lspci -vvv` output: device lines such as "
                              "'0000:02:08.0 PCI bridge: ...' with 'ACSCtl:' lines under them")
    return AcsScan(tuple(devices), headers or len(devices), "lspci", denied=tuple(denied))


_REDIRECT = ("ReqRedir", "CmpltRedir")


def _flags(text: str) -> tuple[tuple[tuple[str, bool], ...], tuple[str, ...]]:
    """lspci's `Name+`/`Name-` flags, and the redirect flags it did not print as either: one with another
    mark (`ReqRedir?`), printed twice with both marks, or absent. Such a flag is unknown, never off."""
    flags: list[tuple[str, bool]] = []
    odd: list[str] = []
    for token in text.split():
        m = _FLAG_TOKEN.fullmatch(token)
        if m is None:
            continue
        name, mark = m.groups()
        if mark in ("+", "-"):
            flags.append((name, mark == "+"))
        elif name in FLAGS:
            odd.append(token)
    states: dict[str, set[bool]] = {}
    for name, on in flags:
        states.setdefault(name, set()).add(on)
    unread = odd + [f"{name}+/-" for name in _REDIRECT if len(states.get(name, ())) > 1]
    unread += [f"{name} (absent)" for name in _REDIRECT
               if name not in states and not any(t.startswith(name) for t in odd)]
    return tuple(flags), tuple(unread) if flags or odd else ()


_FLAG_TOKEN = re.compile(r"([A-Za-z]{1,40})([^A-Za-z,]{1,4}),?")


def _full_bdf(bdf: str) -> str:
    return bdf if bdf.count(":") == 2 else f"0000:{bdf}"


def _is_bridge(description: str) -> bool:
    return "PCI bridge" in description or "[0604]" in description


def judge(scan: AcsScan, expect: Mapping[str, Any]) -> list[ProbeVerdict]:
    allowed = bool(expect.get("acs_redirect", False))
    unread = [not_judged("node", "ACS redirect", f"lspci ran without root: the capabilities of {len(scan.denied)} "
                         f"device(s) ({', '.join(scan.denied[:8])}{' ...' if len(scan.denied) > 8 else ''}) read "
                         f"'<access denied>'; capture with sudo lspci -vvv", len(scan.denied),
                         "ReqRedir- CmpltRedir-")] if scan.denied else []
    unread += [not_judged(bdf, "ACS redirect", f"PCIe extended config space not readable: ACS state unknown "
                          f"({desc}: sysfs config holds only the 256-byte standard space, as without MMCONFIG/ECAM or "
                          f"under some hypervisors)", expected="ReqRedir- CmpltRedir-") for bdf, desc in scan.unreadable]
    if not scan.devices and unread:
        return unread
    if not scan.devices:
        return [ProbeVerdict("node", "ACS redirect", True,
                             f"{scan.scanned} PCI device(s) read ({scan.origin}), none has an ACS capability"
                             + (f"; {scan.note}" if scan.note else ""), measured=0, expected="no redirect")]
    out = unread
    seen: dict[str, int] = {}
    for dev in scan.devices:
        seen[dev.subject] = seen.get(dev.subject, 0) + 1
    twice = [subject for subject, k in seen.items() if k > 1]
    if twice:  # one device with two ACS control registers: the capture contradicts itself
        out.append(ProbeVerdict("node", "ACS redirect", False, f"device {', '.join(twice[:8])} listed twice with an "
                                f"ACSCtl line", len(twice), 0))
    for dev in scan.devices:
        if dev.cut:
            out.append(not_judged(dev.subject, "ACS redirect", f"capture cut in its block: the text ends inside the "
                                  f"block of {dev.description or 'this device'} before its driver line or any ACS "
                                  f"line, so its ACS capability may be what was cut; capture the whole "
                                  f"`sudo lspci -vvv`", expected="ReqRedir- CmpltRedir-"))
            continue
        if not dev.has_ctl:
            out.append(not_judged(dev.subject, "ACS redirect", f"an ACS capability (ACSCap) and no ACSCtl line under "
                                  f"it on {dev.description or 'this device'}: its redirect state is not in the "
                                  f"capture; re-capture with `sudo lspci -vvv`", expected="ReqRedir- CmpltRedir-"))
            continue
        if dev.unread:  # a redirect bit nobody can read is not off: the device is not judged clean
            out.append(ProbeVerdict(dev.subject, "ACS redirect", False, f"redirect state unreadable: lspci printed "
                                    f"{', '.join(dev.unread)[:120]} on {dev.description or 'this device'}; re-capture "
                                    f"with `sudo lspci -vvv`", measured=", ".join(dev.unread),
                                    expected="ReqRedir- CmpltRedir-"))
            continue
        on = " ".join(f"{f}{'+' if dev.flag(f) else '-'}" for f in ("ReqRedir", "CmpltRedir"))
        kind = "bridge" if dev.bridge else "device"
        what = f" {dev.description}" if dev.description else ""
        if dev.redirect and not allowed:
            detail = (f"{on} on {kind}{what}: peer-to-peer traffic is redirected to the root complex; "
                      f"disable with `setpci -s {dev.subject} ECAP_ACS+0x6.w=0000` or in the BIOS")
        else:
            detail = f"{on} on {kind}{what}" + ("" if not dev.redirect else " (allowed by expect)")
        out.append(ProbeVerdict(dev.subject, "ACS redirect", not dev.redirect or allowed, detail,
                                measured=on, expected="ReqRedir- CmpltRedir-" if not allowed else "any"))
    return out


# -- live ---------------------------------------------------------------------------------

def collect() -> AcsScan | str:
    if not SYSFS.is_dir():
        raise ProbeSkip("no /sys/bus/pci: not a Linux machine with PCI")
    names = sorted(p.name for p in SYSFS.iterdir())
    keep = _on_accelerator_paths(names)
    devices: list[AcsDevice] = []
    unreadable: list[tuple[str, str]] = []
    for name in keep:
        config = (SYSFS / name / "config").read_bytes()
        if len(config) == 64 and (SYSFS / name / "config").stat().st_size > 64:
            return _lspci_fallback("reading PCIe extended config space needs root")
        if len(config) <= 0x100 and is_pcie(config):
            # ACS lives in the extended space past 0x100: a PCIe device without it has an ACS state nobody read
            unreadable.append((name, _sysfs_desc(name, _class_of(name))))
            continue
        ctl = acs_control(config)
        if ctl is not None:
            cls = int((SYSFS / name / "class").read_text(), 16)
            devices.append(AcsDevice(name, _sysfs_desc(name, cls), cls >> 8 == 0x0604,
                                     tuple((f, bool(ctl >> i & 1)) for i, f in enumerate(FLAGS))))
    scope = (f"bridges above GPUs/NICs ({len(keep)} of {len(names)} devices)" if len(keep) != len(names)
             else "all devices (no GPU or NIC found)")
    return AcsScan(tuple(devices), len(keep), "sysfs", f"{scope}; IOMMU: {_iommu_state()}",
                   unreadable=tuple(unreadable))


_PCIE_CAP_ID = 0x10


def is_pcie(config: bytes) -> bool:
    """Whether the standard capability list (Status bit 4 says there is one; its pointer at 0x34, each entry
    ID then next pointer) holds the PCI Express capability: a conventional PCI device has no extended space."""
    if len(config) < 0x40 or not config[0x06] & 0x10:
        return False
    offset, seen = config[0x34] & 0xFC, 0
    while 0x40 <= offset and offset + 2 <= len(config) and seen < 48:
        if config[offset] == _PCIE_CAP_ID:
            return True
        offset, seen = config[offset + 1] & 0xFC, seen + 1
    return False


def acs_control(config: bytes) -> int | None:
    """ACSCtl word of a device's config space, or None without an ACS capability (walks the PCIe
    extended capability list from 0x100: ID in bits 15:0, next pointer in bits 31:20)."""
    offset, seen = 0x100, 0
    while 0x100 <= offset and offset + 8 <= len(config) and seen < 128:
        header = int.from_bytes(config[offset:offset + 4], "little")
        if header in (0, 0xFFFFFFFF):
            return None
        if header & 0xFFFF == _ACS_CAP_ID:
            return int.from_bytes(config[offset + 6:offset + 8], "little")
        offset, seen = (header >> 20) & 0xFFC, seen + 1
    return None


def _on_accelerator_paths(names: list[str]) -> list[str]:
    """The bridges between GPUs/NICs and the root (what P2P and RDMA traverse); all devices when
    there is no GPU or NIC, so ACS is still reported on whatever bridges exist."""
    ends = [n for n in names if _class_of(n) >> 16 in (0x03, 0x12) or _class_of(n) >> 8 in (0x0200, 0x0207)]
    ends = [n for n in ends if _vendor_of(n) != 0x1AF4]  # virtio NICs are not RDMA paths
    if not ends:
        return names
    keep: set[str] = set()
    for n in ends:
        for part in (SYSFS / n).resolve().parts:
            if part in names:
                keep.add(part)
    return sorted(keep)


def _class_of(name: str) -> int:
    try:
        return int((SYSFS / name / "class").read_text(), 16)
    except (OSError, ValueError):
        return 0


def _vendor_of(name: str) -> int:
    try:
        return int((SYSFS / name / "vendor").read_text(), 16)
    except (OSError, ValueError):
        return 0


def _sysfs_desc(name: str, cls: int) -> str:
    return f"class {cls >> 8:04x} [{_vendor_of(name):04x}:{_read(SYSFS / name / 'device')[2:]}]"


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def _iommu_state() -> str:
    groups = Path("/sys/kernel/iommu_groups")
    count = len(list(groups.iterdir())) if groups.is_dir() else 0
    cmdline = " ".join(w for w in _read(Path("/proc/cmdline")).split() if "iommu" in w)
    return f"{count} IOMMU group(s)" + (f", cmdline {cmdline}" if cmdline else "")


def _lspci_fallback(why: str) -> str:
    # through tool.run: an lspci killed or failing part way is an error, never judged on what it printed
    out = tool.run(["lspci", "-vvv"], missing=f"{why}, and lspci is not installed", timeout=60)
    if "access denied" in out:
        raise ProbeSkip(f"{why} (lspci shows '<access denied>')")
    return out


PROBE = Probe(
    name="pci-acs",
    description="PCIe ACS request/completion redirect on bridges in GPU<->GPU and GPU<->NIC paths",
    input_help="`sudo lspci -vvv` output (or `sudo lspci -vvv | grep ACSCtl`)",
    scope="node",
    parse=parse,
    collect=collect,
    judge=judge,
    expect_keys=("acs_redirect",),
)
