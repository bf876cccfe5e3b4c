"""The terminal table: check, metric, measured, limit, margin, verdict."""

from __future__ import annotations

from typing import Any

from clustercheck.results import fmt, fmt_margin

_HEAD = ("check", "metric", "measured", "limit", "margin", "verdict")


def table_rows(results: list[dict[str, Any]]) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = []
    for r in results:
        verdicts = r.get("verdicts") or []
        if not verdicts:
            reason = (r.get("message") or "").splitlines()[0:1]
            rows.append((r["name"], "-", "-", "-", "-", r["outcome"].upper() + (f": {reason[0][:60]}" if reason else "")))
            continue
        for v in verdicts:
            verdict = "pass" if v["passed"] else "FAIL"
            metric = f"{v['subject']} {v['metric']}" if v.get("subject") else v["metric"]  # GPU3 h2d
            rows.append((r["name"], metric, f"{fmt(v['measured'])} {v['unit']}",
                         f"{v['op']} {fmt(v['limit'])} {v['unit']}", fmt_margin(v["margin"], v["limit"]), verdict))
    return rows


def summary_lines(results: list[dict[str, Any]]) -> list[str]:
    rows = [_HEAD, *table_rows(results)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(_HEAD) - 1)]
    return ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)) + "  " + row[-1] for row in rows]
