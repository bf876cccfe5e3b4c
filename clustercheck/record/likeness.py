"""Whether two results of one item were measured on the same hardware, so that their numbers are a
like-for-like reference: as many nodes (a cluster item's `nodes`), as many ranks on the item's own nodes
(its pool's ranks; else the run header's ranks per node for a node or pair item, and for an item of the
whole cluster the header's ranks and ranks per node), and each node the same machine (its identity in the
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


def own_ranks(entry: Mapping[str, Any]) -> int | None:
    """How many ranks measured the item, from its pool's ranks (each names its host): of a cluster item all of
    them, of a node or pair item those on its own nodes; None where the pool names none (an older record, an
    item that measured nothing) or no rank's host is one of its nodes (host names the launcher does not use)."""
    ranks = (entry.get("pool") or {}).get("ranks")
    if not isinstance(ranks, list) or not ranks:
        return None
    if entry.get("scope") == "cluster":
        return len(ranks)
    nodes = set(entry.get("nodes") or [entry.get("node")])
    return sum(1 for r in ranks if isinstance(r, dict) and r.get("host") in nodes) or None


def measured_elsewhere(old: Mapping[str, Any], new: Mapping[str, Any], before: RunHeader, now: RunHeader) -> str | None:
    """`measured on other nodes/ranks/hardware (...)` where the two results of one item were, else None."""
    said = []
    was, are = old.get("nodes") or [], new.get("nodes") or []
    if was and are and len(was) != len(are):
        said.append(f"{len(was)} node(s) in the baseline, {len(are)} now")
    # a node's all_reduce over 8 ranks then and 2 now is another measurement, whatever the scope: the ranks on
    # the item's own nodes, as its pool names them; the headers' counts where a pool does not say, and of a
    # cluster item its ranks per node (as many ranks on twice the nodes is another layout)
    cluster = "cluster" in (new.get("scope"), old.get("scope"))
    was_ranks, are_ranks = own_ranks(old), own_ranks(new)
    pooled = was_ranks is not None and are_ranks is not None
    if pooled and was_ranks != are_ranks:
        said.append(f"{was_ranks} rank(s) on its node(s) in the baseline, {are_ranks} now")
    keys = [("ranks", "ranks")] if cluster and not pooled else []
    keys += [("ranks_per_node", "ranks per node")] if cluster or not pooled else []
    for key, what in keys:
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
