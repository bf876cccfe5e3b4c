"""A counter window's judgement as verdicts: what rose on a node while one check ran (clustercheck.counters
judged it against the allowances), one verdict per counter that rose, against its allowance as a limit,
and a failed one per device that vanished."""

from __future__ import annotations

from typing import Iterable, Mapping

from clustercheck.counters.allowances import Judgement
from clustercheck.errors import HarnessError
from clustercheck.judging.limits import Limit
from clustercheck.judging.verdicts import Expectation, Verdict


def verdicts(j: Judgement, check_id: str) -> list[Verdict]:
    """clustercheck Verdicts for an item: one per counter that rose (passed or failed against its
    allowance, subject `<host> <device>`) and a failed one per device that vanished. Harness errors
    are not verdicts: the caller raises them (Judgement.harness_errors)."""
    out: list[Verdict] = []
    for f in j.findings:
        limit = Limit(check_id, f.increase.name, "<=", float(f.allowed), "count",
                      f"<= {f.allowance.describe(j.seconds)}", f.allowance.source, f.allowance.origin)
        out.append(Verdict(f.increase.name, float(f.increase.amount), "count", limit, f.passed,
                           margin=limit.margin(f.increase.amount), subject=f"{j.host} {f.increase.device}".strip(),
                           detail=f.text(j.seconds) + (f": {f.increase.lines[0]}" if f.increase.lines else "")))
    for e in j.vanished:
        rule = Expectation(check_id, e.reader, "readable before and after the check", "built in", e.text())
        out.append(Verdict(e.reader, "gone", "", rule, False, subject=f"{j.host} {e.device}".strip(),
                           detail=e.text()))
    return out


def item_verdicts(check_id: str, windows: Mapping[str, Judgement | str], nodes: Iterable[str]) -> list[Verdict]:
    """The verdicts of an item's nodes' windows (--counters); HarnessError where a node has no window (its
    counters could not be read: the window is then why) or a counter of it could not be judged."""
    out: list[Verdict] = []
    for node in nodes:
        window = windows.get(node)
        if window is None or isinstance(window, str):
            raise HarnessError(f"{check_id}: {window or f'no counter window for {node}'}")
        if window.harness_errors:
            raise HarnessError(f"{check_id}: counters of {node} could not be judged: "
                               f"{'; '.join(e.text() for e in window.harness_errors[:3])}")
        out += verdicts(window, check_id)
    return out
