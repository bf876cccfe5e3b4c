"""`run --expect KEY` that no check of the run reads: refused (one line, exit 4) before any check runs, as
`probe NAME --expect KEY` is (probes/cli.py). Run, such a key judges nothing and the run exits 0, and the user
takes the expectation for checked: the fail-closed rule. Each kind declares the keys its checks read
(`Kind.expect_keys`, `Kind.reads`); a profile's `expect:` block serves every kind and is never refused.
So is a key that every check reading it cannot judge in the run's layout (the backend, the nodes, the ranks per
node), once the nodes answered: each kind declares what its judge needs to read a key (`Kind.expect_needs`,
named in NEEDS below), and a check the layout skips judges nothing; so is `fabric_ports` where the fabric floor
alone would read it and a line rate given (fabric_gbps, the profile's fabric.line_rate_gbps) wins over it."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from clustercheck.errors import UserError
from clustercheck.judging.expect import reads, typed_keys
from clustercheck.kinds.base import CheckSpec

if TYPE_CHECKING:
    from clustercheck.judging.thresholds import Profile
    from clustercheck.run.runner import Layout


def read_by(checks: Sequence[CheckSpec]) -> dict[str, list[str]]:
    """Each key the checks read -> the ids of the checks reading it, in the order of the checks."""
    from clustercheck.kinds import KINDS

    out: dict[str, list[str]] = {}
    for check in checks:
        for key in KINDS[check.measure].reads(check):
            ids = out.setdefault(key, [])
            if check.id not in ids:
                ids.append(check.id)
    return out


def refuse_unread(typed: Mapping[str, Any], selected: Sequence[CheckSpec], suite_files: Sequence[tuple[str, Path]]
                  ) -> None:
    """UserError for the first key of `typed` (the run's --expect) that no check of `selected` reads.
    `suite_files` ((as shown, path) of the selected checks' suites) are read again only then, to say that
    deselection (-k, -m, --deselect) left out the checks that read it."""
    from clustercheck.errors import escape

    keys = typed_keys(dict(typed))
    if not keys:
        return
    read = read_by(selected)
    for key in keys:
        if reads(list(read), key):
            continue
        these = f"the checks read: {', '.join(read)}" if read else "the checks read none"
        left_out = [i for k, ids in read_by(_collected(suite_files)).items() if reads([k], key) for i in ids]
        if left_out:
            raise UserError(f"--expect {escape(key)}: no check selected for this run reads it (deselected: "
                            f"{', '.join(dict.fromkeys(left_out))}; {these.replace('checks', 'selected checks')})")
        raise UserError(f"--expect {escape(key)}: no check of this run reads it ({these})")


def _collected(suite_files: Sequence[tuple[str, Path]]) -> list[CheckSpec]:
    """Every check of the suite files, as the collector read them (a file it read is read as well now)."""
    from clustercheck.suite.load import load_suite

    return [check for shown, path in suite_files for check in load_suite(Path(path), shown).checks]


# A need: why `check` cannot be judged on `layout` with `profile` (None: it can), and whether the reason is the
# check's own (its scope, its limits: said with its id) rather than the run's (its backend, one node). The judges they stand for:
# kinds/collectives.py nccl_verdicts (NCCL's log, read on the nccl backend only; the transport between an item's
# nodes when its items span nodes; P2P between two GPUs of one node) and run/judge.py by_fabric_floor.
Why = tuple[str, bool]
Need = Callable[[CheckSpec, "Layout", "Profile"], "Why | None"]


def _nccl(check: CheckSpec, layout: Layout, profile: Profile) -> Why | None:
    return None if layout.backend == "nccl" else \
        (f"the {layout.backend} backend: it is read from NCCL's log; run with --backend nccl", False)


def _between_nodes(check: CheckSpec, layout: Layout, profile: Profile,
                   what: str = "the network between nodes is judged") -> Why | None:
    from clustercheck.judging.fabric import multi_node

    if len(layout.nodes) < 2:
        return f"one node: {what} on multi-node runs", False
    return None if multi_node(check.scope, len(layout.nodes)) else \
        (f"scope {check.scope}, each node alone: {what} on checks of scope cluster, pair or localize", True)


def _gpus_of_a_node(check: CheckSpec, layout: Layout, profile: Profile) -> Why | None:
    return None if layout.per_node >= 2 else \
        ("one rank per node: P2P is judged between two GPUs of one node; run with --ranks 2 or more", False)


def _fabric_floor(check: CheckSpec, layout: Layout, profile: Profile) -> Why | None:
    from clustercheck.run.judge import by_fabric_floor

    if by_fabric_floor(check, profile, len(layout.nodes)):
        return None
    spans = _between_nodes(check, layout, profile, "the fabric floor (busbw against the line rate) applies")
    own = f"the suite's limits: {check.limits}" if check.limits else f"{profile.file} checks.{check.id}"
    return spans or (f"judged by limits of its own ({own}), not by the fabric floor, which reads it", True)


NEEDS: dict[str, Need] = {"nccl": _nccl, "between_nodes": _between_nodes, "gpus_of_a_node": _gpus_of_a_node,
                          "fabric_floor": _fabric_floor}


def _line_rate_given(typed: Mapping[str, Any], profile: Profile) -> str | None:
    """Where a line rate the fabric floor takes over the nodes' ports comes from (judging/fabric.py line_rate:
    fabric_gbps, typed or the profile's, then the profile's fabric.line_rate_gbps), or None: the floor reads
    the ports `fabric_ports` names only without one, so a typed fabric_ports beside it is read by no floor."""
    from clustercheck.units import fmt, is_number

    for given, where in ((typed.get("fabric_gbps"), "--expect fabric_gbps="),
                         (profile.expect.get("fabric_gbps"), f"{profile.file} expect.fabric_gbps ")):
        if is_number(given):  # checked at load: a number above 0 where given at all
            return f"{where}{fmt(given)}"
    rule = profile.fabric
    return f"{rule.origin}.line_rate_gbps {fmt(rule.line_rate_gbps)}" if rule and rule.line_rate_gbps else None


def cannot_judge(check: CheckSpec, key: str, layout: Layout, profile: Profile, absent: Sequence[str] = (),
                 typed: Mapping[str, Any] | None = None) -> Why | None:
    """Why `check` (which reads `key`) judges nothing of it on `layout` (as a Need says it), or None: what its kind's judge needs to
    read the key, then the layout's skips (run/applies.py: too few nodes, no GPUs, a group of one rank). Nodes
    that never joined (`absent`) count as planned: what they would have made is their error, not the user's.
    `fabric_ports` read for the fabric floor alone is shadowed by a line rate given (`typed`, the profile)."""
    from dataclasses import replace

    from clustercheck.errors import ClusterCheckError, Skip
    from clustercheck.kinds import KINDS
    from clustercheck.run.applies import applies

    needs = KINDS[check.measure].expect_needs
    wanted = needs.get(key) or needs.get(key.split(".")[0]) or ()
    for need in wanted:
        why = NEEDS[need](check, replace(layout, nodes=[*layout.nodes, *absent]), profile)
        if why:
            return why
    given = _line_rate_given(typed or {}, profile) if key == "fabric_ports" and "fabric_floor" in wanted else None
    if given:  # the ib probe and ib_write_bw read the ports named whatever the rate: they declare no such need
        return f"the fabric floor takes its line rate from {given}, never from the ports fabric_ports names", False
    try:
        applies(check, layout.backend, len(layout.nodes), layout.per_node, absent)
    except Skip as skip:
        return f"skipped: {skip}", True
    except ClusterCheckError:  # nodes that never joined, a group that cannot work: the run's error, never a pass
        return None
    return None


def refuse_unjudged(typed: Mapping[str, Any], selected: Sequence[CheckSpec], layout: Layout, profile: Profile,
                    absent: Sequence[str] = ()) -> None:
    """UserError for the first key of `typed` (the run's --expect) that every check of `selected` reading it
    cannot judge on `layout` (refuse_unread has refused a key none reads), naming why."""
    from clustercheck.errors import escape
    from clustercheck.kinds import KINDS

    for key in typed_keys(dict(typed)):
        whys: dict[Why, list[str]] = {}  # why -> the checks it holds for
        for check in selected:
            if not reads(KINDS[check.measure].reads(check), key):
                continue
            why = cannot_judge(check, key, layout, profile, absent, typed)
            if why is None:
                break
            whys.setdefault(why, []).append(check.id)
        else:
            if whys:  # the run's reasons alone (its backend, one node); a check's own with the checks it holds for
                said = "; ".join(f"{', '.join(dict.fromkeys(ids))}: {why}" if own else why for (why, own), ids in whys.items())
                raise UserError(f"--expect {escape(key)}: this run cannot judge it ({said})")
