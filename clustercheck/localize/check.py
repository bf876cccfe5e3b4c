"""`scope: localize` on an all_reduce check: the planner's rounds (clustercheck/localize/planner.py) run
on the run's rank pool, each round's groups at once, until the planner is done; then one outcome per
node (failed when the planner names it, passed when a passing test cleared it, an error when it could
tell neither: a suspect or an untested node is never passed) and one for the whole cluster (failed for
each link or switch uplink it names). The group floor is the check's busbw limit from the profile.
Controller side: no torch."""

from __future__ import annotations

from functools import partial
from typing import Any, Callable, Mapping

from clustercheck.localize.drive import all_reduce_busbw, drive, group_outcomes, rank_groups
from clustercheck.localize.model import Evidence, Group, Outcome as GroupOutcome, Verdicts, usable
from clustercheck.localize.planner import Planner
from clustercheck.localize.topology import Topology
from clustercheck.judging.verdicts import Expectation, Verdict
from clustercheck.units import convert

SOURCE = "clustercheck's localization (docs/localize.md): screening rings, pair splits, confirmation with known-good partners"

RunGroups = Callable[[list[list[int]]], Mapping[int, Any]]


def localize(nodes: list[str], ranks_of: Mapping[str, list[int]], threshold: float, run: RunGroups,
             check_id: str, max_rounds: int = 4, topology: Topology | None = None, unit: str = "GB/s",
             judge_at: int | None = None, checked: bool = True
             ) -> tuple[dict[str | None, tuple[list[Verdict], str]], list[dict[str, Any]]]:
    """Drive the planner with `run` (global rank groups -> each rank's answer; a rank that gave none is
    missing, or answers with why: an exception) against the floor `threshold` in `unit` (a bandwidth unit: the rounds measure GB/s). Returns,
    per item (a node, None for the cluster), its verdicts and a message, and the rounds as rows for the
    record (busbw in GB/s). `judge_at` and `checked` (check_iters > 0): the check's, for each group's rows
    (drive.all_reduce_busbw)."""
    order = sorted(nodes, key=lambda n: min(ranks_of.get(n) or [1 << 30]))  # rings follow rank order
    # confirm: on real nodes a healthy pair can read low once (a transient, a starved core); a part is
    # named only after a second failed reading with new partners, which costs a link or uplink one round
    planner = Planner(order, topology, threshold=convert(threshold, unit, "GB/s"), max_rounds=max_rounds, confirm=True)
    rows: list[dict[str, Any]] = []
    host_of = {r: n for n, rs in ranks_of.items() for r in rs}

    whys: list[str] = []  # this round's: why each group gave no result ("" for one that gave one)
    reasons: dict[str, str] = {}  # group id -> why it gave no result

    def measure(groups: list[tuple[str, ...]]) -> list[GroupOutcome]:
        ranks = rank_groups(groups, ranks_of)
        said: dict[int, str] = {}  # group index -> why its rows could not be judged
        got = run(ranks)
        outcomes = group_outcomes(ranks, {r: a for r, a in got.items() if not isinstance(a, BaseException)},
                                  partial(all_reduce_busbw, judge_at=judge_at, checked=checked), host_of, said)
        whys[:] = [said.get(i) or (_no_result(g, got) if usable(o) is None else "")
                   for i, (g, o) in enumerate(zip(ranks, outcomes))]
        return outcomes

    def log(groups: list[Group], outcomes: list[GroupOutcome]) -> None:
        reasons.update((g.id, why) for g, why in zip(groups, whys) if why)
        rows.extend({"round": g.round, "group": g.id, "members": list(g.members),
                     "busbw": usable(v) if isinstance(v, float) else None,
                     "outcome": "passed" if planner.passes(v) else "no result" if usable(v) is None else "failed"}
                    for g, v in zip(groups, outcomes))

    found = drive(planner, measure, on_round=log)
    return items(found, nodes, threshold, check_id, unit, reasons), rows


def _no_result(ranks: list[int], got: Mapping[int, Any]) -> str:
    """Why a group gave no result: its first silent rank's error, else which ranks said nothing, else its
    busbw was no bandwidth."""
    silent = [r for r in ranks if r not in got or isinstance(got[r], BaseException)]
    for r in silent:
        if r in got and (said := str(got[r]).strip()):
            return said.splitlines()[0]
    if silent:
        return f"rank(s) {', '.join(map(str, silent))} gave no answer"
    return "its busbw was not a finite number >= 0"


def _said(groups: list[Evidence], reasons: Mapping[str, str]) -> str:
    """The reasons these no-result groups gave, each once (three at most)."""
    said = dict.fromkeys(reasons.get(e.group, "no answer") for e in groups)
    return "; ".join(w if len(w) <= 160 else w[:159] + "…" for w in list(said)[:3])


