"""The run's verdict as every report states it: PASS, FAIL, ERROR, SKIPPED or INCOMPLETE, with the items
that never ran and the nodes nothing measured. A gate is judged by its worst case, so a run that did not
finish is INCOMPLETE whatever its finished items say, and one that left a node unmeasured is no PASS."""

from __future__ import annotations

from typing import Any, Mapping

from clustercheck.errors import escape
from clustercheck.record.burnin import folded
from clustercheck.record.exclude import untested
from clustercheck.record.io import REPETITIONS_NOT_RUN, Record
from clustercheck.record.schema import counts, item_id


def run_status(rec: Record) -> dict[str, Any]:
    # `run --compare`: a baseline that did not finish proves nothing (compare exits 2), and one that is no
    # reference for a pass (compare exits 3) never lets the run read PASS (end.compare: run/judge.Baseline.judged)
    compared = (rec.end or {}).get("compare") or {}
    why = rec.incomplete() or (f"the --compare baseline {compared.get('baseline')} is INCOMPLETE: "
                               f"{compared['incomplete']}" if compared.get("incomplete") else None)
    not_judged = [str(line) for line in compared.get("not_judged") or ()]
    # a repeated run's items as its reports judge them (record/burnin.py): an item skipped in one repetition
    # and passed in the others is not judged (an error), never two passes and a skip that read PASS
    c = counts(folded(rec.results))
    nodes = list(rec.header.get("nodes") or [])
    # what the results show, and what the exclude line adds (it may know more): an exclude line that says
    # less must not clear a node the results left unmeasured (an edited one turned an ERROR run into PASS)
    recorded = (rec.exclude or {}).get("untested") or []
    unmeasured = list(dict.fromkeys([*untested(nodes, rec.results), *recorded]))
    if why:
        verdict = "INCOMPLETE"
    elif c["failed"]:
        verdict = "FAIL"
    elif c["error"] or not_judged:
        verdict = "ERROR"  # the harness could not measure, or judge against the baseline, something: never a pass
    elif not c["passed"]:
        verdict = "SKIPPED"  # nothing applied here: nothing was measured, nothing is cleared
    elif unmeasured:
        verdict = "ERROR"  # others passed, but every item that covered these nodes was skipped: never a pass
    else:
        verdict = "PASS"
    not_run = rec.not_run()
    return {
        "verdict": verdict,
        "incomplete": None if why is None else {"reason": why, "not_run": rec.not_run_count(),
                                                "planned": planned(rec) if whole(rec) else len(rec.plan or []),
                                                "items": [item_id(p) for p in not_run],
                                                "never_joined": never_joined(rec),
                                                **({"repetitions": repetitions(rec)} if whole(rec) else {})},
        "untested": unmeasured,
        **({"lost": gone} if (gone := lost(rec)) else {}),
        **({"compare": {"baseline": compared.get("baseline"), "not_judged": not_judged}} if compared else {}),
        # a selection the user asked for (-k, --deselect, addopts) may PASS, but every report says it was one
        **({"selection": dict(rec.selection)} if rec.selection else {}),
    }


def selection_text(sel: Mapping[str, Any]) -> str:
    """What every report says of a run that measured a selection: how many of the items its suites hold, and
    that the others are not cleared (the verdict is the selection's only); `deselected` names the first few."""
    names = [escape(str(n)) for n in sel.get("deselected") or ()]  # a record's ids: a newline would forge a line
    more = int(sel.get("more") or 0) + max(len(names) - 5, 0)
    said = ", ".join(names[:5]) + (f" and {more} more" if more and names else f"{more} item(s)" if more else "")
    return (f"a selection: {sel.get('selected')} of {sel.get('collected')} planned items; the rest were not measured "
            f"and nothing about them is cleared (not selected: {said})")


def whole(rec: Record) -> bool:
    """Whether the record's reports count a repeated run in item-repetitions, the repetitions it never
    started among them (report format 10 on; before, `planned` was the plan's items and the repetitions a
    run never started went unnamed: `0 of 4 planned item(s) not run` of a run that stopped in 1 of 10)."""
    return bool(rec.header.get("repeat")) and rec.report_format() >= REPETITIONS_NOT_RUN


def planned(rec: Record) -> int:
    """What `not_run` is counted out of: the plan's items, in a repeated run once per repetition asked for
    (--repeat N), or per repetition it reached (--duration: how many more were to come is not known; those
    its end line says ran count, their results lost or not: Record.reached)."""
    return len(rec.plan or []) * (rec.asked() or max(rec.reached(), 1) if rec.header.get("repeat") else 1)


def repetitions(rec: Record) -> dict[str, Any]:
    """A repeated run's repetitions: asked for (None for --duration), started (the last with a result), and
    not run (those of --repeat N it never started, and those the end line says ran whose results are lost,
    a --duration run's too: Record.unstarted; None for --duration without such: no count to miss)."""
    asked, never = rec.asked(), rec.unstarted()
    return {"asked": asked, "started": rec.started(), "not_run": len(never) if asked or never else None}


def lost(rec: Record) -> dict[str, list[str]]:
    """Each node lost mid-run (an item named it unreachable: it stopped answering, or its agent went) -> the
    ids of the items it went unmeasured in: the one it was lost in, and each later item of its own or with it
    (`not measured: <node> was lost during <check> (<why>)`), or that needed it to have enough nodes."""
    out: dict[str, list[str]] = {}
    for r in rec.results:
        for node in r.get("unreachable") or ():
            ids = out.setdefault(node, [])
            if item_id(r) not in ids:
                ids.append(item_id(r))
    return out


def never_joined(rec: Record) -> dict[str, list[str]]:
    """Each node that never joined -> the ids of the items not measured for want of it: the planned items
    that cover it and have no result (its node and GPU items, each pair (link) with it), and the items whose
    error says they were not run because it was absent (a check that needs it to have enough nodes)."""
    absent = rec.header.get("absent") or {}
    out: dict[str, list[str]] = {node: [] for node in absent}
    for p in rec.not_run():
        for node in p.get("nodes") or ():
            if node in out:
                out[node].append(item_id(p))
    for r in rec.results:
        for node in r.get("absent") or ():
            if node in out and item_id(r) not in out[node]:
                out[node].append(item_id(r))
    return out


def not_run_text(p: Mapping[str, Any], absent: Mapping[str, str], why: str | None) -> str:
    """What junit.xml and ctrf.json say of a planned item without a result: the node(s) of its own that never
    joined, with why, where it has any; else why the run did not reach it."""
    gone = [node for node in p.get("nodes") or () if node in absent]
    if gone:
        return f"not run: {', '.join(gone)} never joined ({'; '.join(f'{n}: {absent[n]}' for n in gone)})"
    return f"not run: {why or 'the run did not finish'}"


def not_judged_text(compared: Mapping[str, Any]) -> str:
    """What junit.xml and ctrf.json say of a `run --compare` whose baseline is no reference for a pass."""
    return (f"not judged against the --compare baseline {compared.get('baseline')}: "
            + "; ".join(str(line) for line in compared.get("not_judged") or ()))


def untested_text(node: str) -> str:
    """What junit.xml and ctrf.json say of a node no item measured, as the failure of its own each gives it."""
    return f"untested: no item measured {node}; it is not cleared"
