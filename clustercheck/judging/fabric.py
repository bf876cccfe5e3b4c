"""The fabric floor: multi-node busbw judged against a fraction of the nodes' network line rate.

A profile's `fabric:` block (docs/fabric.md) says which fraction of the node's aggregate line rate the
Ring all_reduce, all_gather and reduce_scatter busbw must reach at a size on the plateau, and may name
the line rate and the ports that count. Without a block the built-in rule below applies, so that
`--expect fabric_gbps=3200` alone judges a capture. The line rate comes from `--expect fabric_gbps`,
else the block's `line_rate_gbps`, else the nodes' own RDMA ports (fabric/linerate.py); unknown, the
multi-node busbw is not judged, never passed.

Why these numbers (docs/fabric.md has the table): NVIDIA's NCCL maintainers expect 46-48 GB/s per
ConnectX-7 NDR 400 Gb/s NIC with Ring, 92-96% of its 50 GB/s (NVIDIA/nccl-tests #290, #319); Together AI
accepts about 92% of line rate (as quoted in NVIDIA cluster-readiness-engine ADR-021); Azure's health
checks floor ib_write_bw with GPUDirect at 380 Gb/s per 400 Gb/s NIC on ND H100 v5 and 360 (90%) on H200
and GB200 (Azure/azurehpc-health-checks conf/*.conf). Ring busbw is about flat in the node count at large
sizes, which CoreWeave's 386.6 GB/s at 8 GiB over 8 nodes of 8 x 400G shows (coreweave/nccl-tests).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Mapping

from clustercheck import units
from clustercheck.errors import HarnessError, UserError, escape
from clustercheck.judging.limits import Limit
from clustercheck.schema import Fields

if TYPE_CHECKING:
    from clustercheck.fabric.rdma import NetFacts

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter")
DEFAULT_FRACTION = 0.9
DEFAULT_MIN_SIZE = 8 << 30
BUILT_IN_SOURCE = (
    "clustercheck's built-in fabric rule: busbw >= 0.9 x the node's line rate at >= 8 GiB, Ring; NVIDIA expects "
    "46-48 GB/s per 400G NIC with Ring, 92-96% (https://github.com/NVIDIA/nccl-tests/issues/290); Together AI "
    "accepts ~92% of line rate (as quoted in NVIDIA cluster-readiness-engine docs/designs/021-performance-threshold-"
    "enforcement.md); Azure floors ib_write_bw GDR at 380 of 400 Gb/s per NIC on ND H100 v5 and 360 on H200/GB200 "
    "(Azure/azurehpc-health-checks conf/nd96isr_h100_v5.conf, nd96isr_h200_v5.conf)")


@dataclass(frozen=True)
class FabricRule:
    fraction: dict[str, float] = field(default_factory=lambda: dict.fromkeys(COLLECTIVES, DEFAULT_FRACTION))
    min_size: int = DEFAULT_MIN_SIZE
    line_rate_gbps: float | None = None
    ports: tuple[str, ...] = ()
    source: str = BUILT_IN_SOURCE
    origin: str = "built in"          # "thresholds/h100-sxm-8x.yaml:120 fabric"

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ports": list(self.ports)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> FabricRule:
        return cls(**{**d, "fraction": dict(d["fraction"]), "ports": tuple(d.get("ports") or ())})

    def describe(self) -> str:
        fractions = sorted(set(self.fraction.values()))
        frac = f"{fractions[0]:g}" if len(fractions) == 1 else \
            ", ".join(f"{c} {f:g}" for c, f in self.fraction.items())
        rate = f"{self.line_rate_gbps:g} Gb/s" if self.line_rate_gbps else "read from the nodes' RDMA ports"
        ports = f" (ports {', '.join(self.ports)})" if self.ports else ""
        return (f"busbw >= {frac} x line rate / 8 for multi-node {', '.join(self.fraction)} (Ring), judged at "
                f">= {units.format_size(self.min_size)}; line rate {rate}{ports}")


def parse_rule(raw: object, file: str, line: int) -> FabricRule:
    """A profile's `fabric:` block; one line naming file, line and key on a mistake."""
    f = Fields(raw, file, "fabric", line)
    fraction_raw = f.get("fraction", (float, dict), DEFAULT_FRACTION)
    if isinstance(fraction_raw, dict):
        ff = Fields(fraction_raw, file, f.key_path("fraction"), f.line_of("fraction"))
        fraction = {c: ff.get(c, float, check=_fraction) for c in COLLECTIVES if c in fraction_raw}
        ff.done()
        if not fraction:
            raise f.error("fraction", f"names no collective; give one or more of {', '.join(COLLECTIVES)}")
    else:
        problem = _fraction(fraction_raw)
        if problem:
            raise f.error("fraction", problem)
        fraction = dict.fromkeys(COLLECTIVES, float(fraction_raw))
    size_raw = f.get("min_size", (int, str), None)
    try:
        min_size = DEFAULT_MIN_SIZE if size_raw is None else units.parse_size(size_raw)
    except ValueError as exc:
        raise f.error("min_size", str(exc)) from None
    rate = f.get("line_rate_gbps", float, None, check=_positive)
    ports = f.get("ports", list, [])
    if not all(isinstance(p, str) and p for p in ports):
        raise f.error("ports", "expected a list of RDMA device or port names, e.g. [mlx5_0, mlx5_3/1]")
    source = f.get("source", str, "")
    f.done()  # a misspelt key is named first: 'sources' is a typo, not a missing source
    if not source:
        raise f.error("source", "a fabric rule needs its public source (the measurement or guidance its numbers "
                                "come from)")
    return FabricRule(fraction, min_size, rate, tuple(ports), source, f"{file}:{line} fabric")


