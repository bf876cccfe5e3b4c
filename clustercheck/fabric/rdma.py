"""A node's network as sysfs shows it, read by its first rank: RDMA ports, the GPU nearest each NIC,
whether GPUDirect RDMA can work, and the PCIe path from each NIC and NVMe drive to its GPU.

- Ports: `/sys/class/infiniband/<dev>/ports/<n>/{state, phys_state, rate, link_layer}` as the kernel
  writes them ("4: ACTIVE", "5: LinkUp", "400 Gb/sec (4X NDR)", "InfiniBand" or "Ethernet" for RoCE);
  the device's PCI function is its `device` link.
- GPUDirect RDMA: the peer-memory module NCCL's IB transport looks for
  (`/sys/kernel/mm/memory_peers/nv_mem/version`, `.../nv_mem_nc/version`, `/sys/module/nvidia_peermem`:
  NVIDIA/nccl src/transport/net_ib; on AWS EFA `/sys/module/efa_nv_peermem`), or dma-buf, which needs NVIDIA's open kernel modules
  (`/proc/driver/nvidia/version` says "Open Kernel Module") on Linux 5.12 or later (ibv_reg_dmabuf_mr).
- PCIe paths: `fabric/pcitree.py`.

An unreadable or inconsistent tree never reads as healthy: each such finding is a `Problem` of the node
(a port ACTIVE while its physical link is not LinkUp, a rate the kernel would not write, a device whose
PCI function is missing or whose ports/ directory lists no port), which the `ib` probe turns into a failed
verdict on that node. Each is recorded with what it is where it is found (its device or port, whether a file
could not be read, whether it is the NICs' own), so no reader re-parses its words. Standard library only;
never raises for the hardware's sake.
"""

from __future__ import annotations

import math
import os
import platform
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Mapping

from clustercheck.errors import HarnessError
from clustercheck.fabric.pcitree import PciTree

_STATE = re.compile(r"^\s*(\d+)\s*:\s*(\S.*?)\s*$")        # "4: ACTIVE", "5: LinkUp"
_RATE = re.compile(r"^\s*(\d{1,12}(?:\.\d{1,6})?)\s*Gb/sec(?:\s*\((.*)\))?\s*$")  # "400 Gb/sec (4X NDR)"
# What a port's rate can be. The kernel writes it (drivers/infiniband/core/sysfs.c rate_show) as a lane's speed
# times the width: SDR 2.5 Gb/s a lane (also its default for a speed it does not know) at 1X is the least, XDR
# ~212.5 at 12X (~2550) the most today; a RoCE port's speed is its ethtool speed mapped onto the same lanes and
# widths (ib_get_eth_speed). 3200 leaves room for the next speed and still refuses an absurd rate, which would
# become the run's line rate and fail every node as hardware. 0, which the kernel writes for an EFA port, is
# read as 0: the line rate and the ib probe judge a port at no rate.
RATE_MIN_GBPS = 2.5
RATE_MAX_GBPS = 3200.0
_PEERMEM = ("kernel/mm/memory_peers/nv_mem/version", "kernel/mm/memory_peers/nv_mem_nc/version",
            "module/nvidia_peermem/version",
            "module/efa_nv_peermem/version")  # AWS EFA's own peer-memory module (amzn-drivers, "EFA NV Peermem")
_DMABUF_KERNEL = (5, 12)
_SUBJECT = re.compile(r"[A-Za-z0-9_.-]{1,64}(?:/\d{1,3})?")  # an RDMA device (mlx5_0) or one port of it (mlx5_0/1)


