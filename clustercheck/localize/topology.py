"""Switch tree of a cluster: which leaf switch each node hangs from, and which switch is above which.

Read from Slurm's topology.conf (topology/tree lines `SwitchName=s0 Nodes=dev[0-5]`, `SwitchName=s3
Switches=s[0-2]`; topology/block lines `BlockName=b1 Nodes=...` are read as leaves with no parent), from
a JSON mapping of the same shape: `{"s0": {"nodes": "dev[0-5]"}, "s3": {"switches": ["s0", "s1"]}}`, or
from the running Slurm (`slurm`: `scontrol show topology`, which prints topology.conf's lines with
`Level=` and `LinkSpeed=` added and, on a switch above others, every node below it in `Nodes=`).
Format reference: Slurm's topology.conf(5), SchedMD/slurm doc/man/man5/topology.conf.5 (EXAMPLE).
"""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Iterable, Mapping

import hostlist

from clustercheck.errors import UserError

_KEYS = {"switchname", "blockname", "nodes", "switches", "linkspeed", "blocksizes"}
SLURM = "slurm"  # --topology slurm: ask the running Slurm (scontrol show topology)
SCONTROL = "scontrol show topology"


@dataclass(frozen=True)
class Topology:
    """`leaf_of[node]` is the switch a node hangs from; `parent_of[switch]` the switch above it (none
    for a root). A switch's *uplink* is its link to its parent; traffic between two nodes crosses the
    uplinks of every switch on the way up from each node's leaf to their lowest common switch."""

    leaf_of: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    parent_of: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    @staticmethod
    def build(leaf_of: Mapping[str, str], parent_of: Mapping[str, str]) -> Topology:
        return Topology(MappingProxyType(dict(leaf_of)), MappingProxyType(dict(parent_of)))

    def leaf(self, node: str) -> str:
        return self.leaf_of.get(node, "")

    def up(self, switch: str) -> list[str]:
        """The switch and those above it, up to its root."""
        path: dict[str, None] = {}  # ordered, and a set: a deep chain stays linear
        while switch and switch not in path:  # the parser refuses cycles; this guards a hand-built one
            path[switch] = None
            switch = self.parent_of.get(switch, "")
        return list(path)

    def crossed(self, u: str, v: str) -> tuple[str, ...]:
        """Uplinks (named by the switch below them) that traffic between u and v crosses."""
        a, b = self.leaf(u), self.leaf(v)
        if a == b:
            return ()
        pa, pb = self.up(a), self.up(b)
        common = set(pa) & set(pb)
        return tuple(s for s in pa if s not in common) + tuple(s for s in pb if s not in common)


def parse_topology_conf(text: str, source: str = "topology.conf", scontrol: bool = False) -> Topology:
    """Slurm's topology.conf (tree or block plugin lines); a mistake is one UserError line. With
    `scontrol`, the lines `scontrol show topology` prints: keys Slurm adds (Level, LinkSpeed, others in
    later versions) are passed over, and a switch above others takes its nodes from them, not from the
    `Nodes=` that lists every node below it."""
    leaf_of: dict[str, str] = {}
    children: dict[str, list[str]] = {}
    where: dict[str, int] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        fields: dict[str, str] = {}
        for token in line.split():
            key, eq, value = token.partition("=")
            if not eq or not value:
                raise UserError(f"expected Key=Value, got {token!r}", file=source, line=number)
            if key.lower() not in _KEYS and not scontrol:
                raise UserError("unknown key (topology/tree or topology/block lines: SwitchName, BlockName, Nodes, "
                                "Switches, LinkSpeed)", file=source, line=number, key=key)
            if key.lower() in fields and key.lower() in _KEYS:  # the second would drop the first's nodes or name
                raise UserError("given twice on one line", file=source, line=number, key=key)
            fields[key.lower()] = value
        if set(fields) == {"blocksizes"}:
            continue  # topology/block's size line: says nothing about which node is where
        name = fields.get("switchname") or fields.get("blockname")
        if not name:
            raise UserError("a line needs SwitchName= (or BlockName=)", file=source, line=number)
        if name in where:
            raise UserError(f"switch {name!r} is already defined on line {where[name]}", file=source, line=number)
        where[name] = number
        if "nodes" not in fields and "switches" not in fields:
            raise UserError(f"switch {name!r} has neither Nodes= nor Switches=", file=source, line=number)
        below = fields.get("nodes", "") if not (scontrol and "switches" in fields) else ""
        for node in _expand(below, source, number, "Nodes"):
            if node in leaf_of:
                raise UserError(f"node {node!r} is already under switch {leaf_of[node]!r}", file=source,
                                line=number, key="Nodes")
            leaf_of[node] = name
        children[name] = _expand(fields.get("switches", ""), source, number, "Switches")
    return _link(leaf_of, children, where, source)


