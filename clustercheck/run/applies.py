"""Whether a check applies to a run: the skips a run makes before any rank measures (too few nodes, no GPUs,
a group of one rank), decided from the run's layout alone. The runner asks before it measures a check, and
`verify` asks again from a record's header, so that a skip the run would not have made is found
(evidence/rejudge.py): a measured item rewritten as skipped would otherwise read as not applicable."""

from __future__ import annotations

from typing import Sequence

from clustercheck.errors import NeverJoined, Skip
from clustercheck.kinds import KINDS
from clustercheck.kinds.base import CheckSpec


def applies(check: CheckSpec, backend: str, nodes: int, per_node: int, absent: Sequence[str] = ()) -> None:
    """Skip (with the reason) where `check` cannot be done on `nodes` nodes of `per_node` ranks over `backend`;
    NeverJoined where nodes that never joined (`absent`) would have made enough, or a group cannot work."""
    kind = KINDS[check.measure]
    if nodes < check.min_nodes:
        _too_few(check, backend, nodes, absent, check.min_nodes,
                 f"{check.id} needs {check.min_nodes} nodes or more (min_nodes: it judges the network between nodes); "
                 f"this run has {nodes}")
    if kind.gpu_only and backend != "nccl":
        raise Skip(f"{check.measure} needs GPUs and this node has none")
    if check.scope in ("pair", "localize") and nodes < 2:
        _too_few(check, backend, nodes, absent, 2, f"scope {check.scope} needs two nodes or more; this run has {nodes}")
    group = per_node * {"pair": 2, "localize": 2, "cluster": nodes}.get(check.scope, 1)
    if group < kind.min_ranks:
        if check.scope == "cluster":  # one rank per node: a second node would have given it a peer
            _too_few(check, backend, nodes, absent, -(-kind.min_ranks // per_node),
                     f"{check.measure} over a single rank moves no data between devices")
        raise Skip(f"{check.measure} over a single rank moves no data between devices")
    kind.check_group(check, group)


def _too_few(check: CheckSpec, backend: str, nodes: int, absent: Sequence[str], need: int, why: str) -> None:
    """Too few nodes for `check`: a Skip saying `why` where the run was planned that small; an error naming
    the nodes that never joined where they would have made enough (a node never measured is no skip)."""
    if absent and nodes + len(absent) >= need and not (KINDS[check.measure].gpu_only and backend != "nccl"):
        raise NeverJoined(f"not run: {check.id} needs {need} nodes; {len(absent)} node(s) never joined: "
                          f"{', '.join(absent)}", tuple(absent))
    raise Skip(why)
