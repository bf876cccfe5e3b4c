"""The terminal: the results table (check, metric, measured, limit, margin, verdict), the exclusion
list and the nodes that could not be measured, and where the reports are."""

from __future__ import annotations

import shlex
import textwrap
from pathlib import Path
from typing import Any, Mapping, Sequence

import hostlist

from clustercheck.errors import escape
from clustercheck.judging import verdicts as vt
from clustercheck.record.exclude import act_line, acts, as_hostlist, unblamed
from clustercheck.record.io import Record
from clustercheck.record.schema import ExcludeEntry, ResultEntry
from clustercheck.report import REPORTS
from clustercheck.report.status import never_joined, planned, selection_text

_HEAD = ("check", "metric", "measured", "limit", "margin", "verdict")
FILES = ("run.jsonl", *REPORTS.values(), "exclude.txt")


WIDTH = 100  # the table fits this many columns; a cell too wide goes on its own line, a reason wraps whole
_GAP = 2
_CHECK_MIN = 16  # the check id column narrows to this before the others do


def table_rows(results: Sequence[Mapping[str, Any]]) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = []
    for r in results:
        verdicts = r.get("verdicts") or []
        if not verdicts:
            reason = (r.get("message") or "").strip().splitlines()[0:1]  # whole: wrapped, never cut
            rows.append((escape(r["name"]), "-", "-", "-", "-",
                         r["outcome"].upper() + (f": {escape(reason[0])}" if reason else "")))
            continue
        for v in verdicts:
            metric = f"{v['subject']} {v['metric']}" if v.get("subject") else v["metric"]  # GPU3 h2d
            measured = vt.measured_text(v)
            if v.get("detail") and v["metric"].endswith(" vs baseline"):  # the baseline's value beside the change
                measured += f" ({str(v['detail']).split(' (')[0]})"
            # a subject or a message may be a tool's or a rank's text: escaped, it cannot drive the terminal
            cells = (r["name"], metric, measured, vt.rule_text(v), vt.margin_text(v), vt.word(v))
            rows.append(tuple(escape(cell) for cell in cells))
    return rows


def column_widths(rows: Sequence[tuple[str, ...]], width: int = WIDTH) -> list[int]:
    """Natural widths of all but the verdict column, narrowed (the check id first, down to _CHECK_MIN, then
    the widest) until the row and the verdict's first word fit `width`; wider cells then overflow."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(_HEAD) - 1)]
    verdict = max(len(row[-1].partition(": ")[0]) + 1 for row in rows)
    while sum(widths) + _GAP * len(widths) + verdict > width:
        i = 0 if widths[0] > _CHECK_MIN else max(range(len(widths)), key=lambda j: widths[j] - len(_HEAD[j]))
        if widths[i] <= len(_HEAD[i]):
            break
        widths[i] -= 1
    return widths


def render_row(row: tuple[str, ...], widths: Sequence[int], width: int = WIDTH) -> list[str]:
    """One row as lines of at most `width`: a cell that overruns the next column's start pushes the rest
    onto a continuation line at their columns; the verdict's reason wraps under it, whole."""
    starts = [sum(widths[:i]) + _GAP * i for i in range(len(row))]
    if set(row[1:-1]) == {"-"} and starts[-1] + len(row[-1]) > width >= starts[1] + len(row[-1]):
        row, starts = (row[0], row[-1]), [0, starts[1]]  # no measurements: the reason spans their empty columns
    lines: list[str] = []
    line = ""
    for cell, start in zip(row[:-1], starts):
        if line and len(line) + _GAP > start:
            lines.append(line)
            line = ""
        line = line.ljust(start) + cell
        while len(line) > width:  # only a cell wider than the whole table: wrapped, not cut
            lines.append(line[:width])
            line = " " * start + line[width:]
    start = starts[-1]
    if line and len(line) + _GAP > start:
        lines.append(line)
        line = ""
    if start + len(row[-1]) <= width:
        return [*lines, line.ljust(start) + row[-1]]
    head, _, reason = row[-1].partition(": ")
    lines.append(line.ljust(start) + head + ":")
    indent = start if width - start >= 40 else 4
    return lines + textwrap.wrap(reason, width, initial_indent=" " * indent, subsequent_indent=" " * indent,
                                 break_on_hyphens=False)


