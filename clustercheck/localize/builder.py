"""One round's groups for the planner (planner.py): disjoint groups, and known-good partners drawn from
cleared, idle nodes, from the node's own leaf, another leaf, or outside a switch whose uplink is probed."""

from __future__ import annotations

import itertools
from typing import Sequence

from clustercheck.localize.infer import Explanation, Test
from clustercheck.localize.model import Group, Purpose, uplink
from clustercheck.localize.topology import Topology


class Builder:
    """One round's disjoint groups, and known-good partners drawn from cleared, idle nodes."""

    def __init__(self, topology: Topology, nodes: Sequence[str], tests: Sequence[Test], r: int,
                 ex: Explanation) -> None:
        self.topology = topology
        self.r = r
        self.busy: set[str] = set()
        self.reserved: dict[str, None] = {}
        self.orphans: dict[str, None] = {}
        # pairs already run: a known-good partner must be a new one, or the test only repeats itself
        self.done = {frozenset(t.group.members) for t in tests if len(t.group.members) == 2}
        self.groups: list[Group] = []
        cleared = {p.key[0] for p in ex.cleared if p.kind == "node"}
        self.pool: dict[str, list[str]] = {}
        for n in reversed(nodes):
            if n in cleared:
                self.pool.setdefault(topology.leaf(n), []).append(n)
        # leaves whose own uplink passed a test: a partner there adds no unknown to a probe
        good = [leaf for leaf in self.pool if uplink(leaf) in ex.cleared or not leaf]
        self.leaves = good + [leaf for leaf in self.pool if leaf not in good]
        self._turn = 0

    def add(self, members: tuple[str, ...], purpose: Purpose) -> bool:
        if len(set(members)) != len(members) or any(m in self.busy for m in members):
            return False
        self.busy.update(members)
        self.groups.append(Group(f"r{self.r}-g{len(self.groups)}", self.r, members, purpose))
        return True

    def reserve(self, *nodes: str) -> None:
        for n in nodes:
            self.reserved[n] = None
            self.busy.add(n)

    def with_helper(self, n: str, purpose: Purpose, other_leaf: bool = False, away: str = "") -> None:
        """Pair `n` with a cleared idle node: from its own leaf when it can (no uplink in the test),
        from another leaf for a probe of n's uplink (outside switch `away` for one of its uplink)."""
        if n in self.busy and n not in self.reserved:
            return
        self.reserved.pop(n, None)
        self.busy.discard(n)
        helper = self._helper(self.topology.leaf(n), other_leaf, n, away)
        if helper is not None:
            self.add((n, helper), purpose)
        else:
            self.orphans[n] = None

    def across(self, n: str, leaves: Sequence[str]) -> str | None:
        """Pair idle, cleared `n` with a cleared helper from the first of `leaves` that has one (a probe of the
        uplinks between them); none left: no group, and `n` is no orphan (it needs no test of its own)."""
        for leaf in leaves:
            if (h := self._pop(leaf, n)) and self.add((n, h), "probe"):
                return h
        return None

    def pair_orphans(self) -> None:
        """Nodes that found no known-good partner (nothing passed yet) test each other, in pairs not
        run before."""
        left = [n for n in self.orphans if n not in self.busy]
        leaf = self.topology.leaf
        while len(left) > 1:
            u = left.pop(0)
            # far down the list first (another ring's leaf): the first pair not run before on another leaf, else
            # the first not run before; looked at lazily, as most nodes take the first they see (a list of every
            # candidate per node made this quadratic: ~10 s at 8,192 nodes when every test failed)
            half = itertools.chain(range(len(left) // 2, len(left)), range(len(left) // 2))
            fresh = (i for i in half if frozenset((u, left[i])) not in self.done)
            first = i = next(fresh, None)
            while i is not None and leaf(left[i]) == leaf(u):
                i = next(fresh, None)
            pick = i if i is not None else first
            if pick is not None:
                self.add((u, left.pop(pick)), "pair")

    def _helper(self, leaf: str, other_leaf: bool, target: str, away: str = "") -> str | None:
        if not other_leaf and (h := self._pop(leaf, target)):
            return h
        up = self.topology.up
        for i in range(len(self.leaves)):
            cand = self.leaves[(self._turn + i) % len(self.leaves)]
            if (cand != leaf or not leaf) and (not away or away not in up(cand)) and (h := self._pop(cand, target)):
                self._turn = (self._turn + i + 1) % len(self.leaves)
                return h
        return None

    def _pop(self, leaf: str, target: str) -> str | None:
        stack = self.pool.get(leaf, [])
        skipped = []
        found = None
        while stack:
            h = stack.pop()
            if h in self.busy or h in self.reserved:
                continue
            if h == target or frozenset((h, target)) in self.done:
                skipped.append(h)
                continue
            found = h
            break
        stack.extend(skipped)
        return found


__all__ = ["Builder"]
