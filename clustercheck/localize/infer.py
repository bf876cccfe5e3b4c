"""From tests to the fewest faulty parts that explain every failure.

A test that gave no result (outcome None) is no evidence either way. A passing test clears every part it exercised (model.py: its bandwidth is the minimum over them). What
is left of a failed test are its candidates; the explanation picks parts until each failed test holds
one (a hitting set), taking first any part that is the only candidate of some test, then the part in
the most open failed tests. Two parts that sit in exactly the same failed tests cannot be told apart
by them: both are left as suspects (never blamed) and the planner tests them apart in the next round; so is
a chosen part that an explanation as short could do without (`_replaceable`).
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from dataclasses import dataclass
from typing import Callable, Iterable

from clustercheck.localize.model import Group, Outcome, Part

SPURIOUS = 0.05  # chance that one failed test is a transient or noise: Finding.confidence = 1 - SPURIOUS**n
_RANK = {"node": 0, "switch": 1, "link": 2}  # between otherwise equal candidates: the likelier fault first


@dataclass(frozen=True)
class Test:
    group: Group
    parts: frozenset[Part]
    outcome: Outcome
    passed: bool


@dataclass(frozen=True)
class Explanation:
    cleared: frozenset[Part]
    chosen: tuple[Part, ...]
    support: dict[Part, tuple[Test, ...]]  # per chosen part: the failed tests it alone explains
    implicated: dict[Part, tuple[Test, ...]]  # per chosen part: every failed test that holds it
    suspects: tuple[tuple[Part, ...], ...]
    unexplained: tuple[Test, ...]
    open_parts: frozenset[Part]  # uncleared parts of failed tests (chosen, suspect or masked)
    # chosen parts that an explanation as short could do without (_entangled): the index of the suspect
    # group each is tied to, and the parts that could stand in for it. Tested again next round, and
    # never blamed while tied.
    entangled: dict[Part, tuple[int, tuple[Part, ...]]]


def explain(tests: list[Test]) -> Explanation:
    cleared = frozenset().union(*(t.parts for t in tests if t.passed))
    failed = [t for t in tests if not t.passed and t.outcome is not None]  # no result: no evidence
    cands = {i: t.parts - cleared for i, t in enumerate(failed)}
    unexplained = tuple(failed[i] for i, c in cands.items() if not c)
    of_part: dict[Part, set[int]] = defaultdict(set)  # part -> failed tests (all of them) that hold it
    for i, c in cands.items():
        for p in c:
            of_part[p].add(i)
    chosen: list[Part] = []
    suspects: list[tuple[Part, ...]] = []
    for component in _components({i: c for i, c in cands.items() if c}, of_part):
        cover = _Cover(component, of_part)
        picked, tied = cover()
        kept, replaceable = _replaceable(cover, _prune(picked, of_part), len(tied))
        chosen += kept
        suspects += _merged(tied + replaceable)
    support: dict[Part, tuple[Test, ...]] = {}
    implicated: dict[Part, tuple[Test, ...]] = {}
    chosen_set = set(chosen)
    alone: dict[Part, list[int]] = {}
    for p in chosen:
        implicated[p] = tuple(failed[i] for i in sorted(of_part[p]))
        alone[p] = [i for i in sorted(of_part[p]) if not (cands[i] & chosen_set) - {p}]
        support[p] = tuple(failed[i] for i in alone[p])
    open_parts = frozenset().union(*cands.values()) if cands else frozenset()
    return Explanation(cleared, tuple(chosen), support, implicated, tuple(suspects), unexplained, open_parts,
                       _entangled(alone, cands, suspects))


def _entangled(alone: dict[Part, list[int]], cands: dict[int, frozenset[Part]],
               suspects: list[tuple[Part, ...]]) -> dict[Part, tuple[int, tuple[Part, ...]]]:
    """Chosen parts that an explanation as short could do without: one of the failed tests a part alone
    explains also holds a suspect, and the others (if any) share another candidate that could stand in
    for it. Two bad nodes u, v of one round-2 pair: u's tests are (u, v) and (w, u), so {link w-u, v}
    is as short as {u, v}."""
    group_of = {q: k for k, group in enumerate(suspects) for q in group}
    out: dict[Part, tuple[int, tuple[Part, ...]]] = {}
    for p, tests in alone.items():
        touching = [group_of[q] for i in tests for q in sorted(cands[i] & group_of.keys())]
        if not touching:
            continue
        rest = [cands[i] - {p} for i in tests if not cands[i] & group_of.keys()]
        stand_ins = frozenset.intersection(*rest) if rest else frozenset()
        if not rest or stand_ins:
            out[p] = (touching[0], tuple(sorted(stand_ins)))
    return out


def _replaceable(cover: _Cover, chosen: list[Part], tied: int) -> tuple[list[Part], list[tuple[Part, ...]]]:
    """Split a cluster's chosen parts into those every explanation as short needs and the others, each of
    those with the parts that stand in for it (a suspect group, never blamed). The greedy cover takes one of
    two equally short explanations by its order alone: a bad node h0 and a slow uplink L2 fail the same
    tests as h1 and L1 when each node met the other leaves once. So each chosen part is forbidden in turn:
    if the cover then finds an explanation no larger (a tied suspect group counts as one part), the part is
    replaceable."""
    size = len(chosen) + tied
    kept: list[Part] = []
    replaceable: list[tuple[Part, ...]] = []
    for p in chosen:
        if any(len(cover.cands[i]) == 1 for i in cover.of_part[p]):  # the only candidate of a test: none lacks it
            kept.append(p)
            continue
        alt, alt_tied = cover(without=p)
        alt = _prune(alt, cover.of_part)
        if len(alt) + len(alt_tied) > size:
            kept.append(p)
            continue
        stand_ins = dict.fromkeys(q for q in [*alt, *(q for g in alt_tied for q in g)] if q not in chosen)
        replaceable.append((p, *sorted(stand_ins, key=_key)))
    return kept, replaceable


def _merged(groups: list[tuple[Part, ...]]) -> list[tuple[Part, ...]]:
    """Suspect groups that share a part are one tie, however many parts it spans: a group takes in each
    earlier one it meets, in their order, and the tie goes last. Which tie holds a part is kept by part:
    scanning every tie for each group was quadratic (hundreds of ties with every test failed)."""
    out: dict[int, dict[Part, None]] = {}  # the ties so far, in order (a new one is added last)
    tie_of: dict[Part, int] = {}
    for n, group in enumerate(groups):
        parts = dict.fromkeys(group)
        for k in sorted({tie_of[q] for q in parts if q in tie_of}):
            parts.update(out.pop(k))
        out[n] = parts
        for q in parts:
            tie_of[q] = n
    return [tuple(parts) for parts in out.values()]


def readings(p: Part, ex: Explanation, marginal: Callable[[Outcome], bool]) -> tuple[int, int]:
    """How many independent failed readings name `p` alone, as (far under the threshold, just under it): for
    a node, its distinct partners; for a link or an uplink, its tests. A screening ring of three or more
    repeats what its pairs read (a pair inside it is no second reading); a test with a partner that is
    itself chosen or a suspect says nothing of `p` alone; a reading just under the threshold (`marginal`) is
    one noise makes in a large run, and is counted apart."""
    doubtful = {q.key[0] for q in (*ex.chosen, *(q for g in ex.suspects for q in g)) if q.kind == "node"}
    doubtful.discard(p.key[0])
    tests = [t for t in ex.support[p] if (t.group.purpose != "screen" or len(t.group.members) == 2)
             and not doubtful & set(t.group.members)]
    out = []
    for low in (False, True):
        some = [t for t in tests if marginal(t.outcome) is low]
        out.append(len({m for t in some for m in t.group.members} - set(p.key)) if p.kind == "node" else len(some))
    return out[0], out[1]


def _components(open_: dict[int, frozenset[Part]], of_part: dict[Part, set[int]]) -> list[dict[int, frozenset[Part]]]:
    """Failed tests linked by a shared candidate: each such cluster is explained on its own."""
    seen: set[int] = set()
    out = []
    for start in open_:
        if start in seen:
            continue
        seen.add(start)
        stack, comp = [start], {}
        while stack:
            i = stack.pop()
            comp[i] = open_[i]
            for p in open_[i]:
                for j in of_part[p]:
                    if j not in seen and j in open_:
                        seen.add(j)
                        stack.append(j)
        out.append(comp)
    return out


class _Cover:
    """Greedy hitting set of one cluster: forced parts first, then the part in the most open tests; called
    again less each chosen part (`_replaceable`). Counts of open tests are kept as tests close, with a
    max-heap checked lazily (an entry whose count fell is pushed again): rebuilding every count for each
    pick, and again for each part left out, took minutes with every test failed. What does not depend on
    the part left out (counts, heap, forced parts) is built once."""

    def __init__(self, cands: dict[int, frozenset[Part]], of_part: dict[Part, set[int]]) -> None:
        self.cands = cands
        self.of_part = of_part
        self.count: dict[Part, int] = defaultdict(int)  # part -> tests that hold it
        for c in cands.values():
            for q in c:
                self.count[q] += 1
        # most open tests, most failed tests, likelier kind, then _key: heapq's least is the greedy's pick
        self.heap = [(-n, -len(of_part[q]), _RANK[q.kind], _key(q), q) for q, n in self.count.items()]
        heapq.heapify(self.heap)
        # a test's candidates never change while it is open, so the forced parts are known at once, and
        # taking one closes no other's test: they come first, in _key order
        self.forced = {next(iter(c)) for c in cands.values() if len(c) == 1}

    def __call__(self, without: Part | None = None) -> tuple[list[Part], list[tuple[Part, ...]]]:
        """The parts chosen and the suspect groups, as if no test held `without` (never one's only candidate)."""
        cands, count, heap, chosen = self.cands, dict(self.count), list(self.heap), []
        suspects: list[tuple[Part, ...]] = []
        forced = set(self.forced)
        if without is not None:
            forced.update(q for i in self.of_part[without] if len(cands[i]) == 2 for q in cands[i] - {without})
        left = set(cands)

        def close(tests: Iterable[int]) -> None:
            for i in tests:
                if i in left:
                    left.remove(i)
                    for q in cands[i]:
                        count[q] -= 1

        for pick in sorted(forced, key=_key):
            chosen.append(pick)
            close(self.of_part[pick])
        while left:
            n, total, rank, key, best = heapq.heappop(heap)
            if best == without:
                continue
            if count[best] != -n:
                if count[best]:
                    heapq.heappush(heap, (-count[best], total, rank, key, best))
                continue
            live = [i for i in self.of_part[best] if i in left]
            # the same open tests: failures that other parts already explain say nothing about either,
            # and the kind alone does not tell them apart (a one-node leaf's node and its uplink). Such a
            # part is in every one of them, and in no other open test.
            same = frozenset.intersection(*(cands[i] for i in live)) - {best, without}
            tied = [q for q in same if count[q] == len(live)]
            if tied:  # indistinguishable on the evidence: leave them to the next round
                suspects.append((best, *sorted(tied, key=_key)))
            else:
                chosen.append(best)
            close(live)
        return chosen, suspects


def _key(p: Part) -> tuple[str, tuple[str, ...]]:
    return (p.kind, p.key)


def _prune(chosen: list[Part], of_part: dict[Part, set[int]]) -> list[Part]:
    """Drop a chosen part whose every failed test another chosen part also explains (latest first)."""
    hits: dict[int, int] = defaultdict(int)
    for p in chosen:
        for i in of_part[p]:
            hits[i] += 1
    keep = list(chosen)
    for p in reversed(chosen):
        if all(hits[i] > 1 for i in of_part[p]):
            keep.remove(p)
            for i in of_part[p]:
                hits[i] -= 1
    return keep


def confidence(n: int) -> float:
    return round(1 - SPURIOUS ** n, 6) if n else 0.0
