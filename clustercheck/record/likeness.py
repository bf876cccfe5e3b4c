"""Whether two results of one item were measured on the same hardware, so that their numbers are a
like-for-like reference: as many nodes (a cluster item's `nodes`), as many ranks and ranks per node (the
run header's, for an item of the whole cluster), and each node the same machine (its identity in the
header: machine_id, each GPU's serial and UUID). Pure: no pytest, no torch."""

from __future__ import annotations

from typing import Any, Mapping

from clustercheck.record.schema import RunHeader


def identity(header: RunHeader, node: str) -> dict[str, Any]:
    """The parts of `node`'s identity that name the machine: its machine_id and its GPUs' serials and UUIDs."""
    facts = (header.get("node_facts") or {}).get(node)
    if facts is None and str((header.get("facts") or {}).get("host") or "") == node:
        facts = header.get("facts")
    ident = (facts or {}).get("identity") if isinstance(facts, dict) else None
    if not isinstance(ident, dict):
        return {}
    gpus = [(g.get("serial"), g.get("uuid")) for g in ident.get("gpus") or () if isinstance(g, dict)]
    return {k: v for k, v in (("machine_id", ident.get("machine_id")), ("gpus", gpus or None)) if v}


def measured_elsewhere(old: Mapping[str, Any], new: Mapping[str, Any], before: RunHeader, now: RunHeader) -> str | None:
    """`measured on other nodes/ranks/hardware (...)` where the two results of one item were, else None."""
    said = []
    was, are = old.get("nodes") or [], new.get("nodes") or []
    if was and are and len(was) != len(are):
        said.append(f"{len(was)} node(s) in the baseline, {len(are)} now")
    if new.get("scope") == "cluster" or old.get("scope") == "cluster":
        for key, what in (("ranks", "ranks"), ("ranks_per_node", "ranks per node")):
            a, b = before.get(key), now.get(key)
            if a is not None and b is not None and a != b:
                said.append(f"{a} {what} in the baseline, {b} now")
    nodes = [n for n in dict.fromkeys([*(are or [new.get("node")]), *(was or [old.get("node")])]) if isinstance(n, str)]
    for node in nodes:
        a, b = identity(before, node), identity(now, node)
        changed = [k for k in ("machine_id", "gpus") if k in a and k in b and a[k] != b[k]]
        if changed:
            said.append(f"node {node}: its {' and '.join('GPUs' if k == 'gpus' else k for k in changed)} changed")
    return f"measured on other nodes/ranks/hardware ({'; '.join(said[:4])})" if said else None
