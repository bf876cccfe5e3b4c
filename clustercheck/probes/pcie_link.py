"""PCIe link generation and width, current vs max, for GPUs (nvidia-smi -q) and any device (lspci -vvv).

A link trained below its maximum (a GPU at x2 of x16, a root port "downgraded") halves host<->device and
GPUDirect RDMA bandwidth. Idle NVIDIA GPUs lower the generation to save power (NVML's PCIe
link queries report the current, not the maximum, generation: https://docs.nvidia.com/deploy/nvml-api/), so a generation below max says "re-check under load"; a narrower width is never a power state.
From `nvidia-smi -q`, with the platform's `gpu_count`, a report listing another number of GPUs fails the
node (`nvsmi.listed`): the GPUs it lacks have no link to judge, and are named. A GPU whose link fields do
not read (missing, N/A, "Unknown Error") while another GPU's do is not judged, naming the fields. lspci
and sysfs list every display device (a BMC's VGA among them), so their GPUs are not counted against it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from clustercheck.probes import nvsmi, tool
from clustercheck.probes.base import Probe, ProbeParseError, ProbeSkip, ProbeVerdict, not_judged
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


def parse(text: str) -> PcieLinks:
    tool.refuse_crashed(text)
    if "GPU Link Info" in text or "NVSMI LOG" in text:
        report = nvsmi.parse(text)
        return PcieLinks(_from_nvsmi(report), report)
    return PcieLinks(_from_lspci(text))


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


def _from_lspci(text: str) -> tuple[PcieLink, ...]:
    out = []
    cur: tuple[str, str] | None = None
    cap: tuple[int, int, int] | None = None   # (gen, width, line) of a LnkCap whose LnkSta is not yet read

    def no_sta() -> None:
        if cur is not None and cap is not None:
            out.append(PcieLink(cur[0], cur[1], None, cap[0] or None, None, cap[1], _is_gpu(cur[1]),
                                incomplete=f"LnkCap/LnkSta pair incomplete at line {cap[2]}: a LnkCap and no LnkSta"))

    for number, line in enumerate(evidence_lines(text), 1):
        m = _HEADER.match(line)
        if m:
            no_sta()
            cur, cap = (m.group(1) if m.group(1).count(":") == 2 else f"0000:{m.group(1)}", m.group(2)), None
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
    no_sta()
    if not out:
        raise ProbeParseError("expected `nvidia-smi -q` output or `lspci -vvv` with LnkCap:/LnkSta: lines "
                              "under device lines such as '0000:21:00.0 Ethernet controller: ...'")
    return tuple(out)


def _is_gpu(description: str) -> bool:
    return "NVIDIA" in description and ("3D" in description or "VGA" in description)


def judge(read: PcieLinks | tuple[PcieLink, ...], expect: Mapping[str, Any]) -> list[ProbeVerdict]:
    links, report = (read.links, read.report) if isinstance(read, PcieLinks) else (read, None)
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
    return out + (nvsmi.listed(report, expect, "PCIe links") if report is not None else [])


def collect() -> tuple[PcieLink, ...]:
    """GPUs (display class) and NICs (network, InfiniBand) from sysfs link attributes; no root needed."""
    if not SYSFS.is_dir():
        raise ProbeSkip("no /sys/bus/pci on this machine")
    out = []
    for dev in sorted(SYSFS.iterdir()):
        cls = int(_read(dev / "class") or "0", 16)
        if not (cls >> 16 in (0x03, 0x12) or cls >> 8 in (0x0200, 0x0207)):
            continue
        if (dev / "physfn").exists():
            continue  # an SR-IOV virtual function: it reports x0, and its link is its physical function's
        attrs = {name: _read(dev / name) for name in _LINK_ATTRS}
        if not any(attrs.values()):
            continue  # virtual devices have no PCIe link
        description = f"class {cls >> 8:04x} [{_read(dev / 'vendor')[2:]}:{_read(dev / 'device')[2:]}]"
        widths = [_width(attrs[name]) for name in ("current_link_width", "max_link_width")]
        unread = [name for name, value in attrs.items() if not value] + \
            [name for name, w in zip(("current_link_width", "max_link_width"), widths) if attrs[name] and w is None]
        out.append(PcieLink(dev.name, description, _gen(attrs["current_link_speed"]), _gen(attrs["max_link_speed"]),
                            widths[0], widths[1], cls >> 16 in (0x03, 0x12), endpoint=True, unread=", ".join(unread)))
    if not out:
        raise ProbeSkip("no GPU or NIC with a PCIe link in /sys/bus/pci (virtual devices only)")
    return tuple(out)


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