def topology_from_mapping(data: Any, source: str) -> Topology:
    """`{switch: {"nodes": hostlist or list, "switches": hostlist or list}}` (JSON, or YAML read by the caller)."""
    if not isinstance(data, dict):
        raise UserError("expected a mapping of switch name to {nodes, switches}", file=source)
    leaf_of: dict[str, str] = {}
    children: dict[str, list[str]] = {}
    for name, spec in data.items():
        if not isinstance(spec, dict) or not set(spec) <= {"nodes", "switches"} or not spec:
            raise UserError("expected {nodes: ..., switches: ...}", file=source, key=str(name))
        for node in _names(spec.get("nodes", []), source, f"{name}.nodes"):
            if node in leaf_of:
                raise UserError(f"node {node!r} is already under switch {leaf_of[node]!r}", file=source,
                                key=f"{name}.nodes")
            leaf_of[node] = str(name)
        children[str(name)] = _names(spec.get("switches", []), source, f"{name}.switches")
    return _link(leaf_of, children, {}, source)


def load_topology(path: str | Path) -> Topology:
    """topology.conf, or a .json mapping; an unreadable file is one UserError line."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise UserError(f"cannot read the topology: {exc.strerror}", file=str(p)) from None
    except UnicodeDecodeError:  # a UTF-16 export, a binary picked by mistake: one line, never a traceback
        raise UserError("not UTF-8 text", file=str(p)) from None
    if p.suffix.lower() == ".json":
        try:
            data = json.loads(text, object_pairs_hook=_unique)
        except json.JSONDecodeError as exc:
            raise UserError(f"not JSON: {exc.msg}", file=str(p), line=exc.lineno) from None
        except _Repeated:  # json keeps the last: a switch defined twice would lose its first children
            key, line = _repeated_key(text)
            raise UserError("defined twice", file=str(p), line=line, key=key) from None
        return topology_from_mapping(data, str(p))
    return parse_topology_conf(text, str(p))


class _Repeated(Exception):
    """A JSON object holds a key twice (where is found again by _repeated_key)."""


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        raise _Repeated
    return out


_TOKEN = re.compile(r'["{}\[\]]')
_SPACE = re.compile(r"[ \t\r\n]*")


def _repeated_key(text: str) -> tuple[str, int]:
    """The first key an object of `text` (valid JSON) holds twice, as a dotted path, and its second line."""
    stack: list[tuple[str, set[str] | None]] = []  # per open container: its key path, its keys (None: a list)
    path, at = "", _TOKEN.search(text)
    while at:
        i, c = at.start(), at.group()
        if c == '"':
            s, end = json.decoder.scanstring(text, i + 1)  # type: ignore[attr-defined]
            keys = stack[-1][1] if stack else None
            space = _SPACE.match(text, end)
            colon = space.end() if space else end
            if keys is not None and text[colon:colon + 1] == ":":
                name = f"{stack[-1][0]}.{s}" if stack[-1][0] else s
                if s in keys:
                    return name, text.count("\n", 0, i) + 1
                keys.add(s)
                path = name
            at = _TOKEN.search(text, end)
            continue
        if c in "{[":
            stack.append((path if stack else "", set() if c == "{" else None))
        else:
            stack.pop()
            path = stack[-1][0] if stack else ""
        at = _TOKEN.search(text, i + 1)
    return "", 0


def read_topology(spec: str | Path) -> Topology:
    """--topology: `slurm` asks the running Slurm; anything else is a topology.conf or .json file."""
    return slurm_topology() if str(spec) == SLURM else load_topology(spec)


def source_of(spec: str | Path) -> str:
    """Where --topology's tree comes from, as errors and the record name it."""
    return SCONTROL if str(spec) == SLURM else str(spec)


