"""What NCCL's `NCCL_DEBUG=INFO` log says about its network, per host: the network it chose, the NICs it
found, whether GPUDirect RDMA is on, and the channel connections that went over the network.

Read from NCCL's own lines (NVIDIA/nccl src/transport/net_ib, net_socket, init.cc; the aws-ofi-nccl and
HPC-X SHARP plugins print the same shapes):

- `Using network IB` / `IBext` / `IBext_v8` / `Socket` / `AWS Libfabric`, and RCCL's / old NCCL's
  `NET/OFI Selected Provider is efa`: the network NCCL chose for this communicator;
- `NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_4:1/RoCE/SHARP [RO]; OOB ib0:...` (NCCL 2.3 printed one
  `NET/IB: [0] mlx5_1:1/IB` line per NIC): the NICs NCCL found and will spread channels over;
  `NET/IB : No device found.`: none;
- `NET/Socket : Using [0]eth0:...`: the socket interfaces. NCCL prints this while probing its networks
  even when it then uses IB, so on its own it is no fall-back;
- channel lines `... [send] via NET/IB/3/GDRDMA`, `via NET/AWS Libfabric/1(2)/GDRDMA/Shared` (device 1
  reached through the proxy GPU 2: PXN), `via NET/Socket/0`: what actually crossed the network;
- `GPU Direct RDMA Disabled for HCA 0 'mlx5_0'` or `... for GPU 2[2] / HCA 0 (distance 3 >= 2)` (the
  NCCL_NET_GDR_LEVEL distance rule), `DMA-BUF is available on GPU device 0`,
  `Connected all rings, use ring PXN 0 GDR 1` (NCCL >= 2.19);
- `NET/Plugin: Loaded collnet plugin SHARP`, NICs tagged `/SHARP`, `N coll channels, M collnet channels`;
- `Failed to open libibverbs.so`: NCCL cannot use IB at all in this process.

Pure standard library; linear in the text.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Iterable, Mapping

from clustercheck.fabric import nccl_debug

# each name runs from its first to its last non-blank: `.+?\s*$` retried `\s*$` over a run of blanks at every
# step, quadratic (23 s on an 80k-blank line)
_NETWORK = re.compile(r"^Using (?:internal )?[Nn]etwork (?P<name>\S(?:.*\S)?)\s*$")
_OFI = re.compile(r"^NET/OFI Selected Provider is (?P<name>\S+)")
_IB_LIST = re.compile(r"^NET/IB ?: Using (?P<list>(?:\[\d+\]\S+\s*)+)")
_IB_ONE = re.compile(r"^NET/IB: \[(?P<i>\d+)\] (?P<nic>\S+)")          # NCCL 2.3
_NIC = re.compile(r"\[(?P<i>\d+)\](?P<nic>[^\s\[]+)")
_SOCKET = re.compile(r"^NET/Socket ?: Using (?P<list>\S(?:.*\S)?)\s*$")
_GDR_OFF = re.compile(r"GPU Direct RDMA Disabled for (?P<what>\S(?:.*\S)?)\s*$")
_GDR_ON = re.compile(r"GPU Direct RDMA (?:\(nvidia-peermem\) )?[Ee]nabled for (?P<what>\S(?:.*\S)?)\s*$")
_RING_FLAGS = re.compile(r"^Connected all rings(?:, use ring PXN (?P<pxn>\d) GDR (?P<gdr>\d))?")
_COLLNET = re.compile(r"(?:^|\s)(?P<coll>\d+) coll channels, (?P<collnet>\d+) collnet channels")
_VIA_NET = re.compile(r"^NET/(?P<net>[^/]+)/(?P<dev>\d+)(?:\((?P<proxy>\d+)\))?(?P<rest>(?:/\S*)?)")


@dataclass(frozen=True)
class HostNet:
    """What NCCL said about the network on one host (host "" where its lines carry no host name)."""

    host: str
    networks: tuple[str, ...] = ()           # "IB", "IBext_v8", "Socket", "AWS Libfabric", "OFI provider efa"
    # (network, pid) per `Using network` line: one rank's choice is not hidden by its siblings' on the host
    network_pids: tuple[tuple[str, str], ...] = ()
    nics_found: tuple[str, ...] = ()         # "mlx5_0:1/IB/SHARP", as NCCL printed them, in its order
    no_ib_device: bool = False               # "NET/IB : No device found."
    socket_ifs: tuple[str, ...] = ()         # "ens3:172.31.12.210<0>"
    nets_used: tuple[str, ...] = ()          # networks on channel lines: IB, IBext, Socket, AWS Libfabric
    nics_used: tuple[str, ...] = ()          # "IB/3", "AWS Libfabric/1": network and device index
    net_channels: int = 0                    # channel lines over the network
    recv_gdr: tuple[int, int] = (0, 0)       # receive-side network channels with / without GDRDMA
    send_gdr: tuple[int, int] = (0, 0)       # send-side (GDR there also needs NCCL_NET_GDR_READ)
    proxied: int = 0                         # network channels through a proxy GPU (PXN)
    ring_flags: tuple[tuple[int, int], ...] = ()  # (PXN, GDR) from "Connected all rings, use ring PXN p GDR g"
    gdr_disabled: tuple[str, ...] = ()       # NCCL's reasons, e.g. "HCA 0 'mlx5_0'", "GPU 2[2] / HCA 0 (distance 3 >= 2)"
    gdr_enabled: tuple[str, ...] = ()
    dmabuf: bool = False
    collnet_plugin: str = ""                 # "SHARP" when HPC-X's collnet plugin loaded
    collnet_channels: int = 0
    nics_per_rank: dict[str, list[str]] = field(default_factory=dict)  # rank -> nics_used of its channels
    libibverbs_missing: bool = False
    garbled: tuple[int, ...] = ()            # lines with two channel records glued: network and GDR not judged

    @property
    def sharp(self) -> bool:
        return bool(self.collnet_plugin) or any("/SHARP" in n for n in self.nics_found)

    @property
    def gdr(self) -> bool | None:
        """True when the network channels use GPUDirect RDMA, False when they do not, None when the log
        cannot say (no receive-side network channel and no ring flags line)."""
        if any(g == 0 for _, g in self.ring_flags):
            return False
        with_, without = self.recv_gdr
        if without:
            return False
        if with_:
            return True
        # NCCL starts comm->useGdr at 1 and lowers it only for a network connection: GDR 1 without a network
        # channel proves nothing (GDR 0 does: some network connection went without it)
        if self.net_channels and any(g == 1 for _, g in self.ring_flags):
            return True
        if self.send_gdr[0] and not self.send_gdr[1]:
            return True  # GDR read on send implies GDR write works too
        return None

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "sharp": self.sharp, "gdr": self.gdr}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> HostNet:
        kept = {k: v for k, v in d.items() if k in cls.__dataclass_fields__}
        tuples = {k: tuple(v) if k not in ("recv_gdr", "send_gdr") else (int(v[0]), int(v[1]))
                  for k, v in kept.items() if isinstance(v, list)}
        tuples["ring_flags"] = tuple((int(p), int(g)) for p, g in kept.get("ring_flags") or ())
        tuples["network_pids"] = tuple((str(n), str(p)) for n, p in kept.get("network_pids") or ())
        return cls(**{**kept, **tuples, "nics_per_rank": dict(kept.get("nics_per_rank") or {})})

    def merge(self, other: HostNet) -> HostNet:
        """Two accounts of the same host (two ranks' files) as one."""
        def union(a: tuple[str, ...], b: tuple[str, ...]) -> tuple[str, ...]:
            return tuple(dict.fromkeys((*a, *b)))

        ranks = {r: sorted(set(self.nics_per_rank.get(r, [])) | set(other.nics_per_rank.get(r, [])))
                 for r in {*self.nics_per_rank, *other.nics_per_rank}}
        return replace(
            self, networks=union(self.networks, other.networks),
            network_pids=tuple(dict.fromkeys((*self.network_pids, *other.network_pids))), nics_found=union(self.nics_found, other.nics_found),
            no_ib_device=self.no_ib_device or other.no_ib_device, socket_ifs=union(self.socket_ifs, other.socket_ifs),
            nets_used=union(self.nets_used, other.nets_used), nics_used=union(self.nics_used, other.nics_used),
            net_channels=self.net_channels + other.net_channels,
            recv_gdr=(self.recv_gdr[0] + other.recv_gdr[0], self.recv_gdr[1] + other.recv_gdr[1]),
            send_gdr=(self.send_gdr[0] + other.send_gdr[0], self.send_gdr[1] + other.send_gdr[1]),
            proxied=self.proxied + other.proxied, ring_flags=tuple(dict.fromkeys((*self.ring_flags, *other.ring_flags))),
            gdr_disabled=union(self.gdr_disabled, other.gdr_disabled), gdr_enabled=union(self.gdr_enabled, other.gdr_enabled),
            dmabuf=self.dmabuf or other.dmabuf, collnet_plugin=self.collnet_plugin or other.collnet_plugin,
            collnet_channels=max(self.collnet_channels, other.collnet_channels), nics_per_rank=ranks,
            libibverbs_missing=self.libibverbs_missing or other.libibverbs_missing,
            garbled=tuple(dict.fromkeys((*self.garbled, *other.garbled))))


def scan(texts: str | Iterable[str]) -> dict[str, HostNet]:
    """Per host, what NCCL's lines say about its network."""
    if isinstance(texts, str):
        texts = [texts]
    out: dict[str, HostNet] = {}
    for text in texts:
        for line in text.splitlines():
            if "libibverbs" in line and "Failed to open" in line:
                where = _host_of(line)
                out[where] = _get(out, where).merge(HostNet(where, libibverbs_missing=True))
            if "NCCL INFO " not in line:
                continue
            for named, pid, msg in nccl_debug.messages(line):
                found = _one(named or "", msg)
                if found is not None and found.networks and pid:
                    found = replace(found, network_pids=tuple((n, pid) for n in found.networks))
                if found is not None:
                    out[found.host] = _get(out, found.host).merge(found)
    return out


def _get(out: dict[str, HostNet], host: str) -> HostNet:
    return out.get(host) or HostNet(host)


def _host_of(line: str) -> str:
    m = nccl_debug.PREFIX.search(line) or re.search(r"(?P<host>[^\s:\[\]]+):\d+:\d+ \[\d+\]", line)
    return (m.group("host") or "") if m else ""


def _one(host: str, msg: str) -> HostNet | None:
    m = _NETWORK.match(msg)
    if m:
        return HostNet(host, networks=(m.group("name"),))
    m = _OFI.match(msg)
    if m:
        return HostNet(host, networks=(f"OFI provider {m.group('name')}",))
    m = _IB_LIST.match(msg)
    if m:
        return HostNet(host, nics_found=tuple(n.group("nic") for n in _NIC.finditer(m.group("list"))))
    m = _IB_ONE.match(msg)
    if m:
        return HostNet(host, nics_found=(m.group("nic"),))
    if msg.startswith(("NET/IB : No device found", "NET/IB : No IP interface found")):
        return HostNet(host, no_ib_device=True)
    m = _SOCKET.match(msg)
    if m:
        return HostNet(host, socket_ifs=tuple(re.sub(r"^\[\d+\]", "", s) for s in m.group("list").split()
                                              if s.startswith("[")))
    m = _GDR_OFF.search(msg)
    if m and "NET/" in msg:
        return HostNet(host, gdr_disabled=(m.group("what"),))
    m = _GDR_ON.search(msg)
    if m and "NET/" in msg:
        return HostNet(host, gdr_enabled=(m.group("what"),))
    if msg.startswith("DMA-BUF is available"):
        return HostNet(host, dmabuf=True)
    m = _RING_FLAGS.match(msg)
    if m and m.group("gdr") is not None:
        return HostNet(host, ring_flags=((int(m.group("pxn")), int(m.group("gdr"))),))
    if "Loaded collnet plugin" in msg:
        name = msg.split("Loaded collnet plugin", 1)[1].strip().split(" ")[0]
        return HostNet(host, collnet_plugin=name or "?")
    m = _COLLNET.search(msg)
    if m:
        return HostNet(host, collnet_channels=int(m.group("collnet")))
    if "Failed to open libibverbs" in msg:
        return HostNet(host, libibverbs_missing=True)
    return None


def channels(parsed: nccl_debug.NcclDebug, hosts: dict[str, HostNet]) -> dict[str, HostNet]:
    """Add the network channel lines NCCL printed (nccl_debug's transports) to the per-host facts."""
    out = dict(hosts)
    for where, number in parsed.garbled:
        out[where or ""] = _get(out, where or "").merge(HostNet(where or "", garbled=(number,)))
    for t in parsed.transports:
        m = _VIA_NET.match(t.via)
        if m is None:
            continue
        host = t.host or ""
        net = m.group("net").strip()
        nic = f"{net}/{m.group('dev')}"
        gdr = "/GDRDMA" in m.group("rest")
        recv, send = (1, 0) if t.direction != "send" else (0, 1)
        rank = str(t.dst_rank if t.direction != "send" else t.src_rank)
        found = HostNet(host, nets_used=(net,), nics_used=(nic,), net_channels=1,
                        recv_gdr=(recv if gdr else 0, recv if not gdr else 0),
                        send_gdr=(send if gdr else 0, send if not gdr else 0),
                        proxied=1 if m.group("proxy") is not None else 0, nics_per_rank={rank: [nic]})
        out[host] = _get(out, host).merge(found)
    return out


def read(texts: str | Iterable[str]) -> tuple[nccl_debug.NcclDebug, dict[str, HostNet]]:
    """The log parsed (nccl_debug) and its network facts per host."""
    texts = [texts] if isinstance(texts, str) else list(texts)
    parsed = nccl_debug.parse(texts)
    return parsed, channels(parsed, scan(texts))
