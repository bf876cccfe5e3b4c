"""Pair scheduling for scope `pair` (clustercheck/run/pairs.py): the circle method's schedule, and that
building it compares node names a number of times linear in the pairs (it looked up each pair's nodes in
the list, so 1,024 nodes took 10 s and the pair check builds it three times)."""

from __future__ import annotations

from itertools import combinations

from clustercheck.run.pairs import all_pairs_in_rounds, random_disjoint_pairs, schedule


class Name(str):
    """A node name that counts how often it is compared for equality (a list lookup compares; a dict
    lookup of the same object does not)."""

    compared = 0

    def __eq__(self, other: object) -> bool:
        Name.compared += 1
        return str.__eq__(self, other)

    __hash__ = str.__hash__


def test_the_schedule_is_the_circle_method_in_the_given_order() -> None:
    assert all_pairs_in_rounds(["a", "b", "c", "d"]) == [
        [("a", "d"), ("b", "c")], [("a", "c"), ("b", "d")], [("a", "b"), ("c", "d")]]
    assert all_pairs_in_rounds(["a", "b", "c", "d", "e"]) == [
        [("b", "e"), ("c", "d")], [("a", "e"), ("b", "c")], [("a", "d"), ("c", "e")],
        [("a", "c"), ("b", "d")], [("a", "b"), ("d", "e")]]
    assert random_disjoint_pairs(["a", "b", "c", "d", "e"], 3) == [[("a", "c"), ("d", "e")]]
    assert schedule("rounds", ["x", "y"]) == [[("x", "y")]]


def test_every_pair_once_in_disjoint_rounds_each_in_the_given_order() -> None:
    for n in (2, 3, 8, 9):
        nodes = [f"n{i:02d}" for i in range(n)][::-1]  # given order is not the sorted one
        rounds = all_pairs_in_rounds(nodes)
        pairs = [p for r in rounds for p in r]
        assert sorted(pairs) == sorted(combinations(nodes, 2))  # each pair once, in the given order
        for r in rounds:
            assert len({n for p in r for n in p}) == 2 * len(r)  # disjoint


def test_building_the_schedule_compares_names_linearly_in_the_pairs() -> None:
    nodes: list[str] = [Name(f"node{i:03d}") for i in range(64)]
    Name.compared = 0
    rounds = all_pairs_in_rounds(nodes)
    pairs = sum(map(len, rounds))
    assert pairs == 64 * 63 // 2
    # a list lookup per pair compares each name with about half the list: 2 x 2,016 x 32 = 129,024
    assert Name.compared <= 2 * pairs, f"{Name.compared} name comparisons for {pairs} pairs"
    Name.compared = 0
    random_disjoint_pairs(nodes, 1)
    assert Name.compared <= len(nodes)