def items(v: Verdicts, nodes: list[str], threshold: float, check_id: str, unit: str = "GB/s",
          reasons: Mapping[str, str] | None = None) -> dict[str | None, tuple[list[Verdict], str]]:
    """Each item's verdicts and message (for an item with verdicts, a note); `threshold` and the evidence's
    bandwidths said in `unit`; `reasons`: why each group of `v.no_result` gave no result."""
    reasons = reasons or {}
    named = {f.name: f for f in v.named("node")}
    suspects = {p.name for group in v.suspects for p in group if p.kind == "node"}
    rule = Expectation(check_id, "localized", "cleared", f"every group >= {threshold:g} {unit}", SOURCE)
    out: dict[str | None, tuple[list[Verdict], str]] = {}
    silent_of: dict[str, list[Evidence]] = {}  # node -> its groups that gave no result, in their order
    for e in v.no_result:  # indexed once: a scan of every group per node was quadratic (8,192 nodes: 11-14 s)
        for m in e.members:
            silent_of.setdefault(m, []).append(e)
    for node in nodes:
        if node in named:
            f = named[node]
            detail = (f"named bad in {v.rounds} round(s), confidence {f.confidence:.3f}: "
                      + "; ".join(f"round {e.round} {'+'.join(e.members)} {_value(e.outcome, unit)}" for e in f.evidence[:4]))
            out[node] = ([Verdict("localized", "bad", "", rule, False, subject=node, detail=detail)], detail)
            continue
        silent = silent_of.get(node, [])  # no result: it clears and blames nobody
        if node in v.cleared:
            out[node] = ([Verdict("localized", "cleared", "", rule, True, subject=node,
                                  detail="a passing group exercised it")],
                         f"{len(silent)} group(s) with it gave no result ({_said(silent, reasons)})" if silent else "")
        elif node not in suspects and silent and node not in v.measured:  # every group with it: no result
            out[node] = ([], f"not judged: its groups gave no result ({_said(silent, reasons)}): "
                             f"{', '.join(e.group for e in silent[:8])}")
        else:
            why = "a suspect the rounds could not tell apart from another part" if node in suspects else \
                "no test both exercised and cleared it"
            out[node] = ([], f"not localized: {why} (rounds {v.rounds}, tests {v.tests})")
    parts = [f for f in v.findings if f.kind != "node"]
    cluster = [Verdict("localized", "bad", "", rule, False, subject=f"{f.kind} {f.name}",
                       detail=f"{f.kind} {f.name} ({'nodes below it: ' * (f.kind == 'switch')}{', '.join(f.nodes)}) named bad, confidence {f.confidence:.3f}: "
                              + "; ".join(f"round {e.round} {'+'.join(e.members)} {_value(e.outcome, unit)}"
                                          for e in f.evidence[:4]))
               for f in parts]
    # a failure the rounds could pin on no one part is still a failure of the cluster: suspects that are not
    # all nodes (the node items say those), or every group failed (a shared cause: nobody is blamed)
    for group in v.suspects:
        if any(p.kind != "node" for p in group):
            names = " | ".join(f"{p.kind} {p.name}" for p in group)
            cluster.append(Verdict("localized", "suspect", "", rule, False, subject=f"one of: {names}",
                                   detail=f"failed groups point at one of {names}, which the rounds could not tell "
                                          f"apart ({v.rounds} round(s), {v.tests} test(s))"))
    if v.every_test_failed:
        cluster.append(Verdict("localized", "every group failed", "", rule, False,
                               detail=f"all {v.tests} test(s) failed: a cause every node shares (the threshold, "
                                      "software, the whole fabric), so no part is named"))
    none = (f"{len(v.no_result)} group(s) gave no result ({_said(list(v.no_result), reasons)}): "
            f"{', '.join(e.group for e in v.no_result[:8])}") if v.no_result else ""
    # parts that only groups another part failed measured (masked), or none did: never measured, never a pass
    unjudged = [f"{kind}(s) {', '.join(parts[:8])} {why}" for kind, parts, why in (
        ("uplink", v.masked, "never tested apart from a failed part"),
        ("link", v.untested_links, "never tested apart from a failed part"),
        ("uplink", v.never_crossed, "never crossed by any test")) if parts]
    none = "; ".join([*unjudged, none] if none else unjudged)
    if cluster:
        out[None] = (cluster, none)
    elif unjudged:
        out[None] = ([], f"not judged: {none}")
    elif v.unexplained:  # failed groups whose every part passed elsewhere: a transient, never a clean pass
        out[None] = ([], f"not judged: {len(v.unexplained)} failed group(s) that no part explains (a transient or "
                         f"a noisy reading): {', '.join(v.unexplained[:8])}" + (f"; {none}" if none else ""))
    elif none:  # a group that gave no result is no evidence: never a clean pass
        out[None] = ([], f"not judged: {none}")
    else:
        out[None] = ([Verdict("localized", "no link or uplink named", "", rule, True,
                              detail=f"{v.tests} test(s) in {v.rounds} round(s)")], "")
    return out


def _value(outcome: GroupOutcome, unit: str) -> str:
    if isinstance(outcome, float):  # GB/s, as the rounds measure it
        return f"{convert(outcome, 'GB/s', unit):.3g} {unit}"
    return {True: "passed", False: "wrong results", None: "no result"}.get(outcome, str(outcome))