def _fraction(value: float) -> str | None:
    if not math.isfinite(value) or not 0 < value <= 1:
        return f"expected a fraction of the line rate in (0, 1], got {value}"
    return None


def _positive(value: float) -> str | None:
    if not math.isfinite(value) or value <= 0:
        return f"expected a line rate in Gb/s above 0, got {value}"
    return None


NO_RATE = "no line rate given"


@dataclass(frozen=True)
class LineRateChoice:
    gbps: float | None
    origin: str     # "--expect fabric_gbps", "<profile> fabric.line_rate_gbps", "the nodes' RDMA ports: ..."


def line_rate(expect: Mapping[str, Any], rule: FabricRule, from_nodes: tuple[float | None, str] | None = None
              ) -> LineRateChoice:
    """The node line rate a floor is judged against, and where it came from."""
    if expect.get("fabric_gbps") is not None:
        return LineRateChoice(float(expect["fabric_gbps"]), "--expect fabric_gbps")
    if rule.line_rate_gbps is not None:
        return LineRateChoice(rule.line_rate_gbps, f"{rule.origin}.line_rate_gbps")
    if from_nodes is not None:
        gbps, why = from_nodes
        return LineRateChoice(gbps, f"the nodes' RDMA ports: {why}")
    return LineRateChoice(None, NO_RATE)


UNKNOWN = "not judged: network line rate unknown (give --expect fabric_gbps=N or a profile's fabric block)"


def floor(rule: FabricRule, collective: str, rate: LineRateChoice, check_id: str) -> Limit | str:
    """The busbw limit for a multi-node `collective`, or why there is none (text starting 'not judged')."""
    if collective not in rule.fraction:
        return (f"not judged: the fabric rule ({rule.origin}) covers {', '.join(rule.fraction)}, not {collective}; "
                f"give the check its own limit under the profile's checks:")
    if rate.gbps is None:
        return UNKNOWN if rate.origin == NO_RATE else f"{UNKNOWN}; {rate.origin}"
    fraction = rule.fraction[collective]
    value = fraction * rate.gbps / 8
    expression = f">= {fraction:g} * {rate.gbps:g} Gb/s / 8"
    return Limit(check_id, "busbw", ">=", value, "GB/s", expression,
                 f"{rule.source}; line rate {rate.gbps:g} Gb/s from {rate.origin}", rule.origin)


def expectations(rule: FabricRule | None) -> dict[str, Any]:
    """What a probe reads of the fabric rule (under `fabric_rule`, a key no user sets)."""
    return {"fabric_rule": (rule or FabricRule()).as_dict()}


