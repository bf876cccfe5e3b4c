"""The terminal: the results table (check, metric, measured, limit, margin, verdict), the exclusion
list and the nodes that could not be measured, and where the reports are."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any, Mapping, Sequence

from clustercheck import verdicts as vt
from clustercheck.exclude import as_hostlist
from clustercheck.paths import display
from clustercheck.record import ExcludeEntry, Record

_HEAD = ("check", "metric", "measured", "limit", "margin", "verdict")
FILES = ("run.jsonl", "junit.xml", "results.json", "report.html", "exclude.txt")


def table_rows(results: Sequence[Mapping[str, Any]]) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = []
    for r in results:
        verdicts = r.get("verdicts") or []
        if not verdicts:
            reason = (r.get("message") or "").splitlines()[0:1]
            rows.append((r["name"], "-", "-", "-", "-", r["outcome"].upper() + (f": {reason[0][:60]}" if reason else "")))
            continue
        for v in verdicts:
            metric = f"{v['subject']} {v['metric']}" if v.get("subject") else v["metric"]  # GPU3 h2d
            rows.append((r["name"], metric, vt.measured_text(v), vt.rule_text(v), vt.margin_text(v), vt.word(v)))
    return rows


def summary_lines(results: Sequence[Mapping[str, Any]]) -> list[str]:
    rows = [_HEAD, *table_rows(results)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(_HEAD) - 1)]
    return ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)) + "  " + row[-1] for row in rows]


def incomplete_line(rec: Record) -> str | None:
    """`INCOMPLETE: why; N of M items not run` for a run that did not finish; None when it did."""
    why = rec.incomplete()
    if why is None:
        return None
    return f"INCOMPLETE: {why}; {len(rec.not_run())} of {len(rec.plan or [])} planned item(s) not run"


def exclusion_lines(ex: ExcludeEntry, nodes: int, incomplete: str | None = None) -> list[tuple[str, str]]:
    """(line, colour) pairs: INCOMPLETE when the run did not finish, the exclusion list with reasons and
    drains, then the nodes with errors and the nodes nothing measured."""
    out: list[tuple[str, str]] = [(incomplete, "red")] if incomplete else []
    if ex.get("hostlist"):
        out.append((f"exclude: {ex['hostlist']}   (sbatch --exclude={ex['hostlist']})", "red"))
        out += [(f"  {node}: {why}", "") for node, why in (ex.get("reasons") or {}).items()]
        for d in ex.get("drain") or []:
            state = "would run" if d["rc"] is None else f"ran (exit {d['rc']})"
            out.append((f"  drain {state}: {shlex.join(d['command'])}", ""))
    elif incomplete:
        out.append(("exclude: none so far (the run did not finish: nothing it did not measure is cleared)", ""))
    elif nodes > 1 or ex:
        out.append(("exclude: none (no node failed a check)", ""))
    unmeasured = ex.get("unmeasured") or {}
    if nodes > 1 and unmeasured:
        out.append((f"not measured: {as_hostlist(list(unmeasured))}   (harness errors: rerun them; "
                    "an error never excludes a node)", "yellow"))
        out += [(f"  {node}: {', '.join(items)}", "") for node, items in unmeasured.items()]
    untested = ex.get("untested") or []
    if untested:
        out.append((f"untested: {as_hostlist(list(untested))}   (no item measured these nodes: they are not "
                    "cleared)", "yellow"))
    return out


def file_lines(run_dir: Path) -> list[str]:
    return [f"  {name:<13} {display(run_dir / name)}" for name in FILES]
