"""Sysfs trees built from real captures of real machines, for clustercheck/fabric/ to read.

A tree holds only what its captures say, in the formats the kernel writes:
- the PCI hierarchy from `lspci -tv` (domains, bridges and their secondary buses, devices) or from
  `lstopo -v` (bridges with their bus ranges: a device on bus B hangs below the bridge whose range
  starts at B);
- class, NUMA node and link speed/width of the devices `lspci -vvv` or lstopo describes (`class`
  "0x030000", `numa_node` "1", `current_link_speed` "32.0 GT/s PCIe", `current_link_width` "16");
  a vendor file only where the capture names the vendor;
- RDMA ports from `ibstat`/`ibv_devinfo` (probes/ib.py reads them), written as the kernel writes
  `/sys/class/infiniband/<dev>/ports/<n>/{state, phys_state, rate, link_layer}`;
- NUMA nodes from `numactl --hardware` (`available: 2 nodes (0-1)`).
What a capture does not say is left out (the reader then reads None), never made up.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

_TOKEN = re.compile(r"(?P<lead>[+\\-])-(?P<dev>[0-9a-f]{2}\.[0-7])(?:-\[(?P<sec>[0-9a-f]{2})(?:-[0-9a-f]{2})?\])?")
_ROOT = re.compile(r"\[(?P<dom>[0-9a-f]{4}):(?P<bus>[0-9a-f]{2})\]")
_VVV_HEAD = re.compile(r"^(?P<bdf>[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]) (?P<cls>[^:]+): (?P<name>.+)$")
_LNK = re.compile(r"Speed (?P<speed>[\d.]+)GT/s[^,]*, Width x(?P<width>\d+)")
_CLASSES = {"VGA compatible controller": 0x030000, "3D controller": 0x030200, "Ethernet controller": 0x020000,
            "Infiniband controller": 0x020700, "Non-Volatile memory controller": 0x010802,
            "RAID bus controller": 0x010400, "Audio device": 0x040300}
_VENDORS = {"NVIDIA Corporation": 0x10DE, "Mellanox Technologies": 0x15B3}
_IB_STATE = {"DOWN": 1, "INIT": 2, "ARMED": 3, "ACTIVE": 4, "ACTIVE_DEFER": 5}
_IB_PHYS = {"SLEEP": (1, "Sleep"), "POLLING": (2, "Polling"), "DISABLED": (3, "Disabled"),
            "LINKUP": (5, "LinkUp"), "LINK_UP": (5, "LinkUp"), "LINKERRORRECOVERY": (6, "LinkErrorRecovery")}


@dataclass
class Dev:
    bdf: str
    name: str
    parent: str          # a BDF, or the host bridge "pci0000:20"
    secondary: str = ""  # a bridge's secondary bus
    files: dict[str, str] = field(default_factory=dict)


@dataclass
class Tree:
    devices: dict[str, Dev] = field(default_factory=dict)
    numa_nodes: int = 0
    ports: list[tuple[str, int, dict[str, str]]] = field(default_factory=list)  # (rdma dev, port, files)
    rdma_pci: dict[str, str] = field(default_factory=dict)                      # rdma dev -> its PCI function

    def chain(self, bdf: str) -> list[str]:
        out = [bdf]
        while not out[-1].startswith("pci"):
            out.append(self.devices[out[-1]].parent)
        return list(reversed(out))

    def write(self, root: Path) -> Path:
        """Lay the tree out under root (a stand-in for /sys) and return root."""
        bus = root / "bus" / "pci" / "devices"
        bus.mkdir(parents=True, exist_ok=True)
        for bdf, dev in self.devices.items():
            real = root / "devices" / Path(*self.chain(bdf))
            real.mkdir(parents=True, exist_ok=True)
            for name, text in dev.files.items():
                (real / name).write_text(text + "\n")
            os.symlink(os.path.relpath(real, bus), bus / bdf)
        for n in range(self.numa_nodes):
            (root / "devices" / "system" / "node" / f"node{n}").mkdir(parents=True, exist_ok=True)
        for dev, port, files in self.ports:
            d = root / "class" / "infiniband" / dev / "ports" / str(port)
            d.mkdir(parents=True, exist_ok=True)
            for name, text in files.items():
                (d / name).write_text(text + "\n")
            pci = self.rdma_pci.get(dev)
            if pci and not (root / "class" / "infiniband" / dev / "device").exists():
                os.symlink(os.path.relpath(root / "devices" / Path(*self.chain(pci)), d.parent.parent),
                           d.parent.parent / "device")
        return root


def from_lspci(tv: str, vvv: str = "", numactl: str = "") -> Tree:
    """The tree of `lspci -tv`, with `lspci -vvv` details and `numactl --hardware`'s node count."""
    tree = Tree()
    stack: list[tuple[int, str, str]] = []  # (column, bdf or root, the bus its children sit on)
    domain = ""
    for line in tv.splitlines():
        root = _ROOT.search(line)
        if root:
            domain = root.group("dom")
            stack = [(root.start(), f"pci{domain}:{root.group('bus')}", root.group("bus"))]
        for m in _TOKEN.finditer(line):
            if root and m.start() < root.end():
                continue
            col = m.start()
            while len(stack) > 1 and stack[-1][0] >= col:
                stack.pop()
            parent, on_bus = stack[-1][1], stack[-1][2]
            bdf = f"{domain}:{on_bus}:{m.group('dev')}"
            rest = line[m.end():]
            name = rest.strip() if rest.startswith("  ") else ""
            sec = m.group("sec") or ""
            tree.devices[bdf] = Dev(bdf, name, parent, sec)
            stack.append((col, bdf, sec))
            if name:
                break  # the description runs to the end of the line
    for bdf, dev in tree.devices.items():
        if dev.secondary:
            dev.files["class"] = "0x060400"
        elif "NVMe SSD Controller" in dev.name:
            dev.files["class"] = "0x010802"
        vendor = next((v for k, v in _VENDORS.items() if dev.name.startswith(k)), None)
        if vendor is not None:
            dev.files["vendor"] = f"0x{vendor:04x}"
    _details(tree, vvv)
    # the kernel takes a PCI device's NUMA node from its host bridge (pcibus_to_node): a device lspci -vvv
    # does not describe has the node of one it does describe under the same root complex
    by_root: dict[str, str] = {}
    for bdf, dev in tree.devices.items():
        if "numa_node" in dev.files:
            by_root.setdefault(tree.chain(bdf)[0], dev.files["numa_node"])
    for bdf, dev in tree.devices.items():
        node = by_root.get(tree.chain(bdf)[0])
        if node is not None:
            dev.files.setdefault("numa_node", node)
    m = re.search(r"available: (\d+) nodes", numactl)
    tree.numa_nodes = int(m.group(1)) if m else 0
    return tree


