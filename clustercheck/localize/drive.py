"""The planner's rounds on real measurements, without the session.

`drive()` asks the planner for a round, hands its node groups to the caller's `run` (which measures
them all at once and returns one outcome per group, in order), records the outcomes and repeats until
the planner is done. On the rank pool, `run` is three steps: `rank_groups()` turns node groups into
the pool's groups of global ranks, `pool.run(...)` measures them, and `group_outcomes()` gives each
group one outcome from its ranks' answers (None where a rank gave none: no result, neither a pass nor a
failure).
tests/test_netns.py drives it over network namespaces with one throttled link.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping, Sequence

from clustercheck.errors import HarnessError, UserError
from clustercheck.formulas import bandwidths
from clustercheck.localize.model import Group, Outcome, Verdicts
from clustercheck.localize.planner import Planner

Run = Callable[[list[tuple[str, ...]]], Sequence[Outcome]]


def drive(planner: Planner, run: Run, on_round: Callable[[list[Group], list[Outcome]], None] | None = None) -> Verdicts:
    """Run the planner's rounds with `run` until it is done; its verdicts. `on_round` sees each round's
    groups and outcomes (for a log or a report)."""
    while groups := planner.next_round():
        outcomes = list(run([g.members for g in groups]))
        if len(outcomes) != len(groups):
            raise HarnessError(f"round {groups[0].round}: {len(outcomes)} outcome(s) for {len(groups)} group(s)")
        planner.record({g.id: v for g, v in zip(groups, outcomes)})
        if on_round is not None:
            on_round(groups, outcomes)
    return planner.verdicts()


def rank_groups(groups: Sequence[Sequence[str]], ranks_of: Mapping[str, Sequence[int]]) -> list[list[int]]:
    """Each node group as global ranks: its nodes in members order, each node's ranks consecutive.

    A ring of three nodes or more must be in ascending rank order: torch's new_group sorts a group's
    ranks, and gloo's and NCCL's rings follow the group's rank order, so a ring out of that order would
    send over other links than the planner reasons about. The planner's only such rings are its
    screening rings, consecutive in its node order: give it the nodes in the pool's rank order."""
    out = []
    for members in groups:
        missing = [m for m in members if not ranks_of.get(m)]
        if missing:
            raise UserError(f"node(s) without a rank in this pool: {', '.join(missing)}")
        ranks = [r for m in members for r in ranks_of[m]]
        if len(members) > 2 and ranks != sorted(ranks):
            raise UserError(f"ring {', '.join(members)} is not in the pool's rank order; pass the planner the "
                            "nodes in rank order")
        out.append(ranks)
    return out


def group_outcomes(groups: Sequence[Sequence[int]], answers: Mapping[int, Any],
                   value: Callable[[list[Any]], Outcome]) -> list[Outcome]:
    """One outcome per group of ranks: `value` of its ranks' answers, or None when any of its ranks gave
    none (it died, hung or raised: a RankFailure's `answered` holds the others)."""
    return [value([answers[r] for r in g]) if all(r in answers for r in g) else None for g in groups]


def all_reduce_busbw(answers: list[dict[str, Any]]) -> Outcome:
    """A group's all_reduce bus bandwidth in GB/s at the largest size it ran (nccl-tests arithmetic:
    clustercheck.formulas); False when an element came back wrong (a failure whatever the speed)."""
    rows = [max(a["rows"], key=lambda row: row["size"]) for a in answers]
    if any(row["wrong"] for row in rows):
        return False
    busbw = bandwidths("all_reduce", rows[0]["bytes"], [row["seconds"] for row in rows])[2]
    # NaN: a rank's time was not a positive number; an infinity: a time too small to be one
    return busbw if math.isfinite(busbw) and busbw >= 0 else None
