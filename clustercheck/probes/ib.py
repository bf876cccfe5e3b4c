"""InfiniBand / RoCE ports: state and rate, from `ibstat`, `ibv_devinfo` or /sys/class/infiniband.

Every port must be ACTIVE (a port that is down carries no RDMA traffic; Azure's check_hw_ib,
Azure/azurehpc-health-checks customTests) with its physical link up (LinkUp: an ACTIVE port whose physical
state reads Polling or Disabled contradicts itself) and a rate above 0, at the platform's `ib_rate_gbps`
where given (e.g. 400 for NDR), and never below its siblings: every ACTIVE port of one HCA model (CA type,
board id, link layer) on a node must run at the fastest rate any of them runs (a port trained down to half
its rate fails naming both rates; docs/fabric.md), and at least `ib_ports` ports must be active. A rate
that cannot be read, a port listed twice, and fewer or more port sections than the device says it has
(ibstat's "Number of ports", ibv_devinfo's phys_port_cnt), fail. An ibstat port section without
the State, Physical state, Rate or Link layer line ibstat prints for every port was cut: not judged, named. With `fabric_ports` only the ports named there must be (and
must exist); the others are reported. Live, the ports come from clustercheck/fabric/rdma.py: a sysfs
tree that cannot be read or contradicts itself fails the node, and with `gdr: true` the node must be able
to do GPUDirect RDMA (nvidia_peermem loaded, or dma-buf).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from clustercheck.fabric.rdma import implausible_rate, model_key, peer_rates
from clustercheck.probes import tool
from clustercheck.probes.base import Probe, ProbeParseError, ProbeSkip, ProbeVerdict, not_judged
from clustercheck.toolout import count, evidence_lines



@dataclass(frozen=True)
class IbPort:
    device: str
    port: int
    state: str              # ACTIVE, DOWN, INIT, ARMED, POLLING ...
    phys_state: str | None
    rate_gbps: float | None
    link_layer: str | None
    rate_text: str | None = None   # the rate as printed, when it could not be read as a number of Gb/s
    ports_of_device: int | None = None   # what its device says it has: ibstat "Number of ports", phys_port_cnt
    hca_type: str | None = None   # ibstat "CA type: MT4129", ibv_devinfo vendor_part_id, sysfs hca_type
    board_id: str | None = None   # ibv_devinfo and sysfs board_id
    cut: str = ""           # ibstat: the lines its port section lacks (cut short), never judged on the rest

    @property
    def subject(self) -> str:
        return f"{self.device}/{self.port}"


# ibstat's own error line (it panics on a device it cannot stat, then may print the others): that device is
# left out of what follows, so the capture fails naming it
ERRORS = tool.OwnErrors("ibstat", ("ibpanic:",), r"IB device '([^']{1,64})'")


def parse(text: str) -> tuple[IbPort, ...]:
    tool.refuse_crashed(text, ERRORS)
    lines = evidence_lines(text)
    if any(l.startswith("CA '") for l in lines):
        return _ibstat(lines)
    if any(l.strip().startswith("hca_id:") for l in lines):
        return _devinfo(lines)
    raise ProbeParseError("expected `ibstat` (CA 'mlx5_0' ... Port 1:) or `ibv_devinfo` (hca_id: ... port: 1) output")


_RATE = re.compile(r"\d{1,6}(?:\.\d{1,6})?")


def _link_up(phys: str) -> bool:
    """LinkUp (ibstat, sysfs) or LINK_UP (ibv_devinfo -v)."""
    return re.sub(r"[^A-Z]", "", phys.upper()) == "LINKUP"


def _norm_state(value: str) -> str:
    return re.sub(r"\s*\(\d+\)$", "", value).replace("PORT_", "").upper()


_IBSTAT_PORT = ("State", "Physical state", "Rate", "Link layer")


def _ibstat(lines: list[str]) -> tuple[IbPort, ...]:
    out, dev, port, fields = [], "", None, {}  # type: ignore[var-annotated]

    def close() -> None:
        if port is not None:
            rate = fields.get("Rate")
            value = _RATE.fullmatch(rate) if rate else None
            # a rate no port runs (rdma.implausible_rate) is as unreadable as a malformed one: never the bar
            value = value if value and implausible_rate(float(value.group(0))) is None else None
            # ibstat prints every one of these for every port: one missing is a section cut short, not left empty
            cut = ", ".join(k for k in _IBSTAT_PORT if k not in fields)
            out.append(IbPort(dev, port, _norm_state(fields.get("State", "?")), fields.get("Physical state"),
                              float(value.group(0)) if value else None, fields.get("Link layer"),
                              rate if rate and not value else None, promised, ca.get("CA type"), ca.get("Board id"),
                              cut))

    promised: int | None = None
    ca: dict[str, str] = {}
    for l in lines:
        m = re.match(r"^CA '([^']+)'", l)
        pm = re.match(r"^\s+Port (\d{1,6}):\s*$", l)
        if m:
            close()
            dev, port, fields, promised, ca = m.group(1), None, {}, None, {}
        elif pm:
            close()
            port, fields = int(pm.group(1)), {}
        elif port is None and l.strip().startswith("Number of ports:"):
            promised = count(l.partition(":")[2])
        elif port is None and ":" in l:
            k, _, v = l.strip().partition(":")
            ca[k.strip()] = v.strip()
        elif port is not None and ":" in l:
            k, _, v = l.strip().partition(":")
            fields[k.strip()] = v.strip()
    close()
    if not out:
        raise ProbeParseError("ibstat output without any 'Port N:' section")
    return tuple(out)


def _devinfo(lines: list[str]) -> tuple[IbPort, ...]:
    out, dev, port, fields = [], "", None, {}  # type: ignore[var-annotated]

    def close() -> None:
        if port is not None:
            rate = None
            width, speed = fields.get("active_width"), fields.get("active_speed")
            w = re.match(r"(\d{1,3})X", width or "")
            s = re.match(r"(\d{1,6}(?:\.\d{1,6})?) Gbps", speed or "")
            if w and s and implausible_rate(int(w.group(1)) * float(s.group(1))) is None:
                rate = int(w.group(1)) * float(s.group(1))
            unread = f"{width} x {speed}" if (width or speed) and rate is None else None
            phys = fields.get("phys_state")
            out.append(IbPort(dev, port, _norm_state(fields.get("state", "?")),
                              _norm_state(phys) if phys else None, rate, fields.get("link_layer"), unread, promised,
                              hca.get("vendor_part_id"), hca.get("board_id")))

    promised: int | None = None
    hca: dict[str, str] = {}
    for l in lines:
        s = l.strip()
        if s.startswith("hca_id:"):
            close()
            dev, port, fields, promised, hca = s.partition(":")[2].strip(), None, {}, None, {}
        elif port is None and s.startswith("phys_port_cnt:"):
            promised = count(s.partition(":")[2])
        elif re.match(r"^port:\s*\d{1,6}$", s):
            close()
            port, fields = int(s.partition(":")[2]), {}
        elif port is None and ":" in s:
            k, _, v = s.partition(":")
            hca[k.strip()] = v.strip()
        elif port is not None and ":" in s:
            k, _, v = s.partition(":")
            fields[k.strip()] = v.strip()
    close()
    if not out:
        raise ProbeParseError("ibv_devinfo output without any 'port: N' section")
    return tuple(out)


@dataclass(frozen=True)
class SysfsReading:
    """The ports as this node's sysfs shows them, with what could not be read and GPUDirect RDMA."""

    ports: tuple[IbPort, ...]
    problems: tuple[str, ...]
    gdr: str | None            # fabric/rdma.Gdr.text(), None when unknown
    gdr_available: bool | None