def _details(tree: Tree, vvv: str) -> None:
    current: Dev | None = None
    for line in vvv.splitlines():
        head = _VVV_HEAD.match(line)
        if head:
            bdf = f"0000:{head.group('bdf')}"
            current = tree.devices.get(bdf)
            if current is not None and head.group("cls") in _CLASSES:
                current.files["class"] = f"0x{_CLASSES[head.group('cls')]:06x}"
            continue
        if current is None:
            continue
        s = line.strip()
        if s.startswith("NUMA node:"):
            current.files["numa_node"] = s.split(":")[1].strip()
        m = _LNK.search(s)
        if m and s.startswith(("LnkCap:", "LnkSta:")):
            kind = "max" if s.startswith("LnkCap:") else "current"
            current.files[f"{kind}_link_speed"] = f"{float(m.group('speed')):.1f} GT/s PCIe"
            current.files[f"{kind}_link_width"] = m.group("width")


_LSTOPO = re.compile(r"^\s*(?P<kind>PCIBridge|PCI) L#\d+ \(busid=(?P<bdf>[0-9a-f:.]+) id=(?P<vendor>[0-9a-f]{4}):"
                     r"[0-9a-f]{4} class=(?P<cls>[0-9a-f]{4})\([^)]*\) link=(?P<gbs>[\d.]+)GB/s"
                     r"(?: buses=[0-9a-f]{4}:\[(?P<sec>[0-9a-f]{2})-[0-9a-f]{2}\])?")
_HOSTBRIDGE = re.compile(r"HostBridge L#\d+ \(buses=(?P<dom>[0-9a-f]{4}):\[(?P<bus>[0-9a-f]{2})-")
# lstopo prints a link's bandwidth in GB/s; the speed and width that give it (PCIe 4.0 x8 = 15.75 GB/s,
# 5.0 x16 = 63.02 GB/s; the seed's own reading of these two numbers)
_LSTOPO_LINKS = {"15.75": ("16.0", "8"), "63.02": ("32.0", "16")}


def from_lstopo(text: str) -> Tree:
    """The devices `lstopo -v` lists, each below the bridge whose bus range starts at its bus."""
    tree = Tree()
    host = _HOSTBRIDGE.search(text)
    assert host, "no HostBridge line"
    root = f"pci{host.group('dom')}:{host.group('bus')}"
    found = [m for m in (_LSTOPO.match(line) for line in text.splitlines()) if m]
    by_sec = {m.group("sec"): m.group("bdf") for m in found if m.group("sec")}
    for m in found:
        bdf = m.group("bdf")
        bus = bdf.split(":")[1]
        dev = Dev(bdf, "", by_sec.get(bus, root), m.group("sec") or "")
        dev.files["class"] = f"0x{m.group('cls')}00"
        dev.files["vendor"] = f"0x{m.group('vendor')}"
        speed, width = _LSTOPO_LINKS[m.group("gbs")]
        dev.files.update(current_link_speed=f"{speed} GT/s PCIe", current_link_width=width)
        tree.devices[bdf] = dev
    return tree


def add_ports(tree: Tree, ports: list[tuple[str, int, str, str | None, float | None, str | None]],
              rdma_pci: dict[str, str], rate_text: dict[float, str] | None = None) -> Tree:
    """RDMA ports (device, port, state, physical state, Gb/s, link layer), e.g. from probes/ib.py's parse
    of a real ibstat/ibv_devinfo capture, written as the kernel writes them; `rate_text` gives the
    kernel's speed name for a rate ("(4X FDR)"), left out where the capture does not say."""
    for dev, port, state, phys, rate, layer in ports:
        files = {"state": f"{_IB_STATE[state]}: {state}"}
        if phys:
            number, word = _IB_PHYS[phys.replace(" ", "").upper()]
            files["phys_state"] = f"{number}: {word}"
        if rate is not None:
            files["rate"] = f"{rate:g} Gb/sec" + (f" {rate_text[rate]}" if rate_text and rate in rate_text else "")
        if layer:
            files["link_layer"] = layer
        tree.ports.append((dev, port, files))
    tree.rdma_pci.update(rdma_pci)
    return tree


def strip_source(text: str) -> str:
    """A fixture's text without its `# source:` line and the blank line after it."""
    lines = text.splitlines()
    return "\n".join(lines[2:] if lines and lines[0].startswith("# source:") else lines)
