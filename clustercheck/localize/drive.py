"""The planner's rounds on real measurements, without the session.

`drive()` asks the planner for a round, hands its node groups to the caller's `run` (which measures
them all at once and returns one outcome per group, in order), records the outcomes and repeats until
the planner is done. On the rank pool, `run` is three steps: `rank_groups()` turns node groups into
the pool's groups of global ranks, `pool.run(...)` measures them, and `group_outcomes()` gives each
group one outcome from its ranks' answers (None where a rank gave none or its rows cannot be judged: no
result, neither a pass nor a failure).
tests/test_netns.py drives it over network namespaces with one throttled link.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping, Sequence

from clustercheck import units
from clustercheck.errors import HarnessError, UserError, show
from clustercheck.formulas import bandwidths
from clustercheck.judging.rows import check_rows
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
                   value: Callable[..., Outcome], hosts: Mapping[int, str] | None = None,
                   said: dict[int, str] | None = None) -> list[Outcome]:
    """One outcome per group of ranks: `value(its ranks' answers, a label for each)`, or None when any of
    its ranks gave none (it died, hung or raised: a RankFailure's `answered` holds the others) or when
    `value` could not read their answers (a HarnessError: rows missing or out of step, a broken timer), as
    for a crashed rank: no result, which clears and blames nobody; `said[i]` gets why for group i.
    `hosts`: a global rank's node, for the labels."""
    out: list[Outcome] = []
    for i, g in enumerate(groups):
        if not all(r in answers for r in g):
            out.append(None)
            continue
        labels = [f"pool rank {r}" + (f" on {hosts[r]}" if hosts and r in hosts else "") for r in g]
        try:
            out.append(value([answers[r] for r in g], labels))
        except HarnessError as exc:  # never out of the round: one group's answers are not the others'
            out.append(None)
            if said is not None:
                said[i] = str(exc)
    return out


def all_reduce_busbw(answers: list[dict[str, Any]], hosts: Sequence[str] = (), judge_at: int | None = None,
                     checked: bool = True) -> Outcome:
    """A group's all_reduce bus bandwidth in GB/s at `judge_at` (the check's judged size in bytes, which
    is an all_reduce row's `size`; None: the largest it ran), the worse placement's (nccl-tests arithmetic:
    clustercheck.formulas); False when a rank counted a wrong element at any size (a failure whatever the
    speed: the group scope's `wrong` sums every row too). HarnessError (`hosts`: each rank's label) when the
    answers cannot be judged: rows check_rows refuses (none, a rank short of one or out of order, a broken
    timer), no row at `judge_at`, or a `wrong` that is no count where elements were compared (`checked`; with
    check_iters: 0 each row's `wrong` is None and means nothing)."""
    check_rows(answers, hosts)  # first: a rank's rows are paired with the others' by position
    rows = answers[0]["rows"]
    wrongs = [(i, row) for i, a in enumerate(answers) for row in a["rows"]] if checked else []
    if any(units.is_count(row.get("wrong")) and row["wrong"] > 0 for _, row in wrongs):
        return False
    for i, row in wrongs:
        if not (units.is_count(row.get("wrong")) and row["wrong"] >= 0):
            raise HarnessError(f"rank {i} ({hosts[i] if i < len(hosts) else 'no host'}) answered wrong "
                               f"{show(row.get('wrong'), 20)} at {_size(row.get('size'))}: no count of wrong elements")
    sizes = [row["size"] for row in rows]
    if not all(units.is_count(z) and units.is_count(row.get("bytes")) for z, row in zip(sizes, rows)):
        raise HarnessError(f"rows at {', '.join(map(_size, sizes))}: a size or byte count that is no count")
    size = max(sizes) if judge_at is None else judge_at
    at = [j for j, z in enumerate(sizes) if z == size]
    if not at:  # never another size instead: the floor was written for this one
        raise HarnessError(f"no row at the judged size {_size(size)} "
                           f"(rows at {', '.join(map(_size, dict.fromkeys(sizes)))})")
    busbw = [bandwidths("all_reduce", rows[j]["bytes"], [a["rows"][j]["seconds"] for a in answers])[2] for j in at]
    worst = min(busbw, key=lambda b: (math.isfinite(b), b))  # a NaN or an infinity is the worst: no reading
    # NaN: a rank's time was not a positive number; an infinity: a time too small to be one
    return worst if math.isfinite(worst) and worst >= 0 else None


def _size(size: Any) -> str:
    return units.format_size(size) if units.is_count(size) else show(size, 20)
