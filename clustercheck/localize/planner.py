"""Adaptive localization in rounds of disjoint groups (docs/localize.md has the design and its bound).

Round 1 screens: each group is a ring over whole leaf switches (two or more, about `ring_size` nodes),
nodes of a leaf consecutive in the given order, so a ring tests every node, every link between
neighbours of a leaf, and the uplinks of its leaves (two crossings). Round 2 splits each failed ring
into pairs along every other edge of each leaf's chain; round 3 tests the remaining edges, gives a
node whose two neighbours both failed round 2 a known-good partner instead, and probes each leaf's
uplink from the two chain ends with known-good nodes of other leaves. Each node so meets two
different partners and every chain edge is tested alone. Later rounds (up to `max_rounds`) only test
apart parts that the evidence could not separate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

from clustercheck.errors import UserError
from clustercheck.localize.builder import Builder
from clustercheck.localize.infer import Explanation, Test, confidence, explain, readings
from clustercheck.localize.model import (
    Evidence, Finding, Group, Outcome, Part, Verdicts, exercised, usable,
)
from clustercheck.localize.topology import Topology, check_nodes


@dataclass(frozen=True)
class Ring:
    """A screening group: one chain of nodes per leaf switch, run as one ring in chain order."""

    chains: tuple[tuple[str, ...], ...]

    @property
    def members(self) -> tuple[str, ...]:
        return tuple(n for chain in self.chains for n in chain)


def screen_rings(nodes: Sequence[str], topology: Topology, ring_size: int) -> list[Ring]:
    """Whole leaves, consecutive in the node order, at least two per ring so that every ring crosses
    its leaves' uplinks; with one leaf (or no topology), chunks of about `ring_size` nodes."""
    leaves: dict[str, list[str]] = {}
    for n in nodes:
        leaves.setdefault(topology.leaf(n), []).append(n)
    chains = [tuple(c) for c in leaves.values()]
    if len(chains) == 1:
        chain = chains[0]
        size = math.ceil(len(chain) / math.ceil(len(chain) / ring_size))
        return [Ring((chain[i:i + size],)) for i in range(0, len(chain), size)]
    rings: list[list[tuple[str, ...]]] = []
    current: list[tuple[str, ...]] = []
    for chain in chains:
        current.append(chain)
        if len(current) >= 2 and sum(map(len, current)) >= ring_size:
            rings.append(current)
            current = []
    if current:
        if rings and (len(current) < 2 or sum(map(len, current)) < ring_size // 2):
            rings[-1].extend(current)
        else:
            rings.append(current)
    return [Ring(tuple(r)) for r in rings]


class Planner:
    """Call `next_round()` for the groups to run at once (each a ring all_reduce, ranks in `members`
    order), then `record({group id: bandwidth | passed | None})`; repeat until `next_round()` returns
    []; `verdicts()` names the bad nodes, links and switch uplinks with their evidence."""

    def __init__(self, nodes: Sequence[str], topology: Topology | None = None, *, threshold: float | None = None,
                 ring_size: int = 64, max_rounds: int = 4, confirm: bool = False,
                 marginal: float = 0.10) -> None:
        names = list(nodes)
        if len(set(names)) != len(names):
            dup = sorted({n for n in names if names.count(n) > 1})[:3]
            raise UserError(f"a node is listed twice: {', '.join(dup)}", key="nodes")
        if len(names) < 2:
            raise UserError("localizing needs at least 2 nodes", key="nodes")
        if ring_size < 2 or max_rounds < 1:
            raise UserError("ring_size must be >= 2 and max_rounds >= 1", key="ring_size")
        if threshold is not None and not (math.isfinite(threshold) and threshold >= 0):
            raise UserError(f"threshold must be a finite bandwidth >= 0, got {threshold}", key="threshold")
        if not 0 <= marginal < 1:
            raise UserError(f"marginal must be a fraction of the threshold in [0, 1), got {marginal}", key="marginal")
        if topology is not None:
            check_nodes(topology, names)
        self.nodes = tuple(names)
        self.topology = topology or Topology()
        self.threshold = threshold
        self.max_rounds = max_rounds
        self.confirm = confirm
        # A part named from one reading just under the threshold (within `marginal` of it) is tested again
        # in the last round even without `confirm`: noise makes such readings in a large run (4,000 tests at
        # 5% noise give one 4-sigma reading in about eight runs); a reading far below it noise cannot make.
        self.marginal = marginal
        self.rings = screen_rings(names, self.topology, ring_size)
        self._under: dict[str, list[str]] = {}  # leaf switch -> its nodes, in the given order
        for n in names:
            self._under.setdefault(self.topology.leaf(n), []).append(n)
        # switch -> the nodes below it, for each switch whose uplink traffic between two of these nodes crosses
        # (some node below it, some not): the uplinks a pass must have crossed
        below: dict[str, list[str]] = {}
        for leaf, under in self._under.items():
            for s in self.topology.up(leaf):
                if s in self.topology.parent_of:
                    below.setdefault(s, []).extend(under)
        self._below = {s: b for s, b in below.items() if len(b) < len(names)}
        self._tests: list[Test] = []
        self._pending: list[Group] = []
        self._rounds = 0
        self._done = False
        self._explanation: Explanation | None = None

    @property
    def rounds(self) -> int:
        return self._rounds

    @property
    def tests(self) -> int:
        return len(self._tests)

    def next_round(self) -> list[Group]:
        """The groups of the next round (disjoint: run them at the same time); [] when done. Asking
        again before `record` gives the same groups."""
        if self._pending or self._done:
            return list(self._pending)
        r = self._rounds + 1
        groups = self._plan(r) if r <= self.max_rounds else []
        if not groups:
            self._done = True
        self._pending = groups
        return list(groups)

    def record(self, results: Mapping[str, Outcome]) -> None:
        """Outcomes of the pending round by group id. A group left out gave no result: neither a pass nor a
        failure (it clears and blames nobody), and its nodes are tested again in the next round."""
        if not self._pending:
            raise UserError("no round is waiting for results: call next_round() first")
        ids = {g.id for g in self._pending}
        unknown = sorted(set(results) - ids)
        if unknown:
            raise UserError(f"result for a group not in this round: {unknown[0]!r}")
        for g in self._pending:
            outcome = usable(results.get(g.id))  # NaN, an infinity, a negative: no measurement
            self._tests.append(Test(g, exercised(g.members, self.topology), outcome, self._passed(g, outcome)))
        self._rounds += 1
        self._pending = []
        self._explanation = None
        if self._rounds == 1 and all(t.passed for t in self._tests) and not self._never_crossed():
            self._done = True

    def explanation(self) -> Explanation:
        if self._explanation is None:
            self._explanation = explain(self._tests)
        return self._explanation

    def verdicts(self) -> Verdicts:
        ex = self.explanation()
        every_failed = self._every_test_failed()
        findings: list[Finding] = []
        suspects = [list(group) for group in ex.suspects]
        for p, (k, stand_ins) in ex.entangled.items():  # still tied when the rounds ran out: never blamed
            suspects[k] += [p, *(q for q in stand_ins if q not in suspects[k])]
        weak = [p for p in ex.chosen if p not in ex.entangled and self._weak(p, ex)]
        suspects += [[p] for p in weak]  # named from too little: tested again had a round been left
        if not every_failed:  # nothing ever passed: a shared cause (threshold, software), not these parts
            for p in (p for p in ex.chosen if p not in ex.entangled and p not in weak):
                evidence = tuple(Evidence(t.group.id, t.group.round, t.group.members, t.outcome)
                                 for t in ex.implicated[p])
                findings.append(Finding(p.kind, p.name, self._nodes_of(p), evidence, confidence(len(ex.support[p]))))
        cleared = frozenset(p.key[0] for p in ex.cleared if p.kind == "node")
        named = {n for f in findings if f.kind == "node" for n in f.nodes}
        doubted = {p for group in suspects for p in group}
        blamed = {p.key[0] for p in (*ex.chosen, *doubted) if p.kind == "node"}
        return Verdicts(
            rounds=self._rounds, tests=len(self._tests), findings=tuple(findings),
            suspects=() if every_failed else tuple(tuple(group) for group in suspects),
            unexplained=tuple(t.group.id for t in ex.unexplained), cleared=cleared,
            untested=tuple(n for n in self.nodes if n not in cleared and n not in named),
            every_test_failed=every_failed,
            measured=frozenset(n for t in self._tests if t.outcome is not None for n in t.group.members),
            masked=tuple(sorted(p.key[0] for p in ex.open_parts if p.kind == "switch" and p not in ex.chosen
                                and p not in doubted)),
            never_crossed=tuple(sorted(self._never_crossed())),
            # a link only failed groups sent over, none of it blamed: not one whose end is a named or suspect
            # node (no test of it can pass while that node is bad; the node's item fails)
            untested_links=tuple(sorted(p.name for p in ex.open_parts if p.kind == "link" and p not in ex.chosen
                                        and p not in doubted and not blamed & set(p.key))),
            no_result=tuple(Evidence(t.group.id, t.group.round, t.group.members, None)
                            for t in self._tests if t.outcome is None))

    # -- internals ---------------------------------------------------------------------------
    def _never_crossed(self) -> list[str]:
        """Switches whose uplink no test that gave a result crossed: in a three-level tree, screening rings of
        whole leaves under one spine switch cross no uplink above it, and all passing cleared nothing there."""
        crossed = {p.key[0] for t in self._tests if t.outcome is not None for p in t.parts if p.kind == "switch"}
        return [s for s in self._below if s not in crossed]

    def _every_test_failed(self) -> bool:
        """Nothing passed, and two failed groups share no node: no single part explains it all. Any two, not
        the first against the rest: a screening ring over every node meets every later group. The scan ends
        at the first disjoint pair, and a round's groups are disjoint, so it is long only when every round
        had a single group (a few tests)."""
        if not self._tests or any(t.passed for t in self._tests):
            return False
        groups = [frozenset(t.group.members) for t in self._tests if t.outcome is not None]  # measured ones
        return any(not a & b for i, a in enumerate(groups) for b in groups[i + 1:])

    def _passed(self, g: Group, outcome: Outcome) -> bool:
        if outcome is None or isinstance(outcome, bool):
            return bool(outcome)
        if self.threshold is None:
            raise UserError(f"group {g.id}: a bandwidth needs a threshold (Planner(threshold=...)), "
                            "or report True/False")
        return self.passes(outcome)

    def passes(self, outcome: Outcome) -> bool:
        """True, or a bandwidth (finite, >= 0) at or above the threshold."""
        value = usable(outcome)
        if value is None or isinstance(value, bool):
            return bool(value)
        return self.threshold is not None and value >= self.threshold

    def _marginal(self, outcome: Outcome) -> bool:
        """A bandwidth under the threshold by less than `marginal` of it (a dead group, or a plain
        failed, says more than that)."""
        value = usable(outcome)
        if self.threshold is None or value is None or isinstance(value, bool):
            return False
        return value >= self.threshold * (1 - self.marginal)

    def _weak(self, p: Part, ex: Explanation) -> bool:
        """Too little to name `p`: a node that failed with fewer than two distinct partners on readings noise
        does not make (one partner's fault, or one transient, reads the same); with `confirm`, any part with
        fewer than two such readings; else a link or uplink with none. One marginal reading beside them is
        noise a large run makes; two or more (distinct partners, for a node) are a part just under the floor."""
        far, near = readings(p, ex, self._marginal)
        return far < (2 if p.kind == "node" or self.confirm else 1) and near < 2

    def _nodes_of(self, p: Part) -> tuple[str, ...]:
        """A node or link: its nodes; a switch uplink: the nodes below that switch (whose path up crosses it).
        Not those whose path shares a switch above it: under one spine that is every node."""
        if p.kind != "switch":
            return p.key
        return tuple(n for n in self.nodes if p.key[0] in self.topology.up(self.topology.leaf(n)))

    def _failed_rings(self) -> list[Ring]:
        return [ring for ring, t in zip(self.rings, self._tests) if not t.passed]

    def _plan(self, r: int) -> list[Group]:
        if r == 1:
            return [Group(f"r1-g{i}", 1, ring.members, "screen") for i, ring in enumerate(self.rings)]
        ex = self.explanation()
        b = Builder(self.topology, self.nodes, self._tests, r, ex)
        rings = self._failed_rings()
        if r == 2:
            for ring in rings:
                if len(ring.members) == 2:
                    continue  # the pair itself was the screening test
                for chain in ring.chains:
                    for i in range(0, len(chain) - 1, 2):
                        b.add((chain[i], chain[i + 1]), "pair")
                    if len(chain) % 2:
                        b.with_helper(chain[-1], "helper")
        elif r == 3:
            suspects = {n for t in self._tests if t.group.round == 2 and not t.passed for n in t.group.members}
            suspects -= {p.key[0] for p in ex.cleared if p.kind == "node"}
            ends: list[str] = []
            for ring in rings:
                for chain in ring.chains:
                    for i in range(1, len(chain) - 1, 2):
                        u, v = chain[i], chain[i + 1]
                        if u in suspects and v in suspects:  # give each a partner known to be good
                            b.reserve(u, v)
                        else:
                            b.add((u, v), "pair")
                if len(ring.chains) > 1:
                    ends += [e for chain in ring.chains for e in dict.fromkeys((chain[0], chain[-1]))]
                elif len(ring.members) > 2:
                    b.add((ring.members[-1], ring.members[0]), "wrap")
            b.reserve(*(e for e in ends if e not in b.busy))
            for n in list(b.reserved):
                b.with_helper(n, "helper" if n in suspects else "probe", other_leaf=n not in suspects)
        got = {frozenset(t.group.members) for t in self._tests if t.outcome is not None}
        for t in self._tests:  # a pair that gave no result runs again: it alone may contradict the explanation
            if t.outcome is None and len(t.group.members) == 2 and frozenset(t.group.members) not in got:
                b.add(t.group.members, "retest")
        self._resolve(b, ex, last=r > 3)
        self._cross(b, ex)
        b.pair_orphans()
        return b.groups

    def _resolve(self, b: Builder, ex: Explanation, last: bool) -> None:
        """Test apart what the evidence left tied, and nodes hidden behind others' failures; from round 4
        on, test again each named part that only one failed test points at alone: all of them with
        `confirm`, else those whose one reading was marginal."""
        cleared_nodes = {p.key[0] for p in ex.cleared if p.kind == "node"}
        chosen = set(ex.chosen)
        targets: list[Part] = [p for group in ex.suspects for p in group]
        targets += list(ex.entangled)  # chosen partly by the greedy order: judged again on new partners
        targets += sorted(p for p in ex.open_parts if p.kind == "node" and p not in chosen)
        # a link only failed groups sent over, each explained by another part (a bad node beside each end took
        # both ends to helpers in round 3): once both ends are cleared it runs alone, as every chain edge does
        targets += sorted(p for p in ex.open_parts if p.kind == "link" and p not in chosen
                          and cleared_nodes.issuperset(p.key))
        if last:
            targets += [p for p in ex.chosen if self._weak(p, ex)]
            # an uplink only failed groups crossed, each explained by another part: probe it apart
            targets += sorted(p for p in ex.open_parts if p.kind == "switch" and p not in chosen)
        # nodes first: a switch probe takes two cleared helpers, and a node left without one stays a suspect
        for p in sorted(dict.fromkeys(targets), key=lambda p: p.kind != "node"):
            if p.kind == "node":
                b.with_helper(p.key[0], "helper")
            elif p.kind == "link":
                u, v = p.key
                if u in cleared_nodes and v in cleared_nodes:
                    b.add((u, v), "retest")
                else:
                    b.with_helper(u, "helper")
                    b.with_helper(v, "helper")
            else:  # a helper outside the switch: the pair crosses its uplink (for a leaf: any other leaf)
                under = [n for n in self._below.get(p.key[0], ()) if n in cleared_nodes]
                for n in under[:2]:
                    b.with_helper(n, "probe", other_leaf=True, away=p.key[0])

    def _cross(self, b: Builder, ex: Explanation) -> None:
        """Two pairs across each uplink no test crossed yet, each a cleared idle node below its switch with a
        cleared helper outside it (two readings: `confirm` names nothing from one). A pair across two top-level
        subtrees crosses every uplink on its way and counts for each; its helper comes from the leaf whose
        uplinks were crossed least, so that three subtrees or more meet in different pairs and tell one slow
        uplink from the others."""
        cleared = {p.key[0] for p in ex.cleared if p.kind == "node"}
        never = self._never_crossed()
        crossings = dict.fromkeys(never, 0)
        up = self.topology.up
        for s in never:
            for n in self._below[s]:
                if crossings[s] >= 2:
                    break
                if n not in cleared or n in b.busy:
                    continue
                outside = sorted((leaf for leaf in self._under if s not in up(leaf)),
                                 key=lambda leaf: sum(crossings.get(x, 0) for x in up(leaf)))
                if h := b.across(n, outside):
                    for c in self.topology.crossed(n, h):
                        crossings[c] = crossings.get(c, 0) + 1


__all__ = ["Planner", "Ring", "screen_rings"]