def judge(reading: tuple[IbPort, ...] | SysfsReading, expect: Mapping[str, Any]) -> list[ProbeVerdict]:
    ports = reading.ports if isinstance(reading, SysfsReading) else reading
    if isinstance(reading, SysfsReading) and not ports and not reading.problems:
        return _no_device(expect)
    out = [ProbeVerdict("node", "sysfs", False, f"{problem}: the node's RDMA facts cannot be trusted", problem)
           for problem in (reading.problems if isinstance(reading, SysfsReading) else ())]
    named: Sequence[str] = expect.get("fabric_ports") or ()
    if named:
        missing = [n for n in named if not any(n in (p.device, p.subject) for p in ports)]
        out += [ProbeVerdict(n, "port", False, "named in fabric_ports and not on this node", "absent", "ACTIVE")
                for n in missing]
    if expect.get("gdr") is True:
        if not isinstance(reading, SysfsReading):
            out.append(not_judged("node", "GPUDirect RDMA", "GDR is not in an ibstat capture"))
        elif reading.gdr is None:
            out.append(not_judged("node", "GPUDirect RDMA", "GDR support could not be read on this node"))
        else:
            out.append(ProbeVerdict("node", "GPUDirect RDMA", bool(reading.gdr_available), reading.gdr,
                                    "available" if reading.gdr_available else "not available", "available"))
    return out + _judge_ports(ports, expect, named)


