"""Pairing strategies for scope `pair`: which node pairs run, and which run at the same time."""

from __future__ import annotations

import random
from typing import Mapping


def all_pairs_in_rounds(nodes: list[str]) -> list[list[tuple[str, str]]]:
    """Every pair exactly once, in rounds of disjoint pairs (the circle method of a round-robin
    tournament): n-1 rounds for an even count, n for an odd one (each node sits out once)."""
    ring: list[str | None] = list(nodes) + ([None] if len(nodes) % 2 else [])
    position = {n: i for i, n in enumerate(nodes)}  # once: a list lookup per pair made this cubic in n
    rounds: list[list[tuple[str, str]]] = []
    for _ in range(len(ring) - 1):
        half = len(ring) // 2
        pairs = [(a, b) for a, b in zip(ring[:half], reversed(ring[half:])) if a is not None and b is not None]
        rounds.append([_ordered(a, b, position) for a, b in pairs])
        ring = [ring[0], ring[-1], *ring[1:-1]]
    return rounds


def random_disjoint_pairs(nodes: list[str], seed: int) -> list[list[tuple[str, str]]]:
    """One round of random disjoint pairs (an odd node out sits this one out); reproducible by seed."""
    shuffled = list(nodes)
    random.Random(seed).shuffle(shuffled)
    position = {n: i for i, n in enumerate(nodes)}
    return [[_ordered(shuffled[i], shuffled[i + 1], position) for i in range(0, len(shuffled) - 1, 2)]]


def _ordered(a: str, b: str, position: Mapping[str, int]) -> tuple[str, str]:
    """A pair in the order its nodes were given (`position`: node -> its index), so that its name is the
    same whoever sits first."""
    return (a, b) if position[a] < position[b] else (b, a)


def schedule(strategy: str, nodes: list[str], seed: int = 0) -> list[list[tuple[str, str]]]:
    if strategy == "rounds":
        return all_pairs_in_rounds(nodes)
    if strategy == "random":
        return random_disjoint_pairs(nodes, seed)
    raise ValueError(f"unknown pairing strategy {strategy!r}")


def pair_name(pair: tuple[str, str]) -> str:
    return f"{pair[0]},{pair[1]}"
