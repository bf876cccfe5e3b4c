"""A node's aggregate network line rate: the sum of the rates of its active GPU-facing RDMA ports (8 x
400 Gb/s NDR = 3200 Gb/s on an HGX H100 with eight ConnectX-7), or of the ports a profile or `--expect
fabric_ports` names (to leave out a storage NIC, or to count a NIC the PCI tree does not place near a
GPU). A run's line rate is the most any of its nodes has: a node with a port down must fail against its
healthy peers, not lower the bar for them (the same rule as a node with a GPU missing). A port down on every
node (a rail's leaf switch failed) lowers no bar either: a chosen port that is down counts at the rate of its
fastest ACTIVE sibling of the same model on its node, and where it has none the node's rate is unknown,
naming the port."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from clustercheck.fabric.rdma import NetFacts, Port, model_key


@dataclass(frozen=True)
class LineRate:
    gbps: float | None          # None: unknown
    ports: tuple[str, ...]      # the ports counted, e.g. ("mlx5_0/1", ...)
    why: str                    # how it was found, or why it is unknown

    def text(self) -> str:
        return f"{self.gbps:g} Gb/s ({self.why})" if self.gbps is not None else f"unknown: {self.why}"


def _named(port: Port, names: Sequence[str]) -> bool:
    return port.device in names or port.name in names


def of_node(net: NetFacts, names: Sequence[str] | None = None) -> LineRate:
    """The node's aggregate line rate in Gb/s. Unknown (never guessed) when its sysfs tree has problems,
    when no port counts, or when a counted port's rate cannot be read."""
    if net.problems:
        return LineRate(None, (), f"its network facts have {len(net.problems)} problem(s): {net.problems[0]}")
    if not net.ports:
        return LineRate(None, (), "no RDMA port in /sys/class/infiniband")
    if names:
        chosen = [p for p in net.ports if _named(p, names)]
        missing = [n for n in names if not any(_named(p, [n]) for p in net.ports)]
        if missing:
            return LineRate(None, (), f"port(s) named for the line rate are not on this node: {', '.join(missing)}")
        how = f"the {len(chosen)} port(s) named ({', '.join(names)})"
    else:
        chosen = [p for p in net.ports if net.gpu_facing(p)]
        if not chosen:
            return LineRate(None, (), f"none of its {len(net.ports)} RDMA port(s) shares a PCIe switch with a GPU "
                                      f"(name the ports that count with fabric_ports)")
        how = f"{len(chosen)} GPU-facing port(s)"
    up = [p for p in chosen if p.up]
    if not up:
        return LineRate(None, (), f"none of {how} is ACTIVE/LinkUp")
    unknown = [p.name for p in up if p.rate_gbps is None]
    if unknown:
        return LineRate(None, (), f"the rate of {', '.join(unknown)} cannot be read")
    # an ACTIVE/LinkUp port at 0 Gb/s moves nothing: its 0 would make every floor >= 0 and pass anything
    dead = [f"{p.name} ({p.rate_text or '0 Gb/s'})" for p in up if (p.rate_gbps or 0.0) <= 0]
    if dead:
        return LineRate(None, (), f"rate 0 on {', '.join(dead)}: ACTIVE/LinkUp at no rate, no line rate to judge by")
    # a chosen port that is down counts at its fastest ACTIVE sibling's rate: a rail leaf failing takes the same
    # mlx5_X down on every node, and leaving it out would lower every node's rate, and the run's bar, with it
    counted: list[tuple[Port, float]] = [(p, p.rate_gbps or 0.0) for p in up]
    stood_in = []
    for p in chosen:
        if p.up:
            continue
        sibling = _fastest_sibling(p, net.ports)
        if sibling is None:
            return LineRate(None, (), f"{p.name} is not ACTIVE/LinkUp and no ACTIVE port of its model (CA type, board "
                                      f"id, link layer) on the node says the rate it should run at: leaving it out "
                                      f"would lower the bar")
        counted.append((p, sibling.rate_gbps or 0.0))
        stood_in.append(f"{p.name} at {sibling.rate_gbps:g} Gb/s as {sibling.name}")
    total = sum(rate for _, rate in counted)
    down = f"; {len(chosen) - len(up)} of them not ACTIVE/LinkUp, counted at their fastest ACTIVE sibling's rate " \
           f"({', '.join(stood_in)})" if stood_in else ""
    return LineRate(total, tuple(p.name for p, _ in counted), f"{len(up)} active of {how}{down}")


def _fastest_sibling(port: Port, ports: Sequence[Port]) -> Port | None:
    """The fastest ACTIVE/LinkUp port at a rate above 0 of the same model as `port` (rdma.model_key: CA type,
    board id, link layer) on its node; None when its model is not known or no such port is up. A down port's
    own rate file says nothing of what it runs at when up."""
    key = model_key(port.hca_type, port.board_id, port.link_layer)
    if key is None:
        return None
    same = [p for p in ports if p.up and (p.rate_gbps or 0.0) > 0
            and model_key(p.hca_type, p.board_id, p.link_layer) == key]
    return max(same, key=lambda p: p.rate_gbps or 0.0, default=None)


def of_run(nodes: Mapping[str, NetFacts | None], names: Sequence[str] | None = None) -> LineRate:
    """The most any node of the run has, and the node that has it."""
    rates = {node: of_node(net, names) if net is not None else LineRate(None, (), "no network facts read")
             for node, net in nodes.items()}
    known = {node: r for node, r in rates.items() if r.gbps is not None and r.gbps > 0}  # 0: no bar at all
    if not known:
        first = next(iter(rates.items()), None)
        return LineRate(None, (), f"{first[0]}: {first[1].why}" if first else "no node")
    node = max(known, key=lambda n: known[n].gbps or 0.0)
    best = known[node]
    return LineRate(best.gbps, best.ports, f"{node}: {best.why}, the most of the run's {len(rates)} node(s)")
