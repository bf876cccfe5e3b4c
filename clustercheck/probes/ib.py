"""InfiniBand / RoCE ports: state and rate, from `ibstat`, `ibv_devinfo` or /sys/class/infiniband.

Every port must be ACTIVE with its physical link up (a port that is down carries no RDMA traffic; Azure's
check_hw_ib, Azure/azurehpc-health-checks customTests), at the platform's `ib_rate_gbps` where given (e.g.
400 for NDR), and at least `ib_ports` ports must be active. With `fabric_ports` only the ports named there
must be (and must exist); the others are reported. Live, the ports come from clustercheck/fabric/rdma.py:
a sysfs tree that cannot be read or contradicts itself fails the node, and with `gdr: true` the node
must be able to do GPUDirect RDMA (nvidia_peermem loaded, or dma-buf).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from clustercheck.probes import tool
from clustercheck.probes.base import Probe, ProbeParseError, ProbeSkip, ProbeVerdict
from clustercheck.toolout import evidence_lines



@dataclass(frozen=True)
class IbPort:
    device: str
    port: int
    state: str              # ACTIVE, DOWN, INIT, ARMED, POLLING ...
    phys_state: str | None
    rate_gbps: float | None
    link_layer: str | None

    @property
    def subject(self) -> str:
        return f"{self.device}/{self.port}"


def parse(text: str) -> tuple[IbPort, ...]:
    tool.refuse_crashed(text)
    lines = evidence_lines(text)
    if any(l.startswith("CA '") for l in lines):
        return _ibstat(lines)
    if any(l.strip().startswith("hca_id:") for l in lines):
        return _devinfo(lines)
    raise ProbeParseError("expected `ibstat` (CA 'mlx5_0' ... Port 1:) or `ibv_devinfo` (hca_id: ... port: 1) output")


def _norm_state(value: str) -> str:
    return re.sub(r"\s*\(\d+\)$", "", value).replace("PORT_", "").upper()


def _ibstat(lines: list[str]) -> tuple[IbPort, ...]:
    out, dev, port, fields = [], "", None, {}  # type: ignore[var-annotated]

    def close() -> None:
        if port is not None:
            rate = fields.get("Rate")
            out.append(IbPort(dev, port, _norm_state(fields.get("State", "?")), fields.get("Physical state"),
                              float(rate) if rate and re.match(r"^[\d.]+$", rate) else None, fields.get("Link layer")))

    for l in lines:
        m = re.match(r"^CA '([^']+)'", l)
        pm = re.match(r"^\s+Port (\d+):\s*$", l)
        if m:
            close()
            dev, port, fields = m.group(1), None, {}
        elif pm:
            close()
            port, fields = int(pm.group(1)), {}
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
            w = re.match(r"(\d+)X", fields.get("active_width", ""))
            s = re.match(r"([\d.]+) Gbps", fields.get("active_speed", ""))
            if w and s:
                rate = int(w.group(1)) * float(s.group(1))
            phys = fields.get("phys_state")
            out.append(IbPort(dev, port, _norm_state(fields.get("state", "?")),
                              _norm_state(phys) if phys else None, rate, fields.get("link_layer")))

    for l in lines:
        s = l.strip()
        if s.startswith("hca_id:"):
            close()
            dev, port, fields = s.partition(":")[2].strip(), None, {}
        elif re.match(r"^port:\s*\d+$", s):
            close()
            port, fields = int(s.partition(":")[2]), {}
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
    out = [ProbeVerdict("node", "sysfs", False, f"{problem}: the node's RDMA facts cannot be trusted", problem)
           for problem in (reading.problems if isinstance(reading, SysfsReading) else ())]
    named: Sequence[str] = expect.get("fabric_ports") or ()
    if named:
        missing = [n for n in named if not any(n in (p.device, p.subject) for p in ports)]
        out += [ProbeVerdict(n, "port", False, "named in fabric_ports and not on this node", "absent", "ACTIVE")
                for n in missing]
    if isinstance(reading, SysfsReading) and expect.get("gdr") is True and reading.gdr is not None:
        out.append(ProbeVerdict("node", "GPUDirect RDMA", bool(reading.gdr_available), reading.gdr,
                                "available" if reading.gdr_available else "not available", "available"))
    return out + _judge_ports(ports, expect, named)


def _judge_ports(ports: tuple[IbPort, ...], expect: Mapping[str, Any], named: Sequence[str]) -> list[ProbeVerdict]:
    want_rate = expect.get("ib_rate_gbps")
    out = []
    for p in ports:
        layer = f", {p.link_layer}" if p.link_layer else ""
        rate = f" at {p.rate_gbps:g} Gb/s" if p.rate_gbps else ""
        if named and p.device not in named and p.subject not in named:
            out.append(ProbeVerdict(p.subject, "port state", True, f"{p.state}{rate}{layer}; not one of fabric_ports, "
                                    f"not judged for the fabric", p.state))
            continue
        phys = (p.phys_state or "").replace(" ", "").replace("_", "").lower()
        if p.state == "ACTIVE" and p.phys_state and phys not in ("linkup", "5"):
            out.append(ProbeVerdict(p.subject, "port state", False, f"ACTIVE but physical state {p.phys_state}{layer}: "
                                    "the link is not up", p.phys_state, "LinkUp"))
        elif p.state != "ACTIVE":
            phys = f" (physical {p.phys_state})" if p.phys_state else ""
            out.append(ProbeVerdict(p.subject, "port state", False, f"{p.state}{phys}{layer}: no RDMA traffic "
                                    "through this port", p.state, "ACTIVE"))
        elif want_rate and p.rate_gbps is not None and p.rate_gbps < float(want_rate):
            out.append(ProbeVerdict(p.subject, "port rate", False, f"ACTIVE{rate}, platform expects {want_rate:g} Gb/s",
                                    p.rate_gbps, want_rate))
        else:
            out.append(ProbeVerdict(p.subject, "port state", True, f"ACTIVE{rate}{layer}", p.state, "ACTIVE"))
    want_ports = expect.get("ib_ports")
    if want_ports is not None:
        active = sum(p.state == "ACTIVE" for p in ports)
        out.append(ProbeVerdict("node", "active ports", active >= want_ports,
                                f"{active} of {len(ports)} ports active, platform expects {want_ports}", active, want_ports))
    return out


def collect(sys_root: Path = Path("/sys")) -> SysfsReading:
    from clustercheck.fabric import rdma

    net = rdma.read(sys_root)
    if not net.ports and not net.problems:
        raise ProbeSkip("no InfiniBand/RoCE device (/sys/class/infiniband is empty or absent)")
    ports = tuple(IbPort(p.device, p.port, p.state, None if p.phys_state == "?" else p.phys_state, p.rate_gbps,
                         None if p.link_layer == "?" else p.link_layer) for p in net.ports)
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
