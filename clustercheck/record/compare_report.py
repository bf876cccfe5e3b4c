"""What `clustercheck compare` prints of a Comparison: the lines that say what differs between the runs
(suites, platforms, software, a baseline whose verdict is no PASS), what failed now, the table of
changes, what was not compared, and a count."""

from __future__ import annotations

from clustercheck.record.compare import REPEATED, UNJUDGED, Comparison, Run, software_line
from clustercheck.record.schema import item_id
from clustercheck.units import fmt


def verdict_line(run: Run, name: str = "baseline") -> str | None:
    """`the baseline's verdict is FAIL (1 item(s) failed: ...)`: a run whose verdict is no PASS says so, for
    what it measured is no reference for a pass; None for a PASS (or a verdict the caller did not give)."""
    if run.verdict in ("PASS", ""):
        return None
    if run.incomplete:
        return f"the {name}'s verdict is INCOMPLETE: {run.incomplete}"
    said = []
    for outcome, what in (("failed", "failed"), ("error", "errored")):
        ids = [item_id(r) for r in run.results if r.get("outcome") == outcome]
        if ids:
            said.append(f"{len(ids)} item(s) {what}: {', '.join(ids[:3])}" + (", ..." if len(ids) > 3 else ""))
    why = "; ".join(said) or ("nothing measured" if run.verdict == "SKIPPED" else "a node no item measured")
    return f"the {name}'s verdict is {run.verdict}: {why}"


_LABEL = {"regression": "REGRESSION", UNJUDGED: "NOT JUDGED", "improvement": "improved", "same": "same",
          "noise": "noise", "latency": "latency"}


def report_lines(c: Comparison, show_same: bool = False) -> list[str]:
    """Different suites and platforms in one line each, the software that differs, a baseline whose verdict
    is no PASS; verdicts that became failed, items of this run that fail, regressions, improvements (and with
    show_same the unchanged, those within the baseline's spread and latency), what was not compared, a count."""
    lines = []
    old, new = c.baseline.suites(), c.current.suites()
    if old != new:
        lines.append(f"suites differ: the baseline ran {', '.join(old) or 'nothing'}, this run "
                     f"{', '.join(new) or 'nothing'}" + (f" ({c.other_suites} item(s) of a suite only one run ran "
                                                         "are not compared)" if c.other_suites else ""))
    if c.baseline.platform() != c.current.platform():
        lines.append(f"platforms differ: {c.baseline.platform()} -> {c.current.platform()} (not judged: the baseline "
                     "is of another platform, no reference for a pass)")
    if c.software:
        lines.append(software_line(c.software))
    said = verdict_line(c.baseline)
    lines += [said] if said else []
    lines += [f"the {name} repeated ({reps} repetition(s)): {REPEATED}"
              for name, run in (("baseline", c.baseline), ("current run", c.current))
              if (reps := max((r.get("repeat") or 0 for r in run.results), default=0)) > 1]
    lines += [f"FAILED NOW  {item}: {what}" for item, what in c.failed_now]
    lines += [f"FAILED  {item}: {why}" for item, why in c.failing]
    lines += [f"NOT MEASURED NOW  {item}: {why}" for item, why in c.unmeasured_now]
    shown = ("regression", UNJUDGED, "improvement") + (("same", "noise", "latency") if show_same else ())
    rows = [ch for kind in shown for ch in c.changes if ch.kind == kind]
    table = [(_LABEL[ch.kind], ch.item, ch.metric, f"{fmt(ch.baseline)} -> {fmt(ch.current)} {ch.unit}",
              ch.percent(), f"{ch.direction} is better{ch.why()}") for ch in rows]
    if table:
        widths = [max(len(row[i]) for row in table) for i in range(5)]
        lines += ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)) + "  " + row[-1] for row in table]
    lost = set(c.lost)  # what the baseline judged and this run cannot be held to: exit 3, said louder
    lines += [f"{'NOT COMPARED' if entry in lost else 'not compared'}  {entry[0]}: {entry[1]}" for entry in c.not_compared]
    kinds = [ch.kind for ch in c.changes]
    extra = "".join(f", {n} {what}" for n, what in ((kinds.count(UNJUDGED), "not judged (the run's own spread too wide)"),
                                                   (kinds.count("noise"), "within the baseline's own spread"),
                                                   (kinds.count("latency"), "latency left to its limit"),
                                                   (len(c.failed_now), "verdict(s) failed now"),
                                                   (len(c.failing), "item(s) failing"),
                                                   (len(c.unmeasured_now), "item(s) not measured now")) if n)
    lines.append(f"{len(c.changes)} metric(s) compared at tolerance {c.tolerance * 100:g}%: "
                 f"{len(c.regressions)} regression(s), {len(c.improvements)} improvement(s){extra}, "
                 f"{len(c.not_compared)} not compared"
                 + (f" ({len(c.lost)} judged in the baseline, not now)" if c.lost else ""))
    return lines
