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

W, H = 420, 220


def plot(rows: list[dict[str, Any]], limit: float | None) -> dict[str, Any] | None:
    """busbw against message size (log2 x axis) as SVG coordinates; None when there is nothing to draw."""
    pts = [(r["size"], r["busbw"]) for r in rows if r.get("busbw") is not None and r["busbw"] == r["busbw"]]
    if len(pts) < 2:
        return None
    xs = [math.log2(s) for s, _ in pts]
    ymax = max([b for _, b in pts] + ([limit] if limit else [])) * 1.1 or 1.0
    x0, x1 = min(xs), max(xs)
    yticks = [(ymax * i / 4, fmt(round(ymax * i / 4, 3))) for i in range(5)]
    pad = max(44, 6 * max(len(label) for _, label in yticks) + 12)  # room for the longest y label
    right = 24  # room for half of the last size label

    def sx(x: float) -> float:
        return round(pad + (x - x0) / (x1 - x0) * (W - pad - right), 1)

    def sy(y: float) -> float:
        return round(H - 34 - y / ymax * (H - 44), 1)

    return {
        "w": W, "h": H, "points": " ".join(f"{sx(x)},{sy(b)}" for x, (_, b) in zip(xs, pts)),
        "dots": [(sx(x), sy(b), format_size(s), fmt(b)) for x, (s, b) in zip(xs, pts)],
        "limit_y": sy(limit) if limit else None, "limit": fmt(limit) if limit else None,
        "xticks": [(sx(x), format_size(s)) for x, (s, _) in zip(xs, pts)][:: max(1, len(pts) // 6)],
        "yticks": [(sy(y), label) for y, label in yticks],
        "x_axis_y": H - 34, "pad": pad, "x_end": W - right,
    }


def environment(header: dict[str, Any]) -> list[tuple[str, str]]:
    """Facts as (name, text) rows; nested mappings (versions) flattened to `versions.torch`."""
    rows: list[tuple[str, str]] = []
    for key, value in (header.get("facts") or {}).items():
        if isinstance(value, dict):
            rows += [(f"{key}.{k}", "-" if v is None else str(v)) for k, v in value.items()]
        elif isinstance(value, list):
            rows.append((key, ", ".join(f"0x{v:04x}" if key == "pci_device_ids" and isinstance(v, int) else str(v)
                                        for v in value) or "-"))
        else:
            rows.append((key, "-" if value is None else str(value)))
    return rows


def render_html(header: dict[str, Any], results: list[dict[str, Any]], end: dict[str, Any] | None,
                sla: dict[str, Any] | None = None) -> str:
    checks = []
    for i, r in enumerate(results, 1):
        busbw_limit = next((v["limit"] for v in r.get("verdicts") or [] if v["metric"] == "busbw"), None)
        checks.append({**r, "anchor": f"check-{i}", "plot": plot(r.get("rows") or [], busbw_limit)})
    by_node: dict[str, dict[str, int]] = {}
    node_items: dict[str, list[dict[str, Any]]] = {}
    for r in checks:
        node = r.get("node") or "(cluster)"
        by_node.setdefault(node, dict.fromkeys(("passed", "failed", "error", "skipped"), 0))[r["outcome"]] += 1
        node_items.setdefault(node, []).append(r)
    return _env.get_template("report.html.j2").render(
        run=header, end=end, results=checks, counts=counts(results), by_node=by_node, node_items=node_items,
        facts=header.get("facts") or {}, environment=environment(header), sla=sla)
