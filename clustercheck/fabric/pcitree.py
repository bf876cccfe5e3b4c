"""The PCIe tree as sysfs shows it (what `lstopo` draws): where each device hangs, how two devices are
related, and the links on the way between them.

`/sys/bus/pci/devices/<bdf>` is a link into `/sys/devices/pci<domain>:<bus>/<root port>/.../<bdf>`: the
directories on that path are the bridges above the device (root port, switch ports), the first one the
host bridge (root complex). Two devices are related as `nvidia-smi topo -m` names it (its legend):

- PIX: at most a single PCIe bridge between them (both below the same switch, or the same bridge);
- PXB: several PCIe bridges, without the host bridge (switches below switches);
- PHB: through the host bridge (the same root complex, different root ports);
- NODE: between host bridges of one NUMA node;
- SYS: across the interconnect between NUMA nodes.

Each link on the way has a speed and width (`current_link_speed`, `current_link_width`); the slowest one
bounds what can cross (a GPU at Gen5 x16 behind a Gen4 x8 uplink moves at most ~15.75 GB/s, which the
lstopo reading of a p5 in the Hugging Face playbook shows). Pure standard library; never raises for the
hardware's sake: a file that cannot be read is None, a device that is not there is said so.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from clustercheck.fabric.pcibus import is_accelerator

BDF = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
ROOT = re.compile(r"^pci[0-9a-f]{4}:[0-9a-f]{2}$")
# GB/s per lane after line encoding, per transfer rate (GT/s): 8b/10b to Gen2, 128b/130b from Gen3, the
# PCIe 6.0 FLIT rate as Wikipedia's PCI Express table gives it (the table the seed's write-up quotes)
_LANE_GBS = {2.5: 0.25, 5.0: 0.5, 8.0: 0.985, 16.0: 1.969, 32.0: 3.938, 64.0: 7.563, 128.0: 15.125}
_SPEED = re.compile(r"^\s*(\d{1,3}(?:\.\d{1,3})?)\s*GT/s")  # strict: "1.2.3 GT/s" is unknown, never a raise

# PCI class codes (the PCI ID database's class list): NVMe 0x010802, network controller 0x02, InfiniBand
# 0x0207; a GPU is what fabric/pcibus.py calls an accelerator (the one rule detection and pcie-link use too)


@dataclass(frozen=True)
class Link:
    """One device's upstream link as sysfs reports it."""

    bdf: str
    speed_gts: float | None
    width: int | None
    max_speed_gts: float | None
    max_width: int | None

    @property
    def gbs(self) -> float | None:
        """Unidirectional GB/s the link carries at its current speed and width."""
        lane = _LANE_GBS.get(self.speed_gts or -1.0)
        return round(lane * self.width, 2) if lane and self.width else None

    def text(self) -> str:
        if self.speed_gts is None or self.width is None:
            return f"{self.bdf} (link unknown)"
        down = " (below its max)" if (self.max_speed_gts and self.speed_gts < self.max_speed_gts) or \
            (self.max_width and self.width < self.max_width) else ""
        return f"{self.bdf} {self.speed_gts:g} GT/s x{self.width}{down}"


@dataclass(frozen=True)
class Device:
    bdf: str
    cls: int | None          # the 24-bit class code
    vendor: int | None
    device: int | None
    numa: int | None         # -1 in sysfs (no NUMA information) is None
    root: str                # the host bridge directory, e.g. "pci0000:c0"
    bridges: tuple[str, ...]  # BDFs of the bridges above it, from the root port down

    @property
    def is_gpu(self) -> bool:
        
        return self.cls is not None and self.vendor is not None and is_accelerator(self.vendor, self.cls >> 8)

    @property
    def is_nvme(self) -> bool:
        return self.cls is not None and self.cls >> 8 == 0x0108


@dataclass(frozen=True)
class Path_:
    """The way between two devices: their relation, the bridges crossed and the slowest link on it."""

    a: str
    b: str
    level: str                   # PIX, PXB, PHB, NODE, SYS
    via: tuple[str, ...]         # bridges crossed (BDFs), host bridges as pciDDDD:BB
    links: tuple[Link, ...]      # each device's and bridge's upstream link on the way

    @property
    def bottleneck(self) -> Link | None:
        known = [l for l in self.links if l.gbs is not None]
        return min(known, key=lambda l: l.gbs or 0.0) if known else None

    def as_dict(self) -> dict[str, object]:
        neck = self.bottleneck
        return {"to": self.b, "level": self.level, "via": list(self.via),
                "links": [l.text() for l in self.links],
                "bottleneck_gbs": neck.gbs if neck else None, "bottleneck": neck.text() if neck else None}


