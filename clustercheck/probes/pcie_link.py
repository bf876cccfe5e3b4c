"""PCIe link generation and width, current vs max, for GPUs (nvidia-smi -q) and any device (lspci -vvv).

A link trained below its maximum (a GPU at x2 of x16, a root port "downgraded") halves host<->device and
GPUDirect RDMA bandwidth. Idle NVIDIA GPUs lower the generation to save power (NVML's PCIe
link queries report the current, not the maximum, generation: https://docs.nvidia.com/deploy/nvml-api/), so a generation below max says "re-check under load"; a narrower width is never a power state.
From `nvidia-smi -q`, with the platform's `gpu_count`, a report listing another number of GPUs fails the
node (`nvsmi.listed`): the GPUs it lacks have no link to judge, and are named. A GPU whose link fields do
not read (missing, N/A, "Unknown Error") while another GPU's do is not judged, naming the fields. From
lspci and sysfs a GPU is what detection counts as an accelerator (fabric/pcibus.py, one rule for both): a
device of NVIDIA (PCI vendor 0x10de), AMD (0x1002) or Habana (0x1da3) of display (0x03) or
processing-accelerator (0x12) class, in sysfs not an SR-IOV virtual function; a BMC's VGA (ASPEED, 0x1a03),
an NVSwitch (a bridge, 0x0680) and an AMD CPU's own functions (0x1022) are not. Those GPUs are counted
against `gpu_count` as nvidia-smi's are, by count alone (neither numbers GPUs as nvidia-smi does), and a
GPU device line of lspci with no LnkCap/LnkSta under it is not judged. Live, a sysfs with no GPU or NIC
link is a skip only where the platform expects no GPU (no `gpu_count`, or 0): with `gpu_count` N it fails as
0 GPU(s) listed of N, and a machine without /sys/bus/pci has its N GPUs not judged.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from clustercheck.fabric import pcibus
from clustercheck.probes import nvsmi, tool
from clustercheck.probes.base import Probe, ProbeParseError, ProbeSkip, ProbeVerdict, count_of, not_judged
from clustercheck.toolout import evidence_lines

_HEADER = re.compile(r"^((?:[0-9a-fA-F]{4,}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])\s+(.+)$")
_SPEED = re.compile(r"Speed\s+(\d{1,4}(?:\.\d{1,3})?)GT/s[^W]{0,80}Width\s+x(\d{1,3})\b")
_GEN_OF_GTS = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6, 128.0: 7}
SYSFS = Path("/sys/bus/pci/devices")


@dataclass(frozen=True)
class PcieLink:
    subject: str
    description: str
    gen_current: int | None
    gen_max: int | None
    width_current: int | None
    width_max: int | None
    gpu: bool
    endpoint: bool = False  # a GPU or NIC read from sysfs: its link must be up (only a bridge's may be empty)
    unread: str = ""  # the link attributes that could not be read (sysfs): nothing can be judged
    incomplete: str = ""  # lspci: a LnkCap without its LnkSta or the reverse ("... at line N"): not judged
    downgraded: bool = False  # lspci marked the LnkSta "(downgraded)": fails on its own


@dataclass(frozen=True)
class PcieLinks:
    """The links read, and the `nvidia-smi -q` report they came from (None for lspci and sysfs)."""

    links: tuple[PcieLink, ...]
    report: nvsmi.NvsmiReport | None = None
    gpus: int | None = None  # lspci and sysfs: the GPUs the input lists (`pcibus.is_accelerator`), links read or not
    source: str = ""         # where they were listed ("lspci", "/sys/bus/pci"), for the count's verdict
    absent: str = ""         # live: why nothing could be listed (no /sys/bus/pci); judge() decides skip or not


def parse(text: str) -> PcieLinks:
    tool.refuse_crashed(text)
    if "GPU Link Info" in text or "NVSMI LOG" in text:
        report = nvsmi.parse(text)
        return PcieLinks(_from_nvsmi(report), report)
    links, gpus = _from_lspci(text)
    return PcieLinks(links, gpus=gpus, source="lspci")


_NVSMI_LINK = ("PCIe Generation/Current", "PCIe Generation/Max", "Link Width/Current", "Link Width/Max")


def _from_nvsmi(report: nvsmi.NvsmiReport) -> tuple[PcieLink, ...]:
    out = []
    for g in report.gpus:
        raw = [g.get(f"PCI/GPU Link Info/{field}") for field in _NVSMI_LINK]
        gen_c, gen_m, w_c, w_m = (nvsmi.number(v) for v in raw)
        if None in (gen_c, gen_m, w_c, w_m):
            # a GPU whose link does not read while another's does was not judged, never left out; an
            # excerpt with no GPU's PCI section (retired pages only) is refused below
            unread = ", ".join(f"{f} = {v!r}" if v is not None else f"{f} missing" for f, v in zip(_NVSMI_LINK, raw)
                               if nvsmi.number(v) is None)
            out.append(PcieLink(g.label, g.product, None, None, None, None, True, unread=f"GPU Link Info {unread}"))
            continue
        out.append(PcieLink(g.label, g.product, int(gen_c), int(gen_m), int(w_c), int(w_m), True))  # type: ignore[arg-type]
    if all(link.unread for link in out):
        raise ProbeParseError("expected `nvidia-smi -q` with a 'GPU Link Info' section (PCIe Generation, "
                              "Link Width) for at least one GPU")
    return tuple(out)


def _from_lspci(text: str) -> tuple[tuple[PcieLink, ...], int]:
    """The links lspci shows, and how many GPUs (bus ids) it lists."""
    out = []
    gpus: set[str] = set()
    cur: tuple[str, str] | None = None
    cap: tuple[int, int, int] | None = None   # (gen, width, line) of a LnkCap whose LnkSta is not yet read
    head = (0, 0)  # the line of the current device line, and how many links were read under it

    def no_sta() -> None:
        if cur is not None and cap is not None:
            out.append(PcieLink(cur[0], cur[1], None, cap[0] or None, None, cap[1], _is_gpu(cur[1]),
                                incomplete=f"LnkCap/LnkSta pair incomplete at line {cap[2]}: a LnkCap and no LnkSta"))

    def section_end() -> None:
        no_sta()
        if cur is not None and _is_gpu(cur[1]) and len(out) == head[1]:  # a GPU listed, its link never read
            out.append(PcieLink(cur[0], cur[1], None, None, None, None, True,
                                incomplete=f"no LnkCap/LnkSta under its device line (line {head[0]})"))

    for number, line in enumerate(evidence_lines(text), 1):
        m = _HEADER.match(line)
        if m:
            section_end()
            cur, cap = (m.group(1) if m.group(1).count(":") == 2 else f"0000:{m.group(1)}", m.group(2)), None
            head = (number, len(out))
            if _is_gpu(cur[1]):
                gpus.add(cur[0])
            continue
        s = line.strip()
        if cur is None or not (s.startswith("LnkCap:") or s.startswith("LnkSta:")):
            continue
        sm = _SPEED.search(s)
        if not sm:
            raise ProbeParseError(f"line {number}: expected 'Speed NGT/s, Width xN' in {s!r}")
        gen = _GEN_OF_GTS.get(float(sm.group(1)))
        width = int(sm.group(2))
        if s.startswith("LnkCap:"):
            no_sta()
            cap = (gen or 0, width, number)
            continue
        downgraded = "(downgraded)" in s
        if cap is None:
            out.append(PcieLink(cur[0], cur[1], gen, None, width, None, _is_gpu(cur[1]), downgraded=downgraded,
                                incomplete=f"LnkCap/LnkSta pair incomplete at line {number}: a LnkSta and no LnkCap"))
        else:
            out.append(PcieLink(cur[0], cur[1], gen, cap[0], width, cap[1], _is_gpu(cur[1]), downgraded=downgraded))
            cap = None
    section_end()
    if all(link.incomplete.startswith("no LnkCap/LnkSta") for link in out):  # none, or GPU device lines alone
        raise ProbeParseError("expected `nvidia-smi -q` output or `lspci -vvv` with LnkCap:/LnkSta: lines "
                              "under device lines such as '0000:21:00.0 Ethernet controller: ...'")
    return tuple(out), len(gpus)


_IDS = re.compile(r"\[([0-9a-fA-F]{4}):[0-9a-fA-F]{4}\]")
_NUMERIC = re.compile(r"([0-9a-fA-F]{4}): ([0-9a-fA-F]{4}):[0-9a-fA-F]{4}\b")  # `lspci -n`: "0302: 10de:2330"


def _is_gpu(description: str) -> bool:
    """lspci's device line after the bus id: "3D controller: NVIDIA Corporation GH100 [H100 SXM5 80GB]", with
    `-nn` "3D controller [0302]: NVIDIA Corporation GH100 [...] [10de:2330]", with `-n` "0302: 10de:2330".
    A GPU is what detection counts (`pcibus.is_accelerator`, its lspci words beside it); lspci -vvv shows
    no `physfn`, so an SR-IOV virtual function listed there counts as its vendor and class say."""
    numeric = _NUMERIC.match(description)
    if numeric:
        return pcibus.is_accelerator(int(numeric.group(2), 16), int(numeric.group(1), 16))
    cls, _, name = description.partition(": ")
    code = cls[-6:] if cls.endswith("]") and cls[-6:-5] == "[" else ""
    ids = _IDS.findall(name[-200:])  # -nn puts the ids last, before "(rev ..)" and "(prog-if ..)"
    try:
        cls_code = int(code[1:5], 16) if code else None
        vendor = int(ids[-1], 16) if ids else None
    except ValueError:
        cls_code = vendor = None
    by_class = cls_code >> 8 in pcibus.ACCEL_CLASSES if cls_code is not None else cls.startswith(pcibus.ACCEL_CLASS_WORDS)
    by_vendor = vendor in pcibus.ACCEL_VENDORS if vendor is not None else name.startswith(pcibus.ACCEL_VENDOR_WORDS)
    return by_class and by_vendor


def judge(read: PcieLinks | tuple[PcieLink, ...], expect: Mapping[str, Any]) -> list[ProbeVerdict]:
    links, report = (read.links, read.report) if isinstance(read, PcieLinks) else (read, None)
    if isinstance(read, PcieLinks) and report is None and not links:
        return _nothing_listed(read, expect)
    out = nvsmi.coverage(report, "pcie-link") if report is not None else []
    want_gen, want_width = expect.get("pcie_gen"), expect.get("pcie_width")
    for link in links:
        measured = f"Gen{link.gen_current} x{link.width_current}"
        maximum = f"Gen{link.gen_max} x{link.width_max}"
        device = link.gpu or link.endpoint
        if link.unread:
            out.append(not_judged(link.subject, "PCIe link", f"{link.unread} could not be read ({link.description})"))
            continue
        if link.downgraded and (link.incomplete or link.gen_max is None):  # lspci itself says the link trained low
            out.append(ProbeVerdict(link.subject, "PCIe link", False, f"LnkSta {measured} (downgraded); "
                                    f"{link.incomplete} ({link.description})", measured, "the LnkCap"))
            continue
        if link.incomplete:
            out.append(not_judged(link.subject, "PCIe link", f"{link.incomplete} ({link.description})", measured))
            continue
        if link.width_current == 0 and device:  # the GPU or NIC is there, its link is not
            out.append(ProbeVerdict(link.subject, "PCIe link", False, f"link down: x0 of x{link.width_max} "
                                    f"({link.description})", measured, maximum))
            continue
        if link.width_current == 0:
            out.append(ProbeVerdict(link.subject, "PCIe link", True, f"no link trained (x0 of x{link.width_max}): "
                                    f"empty slot or nothing attached ({link.description})", measured, maximum))
            continue
        unread_gen = device and (link.gen_current is None or link.gen_max is None)
        if unread_gen and link.gpu and want_gen:  # the platform's generation cannot be judged on it
            out.append(not_judged(link.subject, "PCIe link", f"the link speed reads as no PCIe generation, so "
                                  f"Gen{want_gen} cannot be judged ({link.description})", measured, maximum))
            continue
        problems = []
        if link.width_current is not None and link.width_max is not None and link.width_current < link.width_max:
            problems.append(f"width x{link.width_current} below x{link.width_max}")
        if link.gen_current is not None and link.gen_max and link.gen_current < link.gen_max:
            problems.append(f"Gen{link.gen_current} below Gen{link.gen_max}"
                            + (" (idle GPUs lower the generation: re-check under load)" if link.gpu else ""))
        if link.gpu and want_width and (link.width_max or 0) < want_width:
            problems.append(f"max width x{link.width_max} below the platform's x{want_width}")
        if link.gpu and want_gen and (link.gen_max or 0) < want_gen:
            problems.append(f"max Gen{link.gen_max} below the platform's Gen{want_gen}")
        if link.downgraded and not problems:
            problems.append("lspci marks the link (downgraded)")
        detail = "; ".join(problems) if problems else f"{measured} of {maximum}"
        if unread_gen:  # a speed the kernel calls Unknown (a Socket Direct NIC, a newer link than it knows)
            detail += "; the generation does not read (its speed is unknown to the kernel): width judged alone"
        out.append(ProbeVerdict(link.subject, "PCIe link", not problems, f"{detail} ({link.description})",
                                measured, maximum))
    if report is not None:
        return out + nvsmi.listed(report, expect, "PCIe links")
    return out + (_listed(read.gpus, read.source, expect) if isinstance(read, PcieLinks) else [])


def _nothing_listed(read: PcieLinks, expect: Mapping[str, Any]) -> list[ProbeVerdict]:
    """Live, no GPU or NIC link listed: a skip only where the platform expects no GPU (no `gpu_count`, or 0).
    collect() cannot see the expectation, so it returns the empty listing and the skip is decided here: a
    node whose 8 GPUs all fell off the bus reads as 0 of 8, never as a machine without PCIe links; one with
    no /sys/bus/pci to read (a container without sysfs) could count nothing, so its GPUs are not judged."""
    want = count_of(expect.get("gpu_count"))
    if not want:
        raise ProbeSkip(read.absent or f"no GPU or NIC with a PCIe link in {read.source} (virtual devices only)")
    if read.absent:
        return [not_judged("node", "GPUs listed", f"{read.absent}: the platform's {want} GPU(s) could not be "
                           f"listed, nor their PCIe links read", expected=want)]
    return _listed(read.gpus or 0, read.source, expect)


def _listed(have: int | None, source: str, expect: Mapping[str, Any]) -> list[ProbeVerdict]:
    """The GPUs lspci or sysfs lists against the platform's `gpu_count`, as `nvsmi.listed` counts a report's:
    a node with 7 of its 8 GPUs listed passed on the 7 links read. Neither numbers GPUs as nvidia-smi does,
    so the missing ones are counted, not named."""
    want = count_of(expect.get("gpu_count"))
    if want is None or have is None:
        return []
    if have == want:
        return [ProbeVerdict("node", "GPUs listed", True, f"{have} GPU(s) listed, as the platform has", have, want)]
    missing = (f"{want - have} GPU(s) not listed by {source} (which ones it cannot say: it numbers no GPUs), "
               f"their PCIe links not judged; " if have < want else "")
    return [ProbeVerdict("node", "GPUs listed", False, f"{missing}{have} GPU(s) listed, the platform has {want}",
                         have, want)]


def collect() -> PcieLinks:
    """Display and accelerator devices (GPUs among them: `pcibus.accelerator_function`) and NICs (network,
    InfiniBand) from sysfs link attributes, and how many GPUs sysfs lists; no root needed. Nothing listed is returned, not
    skipped: only judge() knows whether the platform expects GPUs here (`_nothing_listed`)."""
    if not SYSFS.is_dir():
        return PcieLinks((), source="/sys/bus/pci", absent="no /sys/bus/pci on this machine")
    out = []
    gpus = 0
    for dev in sorted(SYSFS.iterdir()):
        cls = int(_read(dev / "class") or "0", 16)
        if not (cls >> 16 in pcibus.ACCEL_CLASSES or cls >> 8 in (0x0200, 0x0207)):
            continue
        if pcibus.virtual_function(dev):
            continue  # it reports x0, and its link is its physical function's; no GPU to count either
        gpu = pcibus.accelerator_function(dev, int(_read(dev / "vendor") or "0", 16), cls)
        gpus += gpu  # listed, its link read or not
        attrs = {name: _read(dev / name) for name in _LINK_ATTRS}
        if not any(attrs.values()) and not gpu:
            continue  # virtual devices have no PCIe link; a GPU without one is not judged (unread), never dropped
        description = f"class {cls >> 8:04x} [{_read(dev / 'vendor')[2:]}:{_read(dev / 'device')[2:]}]"
        widths = [_width(attrs[name]) for name in ("current_link_width", "max_link_width")]
        unread = [name for name, value in attrs.items() if not value] + \
            [name for name, w in zip(("current_link_width", "max_link_width"), widths) if attrs[name] and w is None]
        out.append(PcieLink(dev.name, description, _gen(attrs["current_link_speed"]), _gen(attrs["max_link_speed"]),
                            widths[0], widths[1], gpu, endpoint=True, unread=", ".join(unread)))
    return PcieLinks(tuple(out), gpus=gpus, source="/sys/bus/pci")


_LINK_ATTRS = ("current_link_speed", "max_link_speed", "current_link_width", "max_link_width")


def _width(text: str) -> int | None:
    return int(text) if text.isdigit() else None


def _gen(speed: str) -> int | None:
    m = re.match(r"([\d.]+)\s*GT/s", speed)
    return _GEN_OF_GTS.get(float(m.group(1))) if m else None


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


PROBE = Probe(
    name="pcie-link",
    description="PCIe link generation and width, current vs max, for GPUs and NICs",
    input_help="`nvidia-smi -q` output, or `sudo lspci -vvv` (LnkCap/LnkSta)",
    scope="gpu",
    parse=parse,
    collect=collect,
    judge=judge,
    expect_keys=("pcie_gen", "pcie_width", "gpu_count"),
)