@dataclass(frozen=True)
class Problem:
    """One finding that leaves a node's network facts untrustworthy, as it was found: `subject` the RDMA device
    or port it is about (mlx5_0, mlx5_0/1), None for the device directory as a whole or the PCI tree; `text`
    what the user reads, word for word; `unread` a file or directory could not be read (nothing says the
    hardware failed: the item is not judged); `nic` the RDMA devices' own problem, which perftest meets. The PCI
    tree's (fabric/pcitree.py), and a device's PCI function missing from it, are not: perftest runs without it,
    and the placement checks and the `ib` probe judge it (a soft RDMA device has none)."""

    subject: str | None
    text: str
    unread: bool
    nic: bool

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Any, where: str) -> Problem:
        """The inverse of `as_dict`, strict: an entry of any other shape is the harness's error naming it
        (where: whose facts), never dropped, never guessed from its words."""
        if isinstance(d, str) and d:
            return cls.written_before(d)
        types = {"subject": (str, type(None)), "text": (str,), "unread": (bool,), "nic": (bool,)}
        if not isinstance(d, Mapping) or set(d) != set(types) or \
                not all(isinstance(d[k], t) for k, t in types.items()) or not d["text"] or d["subject"] == "":
            raise HarnessError(f"{where}: problem {repr(d)[:160]} is not {{subject: device, port or "
                               f"null, text, unread: bool, nic: bool}} as clustercheck/fabric/rdma.py writes it")
        return cls(d["subject"], d["text"], d["unread"], d["nic"])

    @classmethod
    def written_before(cls, text: str) -> Problem:
        """A problem as records before 2026-11-29 hold it, its text alone, classified by the words rdma.py and
        pcitree.py wrote then (a run's record stays readable by later versions); never for new facts."""
        head, _, body = text.partition(": ")
        unread = "cannot be read" in text or "cannot be listed" in text
        if _SUBJECT.fullmatch(head):
            return cls(head, text, unread, not body.startswith(("no PCI device behind it", "its PCI function ")))
        return cls(None, text, unread, head.rstrip("/").endswith("/class/infiniband"))


def problems_of(entries: Any, where: str) -> tuple[Problem, ...]:
    """The problems of serialised network facts (a list of `Problem.as_dict`), strictly (Problem.from_dict)."""
    if not isinstance(entries, (list, tuple)):
        raise HarnessError(f"{where}: problems {repr(entries)[:160]} is not a list")
    return tuple(Problem.from_dict(e, where) for e in entries)


@dataclass(frozen=True)
class Port:
    device: str               # mlx5_0
    port: int
    state: str                # ACTIVE, DOWN, INIT, ARMED ("?" when unreadable)
    phys_state: str           # LinkUp, Polling, Disabled ... ("?" when unreadable)
    rate_gbps: float | None
    rate_text: str            # as the kernel wrote it, e.g. "400 Gb/sec (4X NDR)"
    link_layer: str           # InfiniBand, Ethernet (RoCE) or "?"
    pci: str | None           # the PCI function of the device
    netdevs: tuple[str, ...] = ()
    hca_type: str | None = None   # /sys/class/infiniband/<dev>/hca_type, e.g. "MT4129" (ConnectX-7)
    board_id: str | None = None   # .../board_id, e.g. "MT_0000000838"

    @property
    def name(self) -> str:
        return f"{self.device}/{self.port}"

    @property
    def up(self) -> bool:
        return self.state == "ACTIVE" and self.phys_state.lower() == "linkup"


@dataclass(frozen=True)
class Gdr:
    peermem: str | None      # the peer-memory file that exists, or None
    open_module: bool | None  # NVIDIA's open kernel modules (dma-buf capable); None: no NVIDIA driver
    kernel: str

    @property
    def dmabuf(self) -> bool:
        return bool(self.open_module) and _kernel_at_least(self.kernel, _DMABUF_KERNEL)

    @property
    def available(self) -> bool:
        return self.peermem is not None or self.dmabuf

    def text(self) -> str:
        ways = ([f"peer memory ({self.peermem})"] if self.peermem else []) + \
            (["dma-buf (open kernel modules, Linux >= 5.12)"] if self.dmabuf else [])
        if ways:
            return "available: " + ", ".join(ways)
        why = "no nvidia_peermem (or nv_peer_mem) loaded"
        if self.open_module is False:
            why += "; the NVIDIA kernel module is not the open one, so no dma-buf"
        elif self.open_module is None:
            why += "; no NVIDIA driver version in /proc/driver/nvidia/version"
        else:
            why += f"; kernel {self.kernel} is older than 5.12, so no dma-buf"
        return f"not available: {why}"