class PciTree:
    """The PCI devices under `sys_root` (normally /sys), read once."""

    def __init__(self, sys_root: Path = Path("/sys")) -> None:
        self.sys = sys_root
        self.devices: dict[str, Device] = {}
        self.problems: list[str] = []
        self.unread: set[str] = set()  # those of problems that are a directory that could not be read
        try:  # a machine with one NUMA node: the kernel's -1 (no affinity information) is that node
            nodes = [n for n in os.listdir(sys_root / "devices" / "system" / "node") if re.fullmatch(r"node\d+", n)]
        except OSError:
            nodes = []
        self.single_node = len(nodes) == 1
        base = sys_root / "bus" / "pci" / "devices"
        try:
            names = sorted(os.listdir(base))
        except OSError as exc:
            self.problems.append(f"{base}: cannot be listed ({exc.strerror or exc})")
            self.unread.add(self.problems[-1])
            return
        for name in names:
            dev = self._device(base / name, name.lower())
            if dev is not None:
                self.devices[dev.bdf] = dev

    def _device(self, link: Path, bdf: str) -> Device | None:
        try:
            real = Path(os.path.realpath(link))
        except OSError:
            real = link
        parts = real.parts
        root = next((p for p in parts if ROOT.match(p)), "")
        if not BDF.match(bdf) or not root:
            self.problems.append(f"{link}: not a PCI device under a host bridge (resolves to {real})")
            return None
        chain = [p for p in parts[parts.index(root) + 1:] if BDF.match(p)]
        if not chain or chain[-1] != bdf:
            self.problems.append(f"{link}: its sysfs path {real} does not end in {bdf}")
            return None
        numa = _int(real / "numa_node", 10)
        numa = None if numa is None or numa < 0 else numa
        return Device(bdf, _int(real / "class", 16), _int(real / "vendor", 16), _int(real / "device", 16),
                      0 if numa is None and self.single_node else numa, root, tuple(chain[:-1]))

    def link(self, bdf: str) -> Link:
        d = self.sys / "bus" / "pci" / "devices" / bdf
        return Link(bdf, _speed(d / "current_link_speed"), _int(d / "current_link_width", 10),
                    _speed(d / "max_link_speed"), _int(d / "max_link_width", 10))

    def gpus(self) -> list[Device]:
        """Accelerator functions of the GPU vendors (display or processing-accelerator class)."""
        return [d for d in self.devices.values() if d.is_gpu]

    def nvme(self) -> list[Device]:
        return [d for d in self.devices.values() if d.is_nvme]

    def path(self, a: str, b: str) -> Path_ | None:
        """How devices `a` and `b` are related, or None when either is not in the tree."""
        da, db = self.devices.get(a), self.devices.get(b)
        if da is None or db is None:
            return None
        if da.root != db.root:
            level = "NODE" if da.numa is not None and da.numa == db.numa else "SYS"
            via = (*reversed(da.bridges), da.root, db.root, *db.bridges)
            links = [self.link(x) for x in (a, *reversed(da.bridges), *db.bridges, b)]
            return Path_(a, b, level, via, tuple(links))
        common = 0
        for x, y in zip(da.bridges, db.bridges):
            if x != y:
                break
            common += 1
        below_a, below_b = da.bridges[common:], db.bridges[common:]
        if not common:  # only the host bridge in common: separate root ports
            via = (*reversed(below_a), da.root, *below_b)
            level = "PHB"
        else:
            shared = da.bridges[common - 1]
            via = (*reversed(below_a), shared, *below_b)
            # below one switch: a downstream port each (or none: the same bridge); deeper is several switches
            level = "PIX" if len(below_a) <= 1 and len(below_b) <= 1 else "PXB"
        links = [self.link(x) for x in (a, *reversed(below_a), *below_b, b)]
        return Path_(a, b, level, via, tuple(links))

    def nearest_gpu(self, bdf: str) -> Path_ | None:
        """The path to the GPU nearest `bdf` (fewest levels, then fewest bridges; ties by bus id)."""
        order = {"PIX": 0, "PXB": 1, "PHB": 2, "NODE": 3, "SYS": 4}
        paths = [p for g in self.gpus() if g.bdf != bdf and (p := self.path(bdf, g.bdf)) is not None]
        return min(paths, key=lambda p: (order[p.level], len(p.via), p.b), default=None)


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None


def _int(path: Path, base: int) -> int | None:
    text = _read(path)
    try:
        return int(text, base) if text else None
    except ValueError:
        return None


def _speed(path: Path) -> float | None:
    m = _SPEED.match(_read(path) or "")  # "16.0 GT/s PCIe", "2.5 GT/s", "Unknown"
    return float(m.group(1)) if m else None
