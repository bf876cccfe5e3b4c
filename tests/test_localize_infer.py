"""Inference's greedy cover kept by counts and a lazy heap (clustercheck/localize/infer.py) picks exactly what
its definition picks: forced parts first in name order, then the part in the most open failed tests (most
failed tests, likelier kind, name), parts with the same open tests left tied. The definition is written
out here the plain way (every count rebuilt for each pick, as infer.py did before it took minutes with
every test failed) and both are run on seeded random clusters, each part also left out in turn as
`_replaceable` does. Timing is benchmarks/localize_dense.py's, in docs/benchmarks.md."""

from __future__ import annotations

import random
from collections import defaultdict

from clustercheck.localize.infer import _RANK, _Cover, _key, _merged
from clustercheck.localize.model import Part


def _definition(cands: dict[int, frozenset[Part]],
                of_part: dict[Part, set[int]]) -> tuple[list[Part], list[tuple[Part, ...]]]:
    open_, chosen, suspects = dict(cands), [], []
    while open_:
        forced = [next(iter(c)) for c in open_.values() if len(c) == 1]
        if forced:
            pick = min(forced, key=_key)
        else:
            live = {p: frozenset(of_part[p] & open_.keys()) for c in open_.values() for p in c}
            ordered = sorted(live, key=_key)
            best = max(ordered, key=lambda p: (len(live[p]), len(of_part[p]), -_RANK[p.kind]))
            tied = [p for p in ordered if p != best and live[p] == live[best]]
            if tied:
                suspects.append((best, *tied))
                for i in live[best]:
                    open_.pop(i)
                continue
            pick = best
        chosen.append(pick)
        for i in of_part[pick]:
            open_.pop(i, None)
    return chosen, suspects


def _cluster(rng: random.Random) -> dict[int, frozenset[Part]]:
    nodes = [f"h{i}" for i in range(rng.randint(2, 14))]
    parts = [Part("node", (n,)) for n in nodes] + [Part("switch", (f"s{i}",)) for i in range(rng.randint(0, 3))]
    parts += [Part("link", (a, b)) for i, a in enumerate(nodes) for b in nodes[i + 1:] if rng.random() < 0.3]
    return {i: frozenset(rng.sample(parts, rng.randint(1, min(len(parts), rng.choice([2, 3, 5, 8])))))
            for i in range(rng.randint(1, 30))}


def test_the_counted_cover_picks_what_its_definition_picks_and_so_does_each_part_left_out() -> None:
    rng = random.Random(20261129)
    compared = tied = 0
    for _ in range(600):
        cands = _cluster(rng)
        of_part: dict[Part, set[int]] = defaultdict(set)
        for i, c in cands.items():
            for p in c:
                of_part[p].add(i)
        cover = _Cover(cands, of_part)
        assert cover() == _definition(cands, of_part)
        for p in sorted(of_part, key=_key):
            if any(len(cands[i]) == 1 for i in of_part[p]):
                continue  # an only candidate: _replaceable keeps it without a cover
            without = {i: c - {p} for i, c in cands.items()}
            got, expected = cover(without=p), _definition(without, of_part)
            assert got == expected, p
            compared += 1
            tied += bool(expected[1])
    assert compared > 1000 and tied > 300  # the draws reach ties and parts left out, not only easy covers


def _merged_definition(groups: list[tuple[Part, ...]]) -> list[tuple[Part, ...]]:
    out: list[tuple[Part, ...]] = []
    for group in groups:
        parts = dict.fromkeys(group)
        for other in [g for g in out if parts.keys() & set(g)]:
            out.remove(other)
            parts.update(dict.fromkeys(other))
        out.append(tuple(parts))
    return out


def test_ties_that_share_a_part_merge_in_the_order_the_definition_gives() -> None:
    rng = random.Random(7)
    pool = [Part("node", (f"h{i}",)) for i in range(40)]
    for _ in range(300):
        groups = [tuple(rng.sample(pool, rng.randint(1, 4))) for _ in range(rng.randint(0, 25))]
        assert _merged(groups) == _merged_definition(groups)
