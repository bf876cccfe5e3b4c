"""Self-contained HTML report: one autoescaped jinja2 template, inline CSS and SVG, no script, no network."""

from __future__ import annotations

import math
from typing import Any

from jinja2 import Environment, PackageLoader, select_autoescape

from clustercheck.results import counts, fmt, fmt_margin
from clustercheck.units import format_size

_env = Environment(loader=PackageLoader("clustercheck.report", "templates"),
                   autoescape=select_autoescape(default=True, default_for_string=True))
_env.filters["num"] = fmt
_env.filters["size"] = format_size
_env.filters["margin"] = lambda v: fmt_margin(v["margin"], v["limit"])

W, H, PAD = 420, 220, 44


def plot(rows: list[dict[str, Any]], limit: float | None) -> dict[str, Any] | None:
    """busbw against message size (log2 x axis) as SVG coordinates; None when there is nothing to draw."""
    pts = [(r["size"], r["busbw"]) for r in rows if r.get("busbw") is not None and r["busbw"] == r["busbw"]]
    if len(pts) < 2:
        return None
    xs = [math.log2(s) for s, _ in pts]
    ymax = max([b for _, b in pts] + ([limit] if limit else [])) * 1.1 or 1.0
    x0, x1 = min(xs), max(xs)

    def sx(x: float) -> float:
        return round(PAD + (x - x0) / (x1 - x0) * (W - PAD - 10), 1)

    def sy(y: float) -> float:
        return round(H - PAD + 10 - y / ymax * (H - PAD - 10), 1)

    return {
        "w": W, "h": H, "points": " ".join(f"{sx(x)},{sy(b)}" for x, (_, b) in zip(xs, pts)),
        "dots": [(sx(x), sy(b), format_size(s), fmt(b)) for x, (s, b) in zip(xs, pts)],
        "limit_y": sy(limit) if limit else None, "limit": fmt(limit) if limit else None,
        "xticks": [(sx(x), format_size(s)) for x, (s, _) in zip(xs, pts)][:: max(1, len(pts) // 6)],
        "yticks": [(sy(ymax * i / 4), fmt(round(ymax * i / 4, 3))) for i in range(5)],
        "x_axis_y": H - PAD + 10, "pad": PAD,
    }


def render_html(header: dict[str, Any], results: list[dict[str, Any]], end: dict[str, Any] | None) -> str:
    checks = []
    for r in results:
        busbw_limit = next((v["limit"] for v in r.get("verdicts") or [] if v["metric"] == "busbw"), None)
        checks.append({**r, "plot": plot(r.get("rows") or [], busbw_limit)})
    by_node: dict[str, dict[str, int]] = {}
    for r in results:
        node = r.get("node") or "(cluster)"
        by_node.setdefault(node, dict.fromkeys(("passed", "failed", "error", "skipped"), 0))[r["outcome"]] += 1
    return _env.get_template("report.html.j2").render(
        run=header, end=end, results=checks, counts=counts(results), by_node=by_node,
        facts=header.get("facts") or {})