def _no_device(expect: Mapping[str, Any]) -> list[ProbeVerdict]:
    """A node with no RDMA device: skipped where nothing expects one; where the profile or --expect does
    (ports, a rate, named ports, GPUDirect RDMA), a failure naming what was expected, never a skip."""
    absent = "no InfiniBand/RoCE device (/sys/class/infiniband is empty or absent)"
    wanted = [f"{expect['ib_ports']} active port(s) (ib_ports)" if expect.get("ib_ports") else "",
              f"ports at {float(expect['ib_rate_gbps']):g} Gb/s (ib_rate_gbps)" if expect.get("ib_rate_gbps") else "",
              f"{', '.join(expect['fabric_ports'])} (fabric_ports)" if expect.get("fabric_ports") else "",
              "GPUDirect RDMA (gdr: true)" if expect.get("gdr") is True else ""]
    wanted = [w for w in wanted if w]
    if not wanted:
        raise ProbeSkip(absent)
    return [ProbeVerdict("node", "RDMA devices", False, f"{absent}; expected: {'; '.join(wanted)}", 0,
                         expect.get("ib_ports") or "an RDMA device")]


def _judge_ports(ports: tuple[IbPort, ...], expect: Mapping[str, Any], named: Sequence[str]) -> list[ProbeVerdict]:
    want_rate = expect.get("ib_rate_gbps")
    out = []
    listed: dict[str, int] = {}
    for p in ports:
        listed[p.subject] = listed.get(p.subject, 0) + 1
    twice = [subject for subject, k in listed.items() if k > 1]
    if twice:
        out.append(ProbeVerdict("node", "ports listed", False, f"port {', '.join(twice[:8])} listed twice: the "
                                f"capture contradicts itself", len(twice), 0))
    per_device: dict[str, list[IbPort]] = {}
    for p in ports:
        per_device.setdefault(p.device, []).append(p)
    for device, its in per_device.items():
        promised = its[0].ports_of_device
        if promised is not None and len(its) != promised:
            out.append(ProbeVerdict(device, "ports listed", False, f"{len(its)} port section(s), the device says it "
                                    f"has {promised}: a port is missing or repeated, and not judged", len(its),
                                    promised))
    peers = peer_rates([(p.subject, model_key(p.hca_type, p.board_id, p.link_layer), _active(p), p.rate_gbps)
                        for p in ports if not named or p.device in named or p.subject in named])
    for p in ports:
        layer = f", {p.link_layer}" if p.link_layer else ""
        rate = f" at {p.rate_gbps:g} Gb/s" if p.rate_gbps else ""
        peer = peers.get(p.subject)
        if named and p.device not in named and p.subject not in named:
            out.append(ProbeVerdict(p.subject, "port state", True, f"{p.state}{rate}{layer}; not one of fabric_ports, "
                                    f"not judged for the fabric", p.state))
            continue
        if p.cut:
            out.append(not_judged(p.subject, "port state", f"port section cut: it ends without its {p.cut} line(s), "
                                  f"which ibstat prints for every port; capture the whole ibstat output", p.state,
                                  "ACTIVE"))
        elif p.state == "ACTIVE" and p.phys_state is not None and not _link_up(p.phys_state):
            out.append(ProbeVerdict(p.subject, "port state", False, f"ACTIVE but physical state {p.phys_state}"
                                    f"{layer}: the physical link is not up", p.phys_state, "LinkUp"))
        elif p.state == "ACTIVE" and p.rate_text is not None:
            out.append(ProbeVerdict(p.subject, "port rate", False, f"ACTIVE, rate {p.rate_text[:40]!r} unreadable"
                                    f"{layer}", p.rate_text, "a rate in Gb/s"))
        elif p.state == "ACTIVE" and p.rate_gbps == 0:
            out.append(ProbeVerdict(p.subject, "port rate", False, f"ACTIVE at rate 0{layer}: the port moves nothing",
                                    0, want_rate or "> 0"))
        elif p.state != "ACTIVE":
            phys = f" (physical {p.phys_state})" if p.phys_state else ""
            out.append(ProbeVerdict(p.subject, "port state", False, f"{p.state}{phys}{layer}: no RDMA traffic "
                                    "through this port", p.state, "ACTIVE"))
        elif want_rate and p.rate_gbps is None:
            out.append(not_judged(p.subject, "port rate", f"ACTIVE{layer}, no Rate in the capture (ibv_devinfo "
                                  f"needs -v); the platform expects {want_rate:g} Gb/s", None, want_rate))
        elif want_rate and p.rate_gbps is not None and p.rate_gbps < float(want_rate):
            out.append(ProbeVerdict(p.subject, "port rate", False, f"ACTIVE{rate}, platform expects {want_rate:g} Gb/s",
                                    p.rate_gbps, want_rate))
        elif peer is not None and p.rate_gbps is not None and p.rate_gbps < peer.fastest_gbps:
            out.append(ProbeVerdict(p.subject, "port rate", False, f"{p.subject}: {p.rate_gbps:g} Gb/s, its "
                                    f"{peer.at_fastest} sibling {peer.model} port{'s' if peer.at_fastest > 1 else ''} "
                                    f"run {peer.fastest_gbps:g} Gb/s: trained down{layer}", p.rate_gbps,
                                    f"{peer.fastest_gbps:g} (its siblings' rate)"))
        else:
            out.append(ProbeVerdict(p.subject, "port state", True, f"ACTIVE{rate}{layer}", p.state, "ACTIVE"))
    want_ports = expect.get("ib_ports")
    if want_ports is not None:
        # a port whose rate was not read is not counted as a port at the rate the platform expects
        active = sum(_active(p) and p.rate_gbps != 0
                     and not (want_rate and p.rate_gbps is None) for p in ports)
        out.append(ProbeVerdict("node", "active ports", active >= want_ports,
                                f"{active} of {len(ports)} ports active, platform expects {want_ports}", active, want_ports))
    return out


def _active(p: IbPort) -> bool:
    return not p.cut and p.state == "ACTIVE" and (p.phys_state is None or _link_up(p.phys_state))


def collect(sys_root: Path = Path("/sys")) -> SysfsReading:
    from clustercheck.fabric import rdma

    net = rdma.read(sys_root)
    # no device is a skip only where no RDMA expectation applies: judge decides, it has the expectations
    ports = tuple(IbPort(p.device, p.port, p.state, None if p.phys_state == "?" else p.phys_state, p.rate_gbps,
                         None if p.link_layer == "?" else p.link_layer, hca_type=p.hca_type, board_id=p.board_id)
                  for p in net.ports)
    return SysfsReading(ports, net.problems, net.gdr.text() if net.gdr else None,
                        net.gdr.available if net.gdr else None)


PROBE = Probe(
    name="ib",
    description="InfiniBand/RoCE ports: state and rate",
    input_help="`ibstat` or `ibv_devinfo` output",
    scope="node",
    parse=parse,
    collect=collect,
    judge=judge,
    expect_keys=("ib_rate_gbps", "ib_ports", "fabric_ports", "gdr"),
)