def summary_lines(results: Sequence[Mapping[str, Any]], width: int = WIDTH) -> list[str]:
    rows = [_HEAD, *table_rows(results)]
    widths = column_widths(rows, width)
    lines: list[str] = []
    for before, row in zip([None, *rows], rows):
        if before is not None and before[0] == row[0] and len(row[0]) > widths[0]:
            row = ("", *row[1:])  # the next verdict of a check whose id already has its own line
        lines += [line.rstrip() for line in render_row(row, widths, width)]
    return lines


def incomplete_line(rec: Record) -> str | None:
    """`INCOMPLETE: why; N of M items not run` for a run that did not finish, then a line per node that never
    joined naming the items not measured for want of it; None when the run finished."""
    why = rec.incomplete()
    if why is None:
        return None
    if not rec.plan:  # killed while collecting or starting its ranks: "0 of 0 not run" would read as nothing lost
        return f"INCOMPLETE: {why}; it stopped before it planned its items: nothing was measured"
    lines = [f"INCOMPLETE: {why}; {_not_run(rec)}"]
    for node, items in never_joined(rec).items():  # by name: each item (a pair: its link) the node cost
        names = [i.partition("::")[2] for i in items]
        said = ", ".join(names[:MOST_NAMED]) + (f" and {len(names) - MOST_NAMED} more (results.json: "
                                                 "incomplete.never_joined)" if len(names) > MOST_NAMED else "")
        lines.append(f"  {node} never joined; not measured: {said or 'no item of this run covers it'}")
    return "\n".join(lines)


def _not_run(rec: Record) -> str:
    """`N of M planned item(s) not run`; a repeated run counts item-repetitions, and says how many of the
    repetitions asked for never started (`9 of 10 repetitions not run`: the last that started may have run
    whole), or, with --duration, which it stopped at (no count says how many more were to come)."""
    missing = rec.not_run_count(unstarted=True)  # whatever the record's format: the terminal says it all
    if not rec.header.get("repeat"):
        return f"{missing} of {len(rec.plan or [])} planned item(s) not run"
    asked = rec.asked()
    head = (f"{len(rec.unstarted())} of {asked} repetitions not run; " if asked and rec.unstarted() else "" if asked
            else f"stopped at repetition {max(rec.reached(), 1)} (--duration: how many more were to come is not known); ")
    return f"{head}{missing} of {planned(rec)} planned item repetition(s) not run"


MOST_NAMED = 8  # items named per node that never joined: the rest are counted (a pair check has one per node)


def exclusion_lines(ex: ExcludeEntry, nodes: int, incomplete: str | None = None,
                    results: Sequence[ResultEntry] = ()) -> list[tuple[str, str]]:
    """(line, colour) pairs: INCOMPLETE when the run did not finish, the exclusion list with reasons and
    drains (and the cluster and pair checks that failed naming no node: never "no node failed a check"),
    then the nodes with errors and the nodes nothing measured."""
    out: list[tuple[str, str]] = [(incomplete, "red")] if incomplete else []
    blank = unblamed(results)
    said = f"{', '.join(f'{b} failed' for b in blank)}; {'it names' if len(blank) == 1 else 'they name'} no node"
    if ex.get("hostlist"):
        out.append((f"exclude: {ex['hostlist']}   (sbatch --exclude={ex['hostlist']})", "red"))
        out += [(escape(f"  {node}: {why}"), "") for node, why in (ex.get("reasons") or {}).items()]
        out += [(escape(f"  {act_line(act, d)}"), "") for act, d in acts(ex)]  # scontrol's words
        if ex.get("breaker"):
            out.append((f"  {ex['breaker']}", "yellow"))
        if blank:
            out.append((f"  and {said}", "yellow"))
    elif incomplete:
        out.append(("exclude: none so far (the run did not finish: nothing it did not measure is cleared)", ""))
        if blank:
            out.append((f"  {said}", "yellow"))
    elif blank:
        out.append((f"exclude: none ({said})", "yellow"))
    elif nodes > 1 or ex:
        out.append(("exclude: none (no node failed a check)", ""))
    unmeasured = ex.get("unmeasured") or {}
    if nodes > 1 and unmeasured:
        out.append((f"not measured: {names_shown(list(unmeasured))}   (harness errors: rerun them; "
                    "an error never excludes a node)", "yellow"))
        out += [(f"  {node}: {', '.join(items)}", "") for node, items in unmeasured.items()]
    untested = ex.get("untested") or []
    if untested:
        out.append((f"untested: {names_shown(list(untested))}   (no item measured these nodes: they are not "
                    "cleared)", "yellow"))
    return out