def slurm_topology(timeout: float = 30.0) -> Topology:
    """The switch tree the running Slurm holds. No scontrol, a failing one or an empty answer (no
    TopologyPlugin: scontrol says 'No topology information available' on stderr and exits 0) is one
    UserError line: localizing without the tree the user asked for would name switches wrongly."""
    try:
        res = subprocess.run(SCONTROL.split(), capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        raise UserError("--topology slurm: scontrol is not on PATH (run inside a Slurm allocation, or give "
                        "a topology.conf)") from None
    except subprocess.TimeoutExpired:
        raise UserError(f"--topology slurm: {SCONTROL} gave no answer in {timeout:g} s") from None
    said = " ".join(res.stderr.split())[:300]
    if res.returncode != 0:
        raise UserError(f"--topology slurm: {SCONTROL} exited {res.returncode}: {said or 'no message'}")
    if not res.stdout.strip():
        raise UserError(f"--topology slurm: Slurm holds no switch tree ({SCONTROL} printed nothing"
                        + (f"; it said: {said}" if said else "") + "); set TopologyPlugin=topology/tree "
                        "with a topology.conf, or give --topology FILE")
    return parse_topology_conf(res.stdout, SCONTROL, scontrol=True)


def _names(value: Any, source: str, key: str) -> list[str]:
    if isinstance(value, str):
        return _expand(value, source, None, key)
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return list(value)
    raise UserError("expected a hostlist string or a list of names", file=source, key=key)


def _expand(expr: str, source: str, line: int | None, key: str) -> list[str]:
    if not expr:
        return []
    try:
        return list(hostlist.expand_hostlist(expr))
    except hostlist.BadHostlist as exc:
        raise UserError(f"bad hostlist {expr!r}: {exc}", file=source, line=line, key=key) from None


def _link(leaf_of: dict[str, str], children: dict[str, list[str]], where: dict[str, int], source: str) -> Topology:
    parent_of: dict[str, str] = {}
    for name, kids in children.items():
        for kid in kids:
            if kid not in children:
                raise UserError(f"switch {name!r} lists {kid!r}, which is not defined", file=source,
                                line=where.get(name), key="Switches")
            if kid in parent_of:
                raise UserError(f"switch {kid!r} is under both {parent_of[kid]!r} and {name!r}", file=source,
                                line=where.get(name), key="Switches")
            parent_of[kid] = name
    # A loop would send traffic up forever. Each switch has one parent, so walking up from each switch finds
    # any loop; stopping at a switch already known to reach a root keeps the whole walk linear (a deep
    # chain was quadratic to cubic: 19 s for 1,500 levels).
    rooted: set[str] = set()
    for name in children:
        path: dict[str, None] = {}  # this walk, in order, for the message
        s = name
        while s not in rooted:
            if s in path:
                loop = [*list(path)[list(path).index(s):], s]
                raise UserError(f"switches form a loop: {' -> '.join(loop)}", file=source, line=where.get(s))
            path[s] = None
            if s not in parent_of:
                break
            s = parent_of[s]
        rooted.update(path)
    return Topology.build(leaf_of, parent_of)


def for_nodes(spec: str | Path, nodes: Iterable[str]) -> Topology:
    """--topology read and cut to a run's nodes (a cluster's tree names many more); a run node under no
    switch is the user's error, named before any rank starts."""
    nodes = list(nodes)
    full = read_topology(spec)
    check_nodes(full, nodes, source_of(spec))
    return Topology.build({n: full.leaf_of[n] for n in nodes}, full.parent_of)


def check_nodes(topology: Topology, nodes: Iterable[str], source: str = "topology") -> None:
    """Every node to test must hang from some switch, else its traffic cannot be placed."""
    missing = [n for n in nodes if n not in topology.leaf_of]
    if missing:
        shown = hostlist.collect_hostlist(missing[:64])
        raise UserError(f"{len(missing)} node(s) are under no switch: {shown}", file=source)

