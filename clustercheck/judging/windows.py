"""A counter window's judgement as verdicts: what rose on a node while one check ran (clustercheck.counters
judged it against the allowances), one verdict per counter that rose, against its allowance as a limit,
and a failed one per device that vanished (measured "gone") or appeared during the window ("appeared")."""

from __future__ import annotations

from typing import Iterable, Mapping

import hostlist

from clustercheck.counters.allowances import Judgement
from clustercheck.counters.delta import appeared
from clustercheck.errors import ClusterCheckError, HarnessError, Skip, Unreachable
from clustercheck.judging.measurement import Measurement, Outcome
from clustercheck.judging.limits import Limit
from clustercheck.judging.verdicts import Expectation, Verdict


def verdicts(j: Judgement, check_id: str) -> list[Verdict]:
    """clustercheck Verdicts for an item: one per counter that rose (passed or failed against its
    allowance, subject `<host> <device>`) and a failed one per device that vanished or appeared (a GPU
    enumerated after the window and not before it: one verdict for the GPU, measured "appeared"). Harness errors
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
        out.append(Verdict(e.reader, "appeared" if appeared(e) else "gone", "", rule, False,
                           subject=f"{j.host} {e.device}".strip(),
                           detail=e.text()))
    return out


def item_verdicts(check_id: str, windows: Mapping[str, Judgement | str], nodes: Iterable[str]) -> list[Verdict]:
    """The verdicts of an item's nodes' windows (--counters); HarnessError where a node has no window (its
    counters could not be read: the window is then why) or a counter of it could not be judged, unless the
    window failed as well: then a verdict `not judged` (never passed, as probes/base.not_judged) names
    what could not be judged beside the failed ones."""
    out: list[Verdict] = []
    for node in nodes:
        window = windows.get(node)
        if window is None or isinstance(window, str):
            raise HarnessError(f"{check_id}: {window or f'no counter window for {node}'}")
        if window.harness_errors and not (window.failed or window.vanished):
            raise HarnessError(f"{check_id}: counters of {node} could not be judged: {why_not(window)}")
        if window.harness_errors:  # a failure stands (the node is excluded), with what was not judged beside it
            said = why_not(window, failures=False)
            rule = Expectation(check_id, "counters", "read before and after the check", "built in", said)
            out.append(Verdict("counters", "not judged", "", rule, False, subject=node, detail=said))
        out += verdicts(window, check_id)
    return out


def despite(check_id: str, exc: ClusterCheckError, windows: Mapping[str, Judgement | str],
            nodes: Iterable[str]) -> Outcome | ClusterCheckError:
    """An item its ranks did not answer (an error) or that does not apply (a skip), when a window of its
    nodes failed (an Xid, a device gone): the hardware failed while it ran, so the item fails, with the
    windows' verdicts and one saying why its own measurement was not judged. Otherwise the error or skip
    stands as it is, except that a skip whose node's window was never closed or could not be judged (a str
    window, or harness errors such as kernel-log records lost) is a HarnessError saying both: a skip reads
    as nothing to see, and a window not judged must never read so. An
    Unreachable's nodes stopped answering (the exclusion list names them, from the outcome's `unreachable`):
    their windows are not judged, but a failed window of a node still answering fails the item as well."""
    gone = tuple(exc.nodes) if isinstance(exc, Unreachable) else ()
    nodes = [node for node in nodes if node not in gone]
    judged = [w for node in nodes if isinstance(w := windows.get(node), Judgement)]
    said = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    if not any(w.failed or w.vanished for w in judged):
        if isinstance(exc, Skip) and (unjudged := _unjudged(windows, nodes)):  # a skip never hides them
            return HarnessError(f"{check_id}: skipped ({said}), but the counters of its window were not judged: "
                                f"{unjudged}")
        return exc
    why = f"{'skipped' if isinstance(exc, Skip) else 'error'}: {said}"
    rule = Expectation(check_id, "measurement", "measured and judged", "built in", why)
    own = Verdict("measurement", "not judged", "", rule, False, detail=why)
    return Outcome(Measurement({}, {}), [own] + [v for w in judged for v in verdicts(w, check_id)], {},
                   notes=window_notes(windows, nodes), unreachable=gone)


def _unjudged(windows: Mapping[str, Judgement | str], nodes: list[str]) -> str:
    """Why the windows of `nodes` that were never closed (a str) or could not be judged (harness errors:
    kernel-log records lost, a counter unread) were not judged, per node; "" when every one was."""
    out = [f"{node}: {w}" if isinstance(w, str) else f"{node}: {why_not(w, failures=False)}"
           for node in nodes if isinstance(w := windows.get(node), str) or (w is not None and w.harness_errors)]
    more = f"; and {len(out) - 3} more node(s) not judged" if len(out) > 3 else ""
    return "; ".join(out[:3]) + more


def window_notes(windows: Mapping[str, Judgement | str], nodes: Iterable[str]) -> tuple[str, ...]:
    """What the item's nodes have not got, so their windows did not judge it (no ECC, no InfiniBand, a
    counter NVML does not offer on any link), as `<nodes>: <note>`, the nodes of one note as a hostlist (64
    nodes of one model would otherwise say the same thing 64 times on every item), each saying what it is
    (an item's notes are of several kinds: record/schema.py); a window that is not there is not a note
    but an error (item_verdicts)."""
    by_note: dict[str, list[str]] = {}
    for node in nodes:
        window = windows.get(node)
        for note in window.notes if isinstance(window, Judgement) else ():
            by_note.setdefault(note, []).append(node)
    return tuple(f"{hostlist.collect_hostlist(hosts)}: {NOT_HERE}: {note}" for note, hosts in by_note.items())


NOT_HERE = "counters not judged, not on this hardware"  # a window's note: what the node has not got


def errored_check(windows: Mapping[str, Judgement | str]) -> str:
    """What the windows of a check that ended in a harness error found, per node: counters that rose beyond
    their allowance, devices that vanished, windows that could not be judged; "" when nothing did."""
    failed, unjudged = [], []
    for node, w in windows.items():
        if isinstance(w, str):
            unjudged.append(f"{node}: {w}")
        elif w.harness_errors:
            unjudged.append(f"{node}: could not be judged: {why_not(w)}")
        elif w.failed or w.vanished:
            failed.append(f"{node}: " + "; ".join([f"failed: {f.text(w.seconds)}" for f in w.failed] +
                                                  [f"failed: {e.text()}" for e in w.vanished]))
    # every failure, and the first few windows not judged: 64 nodes of the same unread counter would make the
    # error's first line kilobytes long
    more = f"; and {len(unjudged) - 3} more node(s) not judged" if len(unjudged) > 3 else ""
    return "; ".join(failed + unjudged[:3]) + more


def why_not(j: Judgement, failures: bool = True) -> str:
    """A window's harness errors in words: every counter not judged, by name (`not judged: nvlink.replay,
    nvlink.recovery on GPU0 (0000:18:00.0) links 2, 7-9 (...)`: links of one GPU with the same counters
    and reason together), up to three other errors, and what failed in the same window, which the error
    must not hide."""
    per_device: dict[tuple[str, str], list[str]] = {}
    other: list[str] = []
    for e in j.harness_errors:
        if e.counter and e.kind == "unreadable":
            per_device.setdefault((e.device, f"{e.what}: {e.error}"), []).append(e.counter)
        else:
            other.append(e.text())
    grouped: dict[tuple[str, tuple[str, ...], str], list[int]] = {}
    for (device, why), names in per_device.items():
        base, sep, link = device.partition(" link ")
        links = grouped.setdefault((base if sep and link.isdigit() else device, tuple(names), why), [])
        links += [int(link)] if sep and link.isdigit() else []
    parts = other[:3] + ([f"and {len(other) - 3} more"] if len(other) > 3 else [])
    for (device, counters, why), links in grouped.items():
        where = f"{device} link{'s' if len(links) > 1 else ''} {_spans(links)}" if links else device
        parts.append(f"not judged: {', '.join(counters)}{f' on {where}' if where else ''} ({why})")
    if failures:
        parts += [f"failed: {f.text(j.seconds)}" for f in j.failed] + [f"failed: {e.text()}" for e in j.vanished]
    return "; ".join(parts)


def _spans(numbers: list[int]) -> str:
    """2, 7-9 for [2, 7, 8, 9]."""
    out: list[str] = []
    for n in sorted(set(numbers)):
        if out and n == int(out[-1].split("-")[-1]) + 1:
            out[-1] = f"{out[-1].split('-')[0]}-{n}"
        else:
            out.append(str(n))
    return ", ".join(out)