def file_lines(run_dir: Path, url: bool = False) -> list[str]:
    """Every file the run wrote, by absolute path (they are opened from other directories and machines);
    on a terminal (`url`) the HTML report as a file:// URL, which terminals make clickable. Only files
    that are there: a report that could not be written is said by the run's own error, never listed as
    if it had been."""
    where = run_dir.resolve()
    return [f"  {name:<16} {(where / name).as_uri() if url and name.endswith('.html') else where / name}"
            for name in (*FILES, "attestation.json") if (where / name).is_file()]


def notes(results: Sequence[ResultEntry], most: int = 5) -> list[str]:
    """The items' notes (`<nodes>: <what>`: a counter their nodes have not got, a node lost mid-run, what
    could not be compared with a baseline), each once over the whole run with every node that said it, the
    first `most` of them and a count of the rest."""
    by_note: dict[str, list[str]] = {}
    for r in results:
        for note in r.get("notes") or ():
            hosts, _, text = note.partition(": ")
            try:
                by_note.setdefault(text, []).extend(hostlist.expand_hostlist(hosts))
            except hostlist.BadHostlist:  # a record not written by a run: say the note as it stands
                by_note.setdefault(note, [])
    lines = [escape(f"{as_hostlist(sorted(set(hosts)))}: {text}" if hosts else text)  # a rank's or a tool's words
             for text, hosts in by_note.items()]
    return lines[:most] + ([f"and {len(lines) - most} more (report.html, each item)"] if len(lines) > most else [])


def verdict_lines(rec: Record, status: Mapping[str, Any]) -> list[str]:
    """What `clustercheck report` says beside the files it wrote, escaped (a record's node names and a
    selection's ids are its writer's text): why the run is INCOMPLETE, else why a run whose items passed is
    no PASS (nodes nothing measured); and a selection, which may PASS but is said where the verdict is read."""
    out = []
    if line := incomplete_line(rec):
        out.append(line)
    elif status["untested"]:
        out.append(f"untested: {names_shown(list(status['untested']))} (no item measured these nodes: they are not "
                   f"cleared; run verdict {status['verdict']})")
    if status.get("selection"):
        out.append(selection_text(status["selection"]))
    return [lines_shown(line) for line in out]


def names_shown(nodes: list[str]) -> str:
    """The nodes as a hostlist, or, where a name cannot be one (`[`, `]`, `,`, a control character: a record
    not written by a run), as a comma list, as notes() says them: never a traceback. Escape it to show it."""
    try:
        return as_hostlist(nodes)
    except hostlist.BadHostlist:
        return ", ".join(nodes)


def lines_shown(text: str) -> str:
    """Text for the terminal, each of its lines escaped (errors.escape: ESC, BEL, CR ... as backslash text)
    and its line breaks kept: a rank's exception or a tool's output can neither move the cursor, hide a
    line nor write the clipboard. Escaping is idempotent on printable text, so text escaped where it was
    built passes through unchanged."""
    return "\n".join(escape(line) for line in text.split("\n"))


def run_summary(results: Sequence[ResultEntry], exclusion: ExcludeEntry, nodes: int, incomplete: str | None,
                counters: bool, run_dir: Path, url: bool) -> list[tuple[str, str]]:
    """The end of a run on the terminal, as (line, colour): the table (a repeated run: each item once, its
    worst repetition), the burn-in summary, the exclusion list, whether counters were read, the files."""
    from clustercheck.record import burnin

    out = [(line, "") for line in summary_lines(burnin.folded(results))] + [("", "")]
    if burnin.repeated(results):
        out += [(line, "") for line in burnin.lines(burnin.summarize(results), incomplete is not None)] + [("", "")]
    out += [(lines_shown(line), colour) for line, colour in exclusion_lines(exclusion, nodes, incomplete, results)]
    if counters:
        out.append(("counters: read on every node before and after each check (--counters); a rise beyond its "
                    "allowance fails the item, an unreadable counter is an error", ""))
    out += [(f"note: {line}", "yellow") for line in notes(results)]  # said whatever the options
    return out + [(line, "") for line in file_lines(run_dir, url=url)]