def rule_of(expect: Mapping[str, Any]) -> FabricRule:
    raw = expect.get("fabric_rule")
    if raw is None:
        return FabricRule()
    try:
        return FabricRule.from_dict(raw)
    except (KeyError, TypeError) as exc:  # a task built by another version: say so, never guess
        raise UserError(f"the fabric rule handed to the probe is malformed ({exc})") from None


@dataclass(frozen=True)
class RunFabric:
    """What the fabric floor of a run's checks depends on: how many nodes it has, its backend, the
    expectations (the profile's with --expect over them) and the line rate its nodes' ports give."""

    nodes: int
    backend: str
    expect: Mapping[str, Any]
    node_rate: tuple[float | None, str] | None = None


def run_fabric(nodes: Mapping[str, Mapping[str, Any] | None], backend: str, expect: Mapping[str, Any],
               rule: FabricRule | None) -> RunFabric:
    """The run's fabric context from each node's recorded facts (`network`: fabric/rdma.NetFacts.as_dict)."""
    from clustercheck.fabric.linerate import of_run
    from clustercheck.fabric.rdma import NetFacts, Problem

    names = expect.get("fabric_ports") or (rule.ports if rule else ()) or None
    nets: dict[str, NetFacts | None] = {}
    for node, f in nodes.items():
        net = node_net(node, f["network"]) if f and f.get("network") else None
        # facts that do not read are that node's unread ports (of_node: its rate unknown, never guessed), so
        # its line rate counts for nothing and the reason names it: the same as a sysfs file it could not read
        nets[node] = NetFacts(findings=(Problem(None, net, unread=True, nic=True),)) if isinstance(net, str) else net
    rate = of_run(nets, list(names) if names else None)
    return RunFabric(len(nodes), backend, dict(expect), (rate.gbps, rate.text()))


def node_net(node: str, raw: Any) -> NetFacts | str:
    """A node's recorded network facts (fabric/rdma.NetFacts.as_dict), or, when they do not read (an entry
    another version or an edit wrote), why, naming the node: one node's facts never stop a report or a
    verification of the others, and never read as a node without problems."""
    from clustercheck.fabric.rdma import NetFacts

    where = f"{node}: network facts"
    try:
        if not isinstance(raw, Mapping):
            raise HarnessError(f"{where}: {repr(raw)[:160]} is not a mapping")
        return NetFacts.from_dict(raw, where)
    except HarnessError as exc:
        return escape(str(exc))
    except (KeyError, TypeError, AttributeError, ValueError) as exc:  # a port or gdr entry of another shape
        return escape(f"{where} do not read ({type(exc).__name__}: {exc})")


def multi_node(scope: str, nodes: int) -> bool:
    """A check whose items span several nodes: pairs, localization rounds, a cluster of more than one."""
    return scope in ("pair", "localize") or (scope == "cluster" and nodes > 1)


def ring_problem(collective: str, backend: str, env: Mapping[str, str]) -> str | None:
    """Why a multi-node all_reduce cannot be judged against the network: NCCL's Tree and NVLSTree can move
    more than the network carries on 2 nodes (NVIDIA/nccl-tests #290, #319: "we suggest passing
    NCCL_ALGO=RING when benchmarking just two nodes"), so the floor judges Ring only. gloo's and the other
    collectives' busbw are bounded by the network whatever the algorithm."""
    if collective != "all_reduce" or backend != "nccl":
        return None
    algo = env.get("NCCL_ALGO", "").replace(" ", "").lower()
    parts = [p for p in algo.split(";") if p]
    for_allreduce = [p.split(":", 1)[1] for p in parts if p.startswith("allreduce:")]
    general = [p for p in parts if ":" not in p]
    chosen = for_allreduce[0] if for_allreduce else (general[0] if general else "")
    if chosen == "ring":
        return None
    return ("not judged: a multi-node all_reduce is judged against the network on Ring only (NCCL's Tree and NVLSTree "
            "can exceed the network on 2 nodes: NVIDIA/nccl-tests #290, #319); set env: {NCCL_ALGO: Ring} on the check, "
            f"or judge all_gather / reduce_scatter (NCCL_ALGO here: {env.get('NCCL_ALGO') or 'unset'})")