@dataclass(frozen=True)
class NetFacts:
    ports: tuple[Port, ...] = ()
    gdr: Gdr | None = None
    nic_paths: dict[str, dict[str, Any]] = field(default_factory=dict)   # rdma device -> path to nearest GPU
    nvme_paths: dict[str, dict[str, Any]] = field(default_factory=dict)  # NVMe bdf -> path to nearest GPU
    gpus: tuple[str, ...] = ()                                           # GPU bus ids on the PCI bus
    findings: tuple[Problem, ...] = ()                                   # serialised as "problems"

    @property
    def problems(self) -> tuple[str, ...]:
        """What each finding says, word for word, as the ib probe, the line rate and the report show it."""
        return tuple(p.text for p in self.findings)

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON data (lists, not tuples): the facts travel from a rank and into the record unchanged."""
        d = asdict(self)
        d["problems"] = d.pop("findings")
        if self.gdr is not None:
            d["gdr"] = {**asdict(self.gdr), "available": self.gdr.available, "text": self.gdr.text()}
        return _lists(d)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], where: str = "network facts") -> NetFacts:
        """The inverse of `as_dict`; a problem entry not as `Problem.as_dict` writes it is a HarnessError (where:
        whose facts)."""
        gdr = d.get("gdr")
        keys = Port.__dataclass_fields__
        return cls(ports=tuple(Port(**{**{k: v for k, v in p.items() if k in keys}, "netdevs": tuple(p.get("netdevs") or ())})
                               for p in d.get("ports") or ()),
                   gdr=Gdr(gdr["peermem"], gdr["open_module"], gdr["kernel"]) if gdr else None,
                   nic_paths=dict(d.get("nic_paths") or {}), nvme_paths=dict(d.get("nvme_paths") or {}),
                   gpus=tuple(d.get("gpus") or ()), findings=problems_of(d.get("problems", []), where))

    def gpu_facing(self, port: Port) -> bool:
        """A port whose NIC shares a PCIe switch with a GPU (PIX or PXB): the rails NCCL sends GPU data on.
        A NIC behind the host bridge only (a storage or management NIC) is not."""
        level = (self.nic_paths.get(port.device) or {}).get("level")
        return level in ("PIX", "PXB")


def read(sys_root: Path = Path("/sys"), proc_root: Path = Path("/proc"), kernel: str | None = None) -> NetFacts:
    """This node's network facts (`kernel`: the release, default this machine's). Problems are collected,
    never raised."""
    tree = PciTree(sys_root)
    # the PCI tree's problems are no NIC's: the placement checks and the ib probe judge them, not perftest
    problems = [Problem(None, text, text in tree.unread, nic=False) for text in tree.problems]
    ports = _ports(sys_root / "class" / "infiniband", problems)
    nic_paths: dict[str, dict[str, Any]] = {}
    for dev in sorted({p.device for p in ports}):
        bdf = next((p.pci for p in ports if p.device == dev and p.pci), None)
        if bdf is None:
            continue
        if bdf not in tree.devices:
            problems.append(Problem(dev, f"{dev}: its PCI function {bdf} is not under /sys/bus/pci/devices",
                                    unread=False, nic=False))
            continue
        nearest = tree.nearest_gpu(bdf)
        nic_paths[dev] = {"pci": bdf, **(nearest.as_dict() if nearest else {"to": None, "level": None})}
    nvme_paths = {}
    for d in tree.nvme():
        nearest = tree.nearest_gpu(d.bdf)
        nvme_paths[d.bdf] = nearest.as_dict() if nearest else {"to": None, "level": None}
    return NetFacts(tuple(ports), _gdr(sys_root, proc_root, kernel or platform.release()), nic_paths, nvme_paths,
                    tuple(g.bdf for g in tree.gpus()), tuple(problems))


def _ports(root: Path, problems: list[Problem]) -> list[Port]:
    try:
        devices = sorted(os.listdir(root))
    except FileNotFoundError:
        return []  # no RDMA stack or no device: a fact, not a problem
    except OSError as exc:
        problems.append(Problem(None, f"{root}: cannot be listed ({exc.strerror or exc})", unread=True, nic=True))
        return []
    out = []
    for dev in devices:
        ports_dir = root / dev / "ports"
        try:
            numbers = sorted(os.listdir(ports_dir), key=lambda n: (not n.isdigit(), int(n) if n.isdigit() else 0, n))
        except OSError as exc:
            problems.append(Problem(dev, f"{dev}: {ports_dir} cannot be listed ({exc.strerror or exc})",
                                    unread=True, nic=True))
            continue
        if not numbers:  # the kernel gives every RDMA device a port: none read is no "no RDMA device here"
            problems.append(Problem(dev, f"{dev}: {ports_dir} lists no port", unread=False, nic=True))
        pci = _pci_of(root / dev)
        netdevs = _list(root / dev / "device" / "net")
        model = (_text(root / dev / "hca_type"), _text(root / dev / "board_id"))
        for n in numbers:
            if not n.isdigit():
                problems.append(Problem(dev, f"{dev}: port directory {n!r} is not a port number", False, nic=True))
                continue
            out.append(_port(dev, int(n), ports_dir / n, pci, netdevs, problems, model))
        if pci is None:
            problems.append(Problem(dev, f"{dev}: no PCI device behind it ({root / dev / 'device'} is not a link to "
                                         f"one)", unread=False, nic=False))
    return out


def _port(dev: str, n: int, d: Path, pci: str | None, netdevs: tuple[str, ...], problems: list[Problem],
          model: tuple[str | None, str | None] = (None, None)) -> Port:
    name = f"{dev}/{n}"
    state = _field(d / "state", _STATE, name, problems)
    phys = _field(d / "phys_state", _STATE, name, problems)
    rate_text = _text(d / "rate")
    rate = _RATE.match(rate_text or "")
    if rate_text is None:
        problems.append(Problem(name, f"{name}: {d / 'rate'} cannot be read", unread=True, nic=True))
    elif rate is None:  # what the file says is its own text: "cannot be read" in it is no file unread
        problems.append(Problem(name, f"{name}: rate {rate_text[:60]!r} is not as the kernel writes it "
                                      f"('400 Gb/sec (4X NDR)')", unread=False, nic=True))
    elif (why := implausible_rate(float(rate.group(1)))) is not None:
        problems.append(Problem(name, f"{name}: rate {rate_text[:60]!r} {why}", unread=False, nic=True))
        rate = None
    layer = _text(d / "link_layer")
    state_word = state.upper() if state else "?"
    phys_word = phys or "?"
    if state_word == "ACTIVE" and phys and phys.lower() != "linkup":
        problems.append(Problem(name, f"{name}: state ACTIVE but physical state {phys}: the sysfs tree contradicts "
                                      f"itself", unread=False, nic=True))
    return Port(dev, n, state_word, phys_word, float(rate.group(1)) if rate else None, rate_text or "",
                layer or "?", pci, netdevs, model[0] or None, model[1] or None)


def implausible_rate(gbps: float) -> str | None:
    """Why a port's rate in Gb/s is none a port can run (not finite, or outside RATE_MIN_GBPS..RATE_MAX_GBPS and
    not 0), or None when it is one."""
    if not math.isfinite(gbps):
        return "is not a finite number"
    if gbps != 0 and not RATE_MIN_GBPS <= gbps <= RATE_MAX_GBPS:
        return f"is outside {RATE_MIN_GBPS:g}..{RATE_MAX_GBPS:g} Gb/s, the rates a port can run"
    return None


# PCI device ids of NVIDIA (Mellanox) HCAs as ibstat's "CA type: MT4129" and ibv_devinfo's vendor_part_id print
# them (the Linux kernel's mlx4/mlx5 PCI id tables), for naming a port's model in a verdict
_MODELS = {"4099": "ConnectX-3", "4103": "ConnectX-3 Pro", "4113": "Connect-IB", "4115": "ConnectX-4",
           "4117": "ConnectX-4 Lx", "4119": "ConnectX-5", "4121": "ConnectX-5 Ex", "4123": "ConnectX-6",
           "4125": "ConnectX-6 Dx", "4127": "ConnectX-6 Lx", "4129": "ConnectX-7", "4131": "ConnectX-8",
           "41686": "BlueField-2", "41692": "BlueField-3"}


@dataclass(frozen=True)
class Peers:
    """The ACTIVE ports of one HCA model (CA type, board id, link layer) on one node, as one port sees them."""

    fastest_gbps: float   # the fastest rate any of them runs, this port's own included
    at_fastest: int       # how many of the others run at that rate
    others: int           # how many others there are
    model: str            # "ConnectX-7", else the CA type or board id as read

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def model_key(hca_type: str | None, board_id: str | None, link_layer: str | None) -> tuple[str, str, str] | None:
    """What makes two ports siblings: the same CA type and board id over the same link layer; None when neither
    the type nor the board could be read (such a port is compared with nothing)."""
    part = re.sub(r"^MT", "", (hca_type or "").strip(), flags=re.I)  # sysfs/ibstat "MT4129", ibv_devinfo "4129"
    board = (board_id or "").strip()
    if not part and not board:
        return None
    return part, board, (link_layer or "").strip().lower()


def peer_rates(ports: list[tuple[str, tuple[str, str, str] | None, bool, float | None]]) -> dict[str, Peers]:
    """For each ACTIVE port with a rate (subject, model_key, active, Gb/s) that has siblings of its model on the
    node: the fastest rate among them. A port trained down (an NDR port at 200 of 400 Gb/s) is slower than that."""
    groups: dict[tuple[str, str, str], list[tuple[str, float]]] = {}
    for subject, key, active, rate in ports:
        if key is not None and active and rate:
            groups.setdefault(key, []).append((subject, rate))
    out = {}
    for key, its in groups.items():
        if len(its) < 2:
            continue
        fastest = max(r for _, r in its)
        name = _MODELS.get(key[0]) or (f"MT{key[0]}" if key[0] else key[1])
        for subject, rate in its:
            out[subject] = Peers(fastest, sum(r == fastest for s, r in its if s != subject), len(its) - 1, name)
    return out


def peers(net_ports: tuple[Port, ...] | list[Port]) -> dict[str, dict[str, Any]]:
    """peer_rates of a node's sysfs ports, as plain data (a rank's answer carries it to the judge)."""
    rows = [(p.name, model_key(p.hca_type, p.board_id, p.link_layer), p.up, p.rate_gbps) for p in net_ports]
    return {k: v.as_dict() for k, v in peer_rates(rows).items()}


def _field(path: Path, pattern: re.Pattern[str], name: str, problems: list[Problem]) -> str | None:
    text = _text(path)
    if text is None:
        problems.append(Problem(name, f"{name}: {path} cannot be read", unread=True, nic=True))
        return None
    m = pattern.match(text)
    if m is None:
        problems.append(Problem(name, f"{name}: {path.name} {text[:60]!r} is not 'N: WORD' as the kernel writes it",
                                unread=False, nic=True))
        return None
    return m.group(2)


def _pci_of(dev_dir: Path) -> str | None:
    try:
        real = os.path.realpath(dev_dir / "device")
    except OSError:
        return None
    name = os.path.basename(real)
    return name.lower() if re.match(r"^[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$", name) else None


def _gdr(sys_root: Path, proc_root: Path, kernel: str) -> Gdr:
    peermem = next((f"/sys/{rel}" for rel in _PEERMEM if (sys_root / rel).exists()), None)
    version = _text(proc_root / "driver" / "nvidia" / "version")
    open_module = None if version is None else "Open Kernel Module" in version
    return Gdr(peermem, open_module, kernel)


def _kernel_at_least(release: str, want: tuple[int, int]) -> bool:
    m = re.match(r"^(\d+)\.(\d+)", release)
    return m is not None and (int(m.group(1)), int(m.group(2))) >= want


def _text(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None


def _list(path: Path) -> tuple[str, ...]:
    try:
        return tuple(sorted(os.listdir(path)))
    except OSError:
        return ()


def _lists(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _lists(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_lists(v) for v in value]
    return value
