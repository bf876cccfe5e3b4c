"""What NCCL said about its network, in one line (networks, channels, NICs, GDR, SHARP, PXN): the facts
`clustercheck probe nccl-log` shows beside its verdicts; it judges nothing (fabric/transport.py judges)."""

from __future__ import annotations

from typing import Mapping

from clustercheck.fabric.nccl_net import HostNet


def summary(hosts: Mapping[str, HostNet], env: Mapping[str, str]) -> str:
    """What NCCL said, in one line: networks, channels, NICs, GDR, SHARP, PXN."""
    if not hosts:
        return "no NCCL network lines"
    nets = sorted({n for h in hosts.values() for n in (*h.nets_used, *h.networks)})
    channels = sum(h.net_channels for h in hosts.values())
    nics = {h.host or "-": len(h.nics_used) for h in hosts.values() if h.nics_used}
    found = {h.host or "-": len(h.nics_found) for h in hosts.values() if h.nics_found}
    gdr = {h.gdr for h in hosts.values() if h.net_channels or h.ring_flags}
    parts = [f"network {', '.join(nets) or 'not named'}", f"{channels} network channel line(s) on "
             f"{sum(1 for h in hosts.values() if h.net_channels)} host(s)"]
    if nics:
        parts.append("NICs used per host " + ", ".join(f"{h} {n}" for h, n in sorted(nics.items())[:4])
                     + (" ..." if len(nics) > 4 else ""))
    if found:
        parts.append(f"NICs found {'/'.join(str(n) for n in sorted(set(found.values())))}")
    parts.append("GPUDirect RDMA " + ("on" if gdr == {True} else "off" if False in gdr else "not shown"))
    if any(h.sharp for h in hosts.values()):
        plugin = next((h.collnet_plugin for h in hosts.values() if h.collnet_plugin), "")
        parts.append(f"SHARP/CollNet: {'collnet plugin ' + plugin if plugin else 'NICs /SHARP'}")
    if any(h.proxied for h in hosts.values()) or any(p for h in hosts.values() for p, _ in h.ring_flags):
        parts.append("PXN used")
    if any(h.dmabuf for h in hosts.values()):
        parts.append("DMA-BUF available")
    return "; ".join(parts)
