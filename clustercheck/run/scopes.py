"""Where a check runs and what gets a verdict: one function expands a scope into items, in rounds of
items that run at the same time. The plugin makes one pytest item per entry; the session runs each round
as groups of ranks. An item is named by `where`: a node, a node pair "a,b", or None (the whole cluster)."""

from __future__ import annotations

from clustercheck.run.pairs import pair_name, schedule

Where = str | None


def rounds(scope: str, nodes: list[str], pair_strategy: str = "rounds", pair_seed: int = 0) -> list[list[Where]]:
    """The items of a check with this scope over `nodes`, in rounds (items of a round run at once)."""
    if scope == "cluster":
        return [[None]]
    if scope == "pair":
        return [[pair_name(p) for p in pairs] for pairs in schedule(pair_strategy, nodes, pair_seed)]
    if scope == "localize":  # a verdict per node, and one for the links and switch uplinks (docs/localize.md)
        return [[*nodes, None]]
    return [list(nodes)]  # node, gpu, gpu-pair: every node on its own, all at once


def members(where: Where, nodes: list[str]) -> list[str]:
    """The nodes an item covers."""
    return list(nodes) if where is None else where.split(",")
