"""The report's figures as plain coordinates and labels (no markup; the template draws them): busbw against
size per check (one line per placement), the same per node with every collective overlaid, the p2p matrix
of a node as a heatmap, and a bar chart of per-GPU (per-rank) results."""

from __future__ import annotations

import math
import re
import statistics
from typing import Any, Mapping, Sequence

from clustercheck.units import convert, fmt, format_size, is_finite_number

W, H = 420, 220
PLACEMENT_ORDER = ("out", "in")
PLACEMENT_LABEL = {"out": "out-of-place", "in": "in-place"}
# A categorical palette (Tableau 10, reordered so the first two differ in hue and lightness).
COLOURS = ("#1f5fbf", "#e07b00", "#2a9d4b", "#c0392b", "#7b4fb3", "#8c564b", "#c2418f", "#5f6b73",
           "#9a9a1a", "#178c99")
FAIL = "#b3261e"


def _short(value: float) -> str:
    """A cell or bar label: three significant figures, no exponent (376, 52.1, 0.915)."""
    if value >= 100:
        return f"{value:.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.3g}"


def nice_max(value: float) -> float:
    """The axis end at or above `value`: 1, 2, 2.5, 4 or 5 (or 6, 8) times a power of ten, so that quarter
    ticks read as round numbers (0, 15, 30, 45, 60)."""
    if not value > 0:
        return 1.0
    scale = 10.0 ** math.floor(math.log10(value))
    return next(m * scale for m in (1, 1.2, 1.6, 2, 2.4, 3, 4, 5, 6, 8, 10) if m * scale >= value * (1 - 1e-12))


def _natural(text: str) -> list[Any]:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", text)]


def _finite(v: Any) -> bool:
    return is_finite_number(v)


def _nan(v: Any) -> bool:
    """A measurement that measured nothing (NaN, an infinity): drawn as such, never left out as unmeasured."""
    return isinstance(v, float) and not math.isfinite(v)


NAN_FILL, NAN_TEXT = "#f6d5d2", "NaN: measured nothing"


def _nan_text(v: float) -> str:
    """A non-finite value as the JSON reports spell it: NaN, Infinity, -Infinity."""
    return "NaN" if math.isnan(v) else "Infinity" if v > 0 else "-Infinity"


# -- bandwidth against size -------------------------------------------------------------------------

def _xy_plot(series: list[tuple[str, list[tuple[int, float]]]], limit: float | None, w: int, h: int,
             legend: str, ylabel: str = "busbw (GB/s)", nan_sizes: Sequence[int] = ()) -> dict[str, Any] | None:
    """Lines of (size, value) on a log2 x axis, busbw unless `ylabel` names another. `legend`: "none", "top" (inside, top right) or "right"
    (a column beside the plot, for many series). `nan_sizes`: sizes that measured nothing, marked on the x axis."""
    series = [(label, pts) for label, pts in series if len(pts) >= 2]
    if not series:
        return None
    sizes = sorted({s for _, pts in series for s, _ in pts} | set(nan_sizes))
    if len(sizes) < 2:
        return None
    ymax, yticks, pad = _y_axis([b for _, pts in series for _, b in pts], limit)
    x0, x1 = math.log2(sizes[0]), math.log2(sizes[-1])
    legend_w = 180 if legend == "right" else 0
    right = 24 + legend_w  # room for half of the last size label (and the legend column)
    top = 10

    def sx(s: int) -> float:
        return round(pad + (math.log2(s) - x0) / (x1 - x0) * (w - pad - right), 1)

    def sy(y: float) -> float:
        return round(h - 34 - y / ymax * (h - 34 - top), 1)

    lines: list[dict[str, Any]] = []
    for i, (label, pts) in enumerate(series):
        colour = COLOURS[i % len(COLOURS)]
        lines.append({
            "label": label, "colour": colour, "points": " ".join(f"{sx(s)},{sy(b)}" for s, b in pts),
            "dots": [(sx(s), sy(b), format_size(s), fmt(b)) for s, b in pts]})
    step = max(1, math.ceil(len(sizes) / 6))
    keys = []
    if legend != "none" and len(lines) > 1:
        for i, line in enumerate(lines):
            label, _, sub = line["label"].partition("\n")
            if legend == "right":
                keys.append({"x": w - legend_w + 8, "y": top + 8 + 26 * i, "colour": line["colour"],
                             "label": label if len(label) <= 28 else label[:27] + "…", "sub": sub,
                             "title": line["label"].replace("\n", " ")})
            else:
                keys.append({"x": pad + 10, "y": top + 8 + 14 * i, "colour": line["colour"],
                             "label": label, "sub": "", "title": label})
        for line in lines:
            line["label"] = line["label"].replace("\n", " ")
    return {
        "w": w, "h": h, "series": lines, "legend_keys": keys, "ylabel": ylabel,
        "limit_y": sy(limit) if limit else None, "limit": fmt(limit) if limit else None,
        "xticks": [(sx(s), format_size(s)) for s in sizes][::step],
        "yticks": [(sy(y), label) for y, label in yticks],
        "x_axis_y": h - 34, "pad": pad, "x_end": w - right, "top": top,
        "nan_marks": [(sx(s), f"{format_size(s)}: {NAN_TEXT}") for s in sorted(set(nan_sizes))],
    }


def _y_axis(values: list[float], limit: float | None) -> tuple[float, list[tuple[float, str]], int]:
    """(top of the axis, its five ticks with labels, the left padding its longest label needs)."""
    ymax = nice_max(max(values + ([limit] if limit else [])) * 1.05)
    yticks = [(ymax * i / 4, fmt(round(ymax * i / 4, 6))) for i in range(5)]
    return ymax, yticks, max(44, 6 * max(len(label) for _, label in yticks) + 12)


def _points(rows: list[dict[str, Any]], key: str = "busbw", scale: float = 1.0) -> list[tuple[int, float]]:
    return sorted((r["size"], r[key] * scale) for r in rows if _finite(r.get(key)) and _finite(r.get("size")))


TIME_UNITS = ("us", "ms", "s")


def sweep_metric(verdicts: list[dict[str, Any]]) -> tuple[str, str, float | None]:
    """(row key, unit, limit) of what a sweep plots: time per operation when a limit is on a time (a latency
    check: `time_us <= 50000 us`; its rows carry time_us), else busbw with its limit, if any."""
    timed = next((v for v in verdicts if v.get("unit") in TIME_UNITS and _finite(v.get("limit"))
                  and v["metric"] == "time_us"), None)
    if timed is not None:
        return "time_us", timed["unit"], timed["limit"]
    return "busbw", "GB/s", next((v["limit"] for v in verdicts if v["metric"] == "busbw"), None)


def plot(rows: list[dict[str, Any]], limit: float | None, metric: str = "busbw",
         unit: str = "GB/s") -> dict[str, Any] | None:
    """`metric` (busbw, or time_us drawn in `unit`) against message size (log2 x axis), one line per
    placement (out-of-place, in-place) with a legend when there are two; None when there is nothing to draw."""
    by_placement: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_placement.setdefault(r.get("placement") or "", []).append(r)
    order = sorted(by_placement, key=lambda p: PLACEMENT_ORDER.index(p) if p in PLACEMENT_ORDER else 9)
    scale = convert(1.0, "us", unit) if metric == "time_us" else 1.0  # rows carry microseconds
    series = [(PLACEMENT_LABEL.get(p, p), _points(by_placement[p], metric, scale)) for p in order]
    label = f"time per operation ({unit})" if metric == "time_us" else f"{metric} ({unit})"
    # a size whose value is NaN has no point on the line: a mark on the axis says it measured nothing
    nan_sizes = sorted({r["size"] for r in rows if _finite(r.get("size")) and _nan(r.get(metric))})
    return _xy_plot(series, limit, W, H, legend="top", ylabel=label, nan_sizes=nan_sizes)


def _worse_placement(rows: list[dict[str, Any]]) -> list[tuple[int, float]]:
    """Per size the lower busbw of the placements measured (the one a check is judged on)."""
    best: dict[int, float] = {}
    for s, b in _points(rows):
        best[s] = min(b, best.get(s, b))
    return sorted(best.items())


def node_plot(items: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Every collective check of one node overlaid: busbw against size, a line per check (the worse
    placement at each size). None unless at least two checks have a curve (one is already drawn in its
    own section)."""
    series = [(f"{r['check']}\n{r.get('measure')}", _worse_placement(r.get("rows") or [])) for r in items
              if not (r.get("rows") or [{}])[0].get("subject")]
    series = [(label, pts) for label, pts in series if len(pts) >= 2]
    if len(series) < 2:
        return None
    return _xy_plot(series, None, 640, 260, legend="right")


# -- the p2p matrix ---------------------------------------------------------------------------------

# ColorBrewer YlGnBu (9 classes): light yellow for the slowest cells, deep blue for the fastest.
_SCALE = ("#ffffd9", "#edf8b1", "#c7e9b4", "#7fcdbb", "#41b6c4", "#1d91c0", "#225ea8", "#253494", "#081d58")
RATIO_LO, RATIO_HI = 0.8, 1.1  # the colour domain, relative to the node median (about +-10% is uniform)


def _rgb(hex_colour: str) -> tuple[int, int, int]:
    return int(hex_colour[1:3], 16), int(hex_colour[3:5], 16), int(hex_colour[5:7], 16)


def colour_for(ratio: float) -> str:
    """The sequential colour of a value at `ratio` x the node median (clamped to the domain)."""
    t = (min(max(ratio, RATIO_LO), RATIO_HI) - RATIO_LO) / (RATIO_HI - RATIO_LO) * (len(_SCALE) - 1)
    i = min(int(t), len(_SCALE) - 2)
    a, b = _rgb(_SCALE[i]), _rgb(_SCALE[i + 1])
    f = t - i
    return "#" + "".join(f"{round(x + (y - x) * f):02x}" for x, y in zip(a, b))


def _text_colour(fill: str) -> str:
    r, g, b = _rgb(fill)
    return "#fff" if 0.299 * r + 0.587 * g + 0.114 * b < 140 else "#111"


def heatmap(result: Mapping[str, Any]) -> dict[str, Any] | None:
    """The node's p2p matrix: rows are source GPUs, columns destinations, the diagonal blank; each cell
    coloured by its median bandwidth relative to the node median, labelled in GB/s, outlined when a
    verdict on that pair (either direction's, or the pair's bidirectional one) failed."""
    cells: dict[tuple[str, str], dict[str, Any]] = {}
    for row in result.get("rows") or []:
        m = re.fullmatch(r"(.+?)->(.+)", str(row.get("subject", "")))
        if m and row.get("metric") == "unidirectional" and (_finite(row.get("median")) or _nan(row.get("median"))):
            cells[(m.group(1), m.group(2))] = row
    if not cells:
        return None
    gpus = sorted({g for pair in cells for g in pair}, key=_natural)
    measured = [row["median"] for row in cells.values() if _finite(row["median"])]
    mid = statistics.median(measured) if measured else 0.0
    failed: dict[tuple[str, str], list[str]] = {}
    for v in result.get("verdicts") or []:
        subject = v.get("subject") or ""
        if v.get("passed") or not subject:
            continue
        if "<->" in subject:
            a, _, b = subject.partition("<->")
            pairs = [(a, b), (b, a)]
        else:
            a, _, b = subject.partition("->")
            pairs = [(a, b)]
        for pair in pairs:
            failed.setdefault(pair, []).append(f"{v['metric']} {fmt(v['measured'])} {v['unit']} "
                                               f"misses {v['op']} {fmt(v['limit'])}")
    n = len(gpus)
    cell_w, cell_h = max(38, min(60, 520 // n)), max(24, min(36, 360 // n))
    left, top = 52, 34
    grid: list[dict[str, Any]] = []
    for i, src in enumerate(gpus):
        for j, dst in enumerate(gpus):
            x, y = left + j * cell_w, top + i * cell_h
            if src == dst:
                grid.append({"x": x, "y": y, "diagonal": True})
                continue
            row = cells.get((src, dst))
            why = failed.get((src, dst), [])
            fails = "".join(f"; FAIL {w}" for w in why)
            if row is None:  # outlined all the same where a verdict on the pair failed
                grid.append({"x": x, "y": y, "missing": True, "failed": bool(why),
                             "title": f"{src} -> {dst}: not measured{fails}"})
                continue
            if _nan(row["median"]):  # a copy that measured nothing: failed where its verdict failed
                grid.append({"x": x, "y": y, "fill": NAN_FILL, "ink": "#111", "text": "NaN", "failed": bool(why),
                             "no_peer": row.get("peer_access") is False, "title": f"{src} -> {dst}: {NAN_TEXT}{fails}"})
                continue
            value = float(row["median"])
            ratio = value / mid if mid else 1.0
            fill = colour_for(ratio)
            peer = row.get("peer_access")
            title = (f"{src} -> {dst}: {fmt(value)} GB/s (min {fmt(row.get('min'))}, max {fmt(row.get('max'))}), "
                     f"{ratio:.2f} x node median" + ("; no peer access" if peer is False else "")
                     + fails)
            grid.append({"x": x, "y": y, "fill": fill, "ink": _text_colour(fill), "text": _short(value),
                         "failed": bool(why), "no_peer": peer is False, "title": title})
    grid_w, grid_h = n * cell_w, n * cell_h
    swatches = 7
    sw = max(30, grid_w // swatches)
    legend_y = top + grid_h + 30
    legend = []
    for k in range(swatches):
        ratio = RATIO_LO + (RATIO_HI - RATIO_LO) * k / (swatches - 1)
        label = f"{'≤' if k == 0 else '≥' if k == swatches - 1 else ''}{ratio:.2f}×"
        legend.append({"x": left + k * sw, "fill": colour_for(ratio), "label": label, "gbps": _short(ratio * mid)})
    return {
        "w": max(left + grid_w + 16, left + swatches * sw + 16, 360), "h": legend_y + 58,
        "cell_w": cell_w, "cell_h": cell_h, "left": left, "top": top, "grid_w": grid_w, "grid_h": grid_h,
        "rows": [(top + i * cell_h + cell_h / 2 + 4, g) for i, g in enumerate(gpus)],
        "cols": [(left + j * cell_w + cell_w / 2, g) for j, g in enumerate(gpus)],
        "cells": grid, "legend": legend, "legend_y": legend_y, "swatch_w": sw,
        "median": _short(mid) if measured else "-",
        "failed": sum(1 for c in grid if c.get("failed")), "pairs": len(cells), "gpus": n,
    }


# -- per-GPU (per-rank) results ---------------------------------------------------------------------

def bars(result: Mapping[str, Any]) -> dict[str, Any] | None:
    """A compact horizontal bar chart of per-subject results (host_device per GPU: h2d and d2h): a bar
    per subject and metric at its median, a whisker from min to max, the limit as a dashed line, bars of
    subjects whose verdict failed outlined."""
    # per-device rows only: pairs (GPU0->GPU1) belong to a matrix, which a p2p check draws as its heatmap
    rows = [r for r in result.get("rows") or [] if r.get("subject") and "->" not in str(r["subject"])
            and (_finite(r.get("median")) or _nan(r.get("median")))]
    if not rows:
        return None
    subjects = sorted(dict.fromkeys(r["subject"] for r in rows), key=_natural)
    metrics = list(dict.fromkeys(r["metric"] for r in rows))
    unit_of = {m: ((result.get("metrics") or {}).get(m) or {}).get("unit") for m in metrics}
    limits: dict[str, list[float]] = {}
    failed: set[tuple[str, str]] = set()
    for v in result.get("verdicts") or []:
        if v.get("metric") not in metrics:
            continue
        if not v.get("passed") and v.get("subject"):
            failed.add((v["subject"], v["metric"]))
        try:
            value = convert(float(v["limit"]), v["unit"], unit_of[v["metric"]] or v["unit"])
        except (KeyError, ValueError, TypeError):
            continue
        if value not in limits.setdefault(v["metric"], []):
            limits[v["metric"]].append(value)
    xmax = nice_max(max([float(r.get("max") if _finite(r.get("max")) else r["median"]) for r in rows
                         if _finite(r["median"])] + [x for xs in limits.values() for x in xs] + [0.0]) * 1.04)
    bar_h, gap, group_gap = 11, 2, 8
    left, right, top = 64, 56, 18
    w = 520
    span = w - left - right

    def sx(value: float) -> float:
        return round(left + max(value, 0.0) / xmax * span, 1)

    colour = {m: COLOURS[i % len(COLOURS)] for i, m in enumerate(metrics)}
    by_key = {(r["subject"], r["metric"]): r for r in rows}
    items, labels = [], []
    y = top
    for s in subjects:
        present = [m for m in metrics if (s, m) in by_key]
        group_h = len(present) * (bar_h + gap) - gap
        labels.append((y + group_h / 2 + 4, s))
        for m in present:
            r = by_key[(s, m)]
            bad = " FAIL" if (s, m) in failed else ""
            if _nan(r["median"]):  # no bar to draw: its label says what it measured, outlined where it failed
                items.append({"y": y, "x_end": left, "colour": colour[m], "failed": (s, m) in failed, "lo": left,
                              "hi": left, "mid_y": y + bar_h / 2, "text": "NaN", "title": f"{s} {m}: {NAN_TEXT}{bad}"})
                y += bar_h + gap
                continue
            lo = r.get("min") if _finite(r.get("min")) else r["median"]
            hi = r.get("max") if _finite(r.get("max")) else r["median"]
            items.append({"y": y, "x_end": sx(r["median"]), "colour": colour[m], "failed": (s, m) in failed,
                          "lo": sx(lo), "hi": sx(hi), "mid_y": y + bar_h / 2, "text": _short(float(r["median"])),
                          "title": f"{s} {m}: median {fmt(r['median'])} {unit_of[m] or ''} "
                                   f"(min {fmt(lo)}, max {fmt(hi)})" + bad})
            y += bar_h + gap
        y += group_gap - gap
    bottom = y - group_gap + gap
    at: dict[float, list[str]] = {}  # one dashed line per limit value, naming every metric it applies to
    for m, xs in limits.items():
        for x in xs:
            at.setdefault(x, []).append(m)
    limit_lines = [{"x": sx(x), "label": f"{', '.join(ms)} limit {fmt(x)}"} for x, ms in at.items()]
    units = sorted({u for u in unit_of.values() if u})
    ticks = [(sx(xmax * k / 4), fmt(round(xmax * k / 4, 6))) for k in range(5)]
    return {
        "w": w, "h": bottom + 36 + 14 * len(limit_lines), "bar_h": bar_h, "left": left, "top": top,
        "bottom": bottom, "bars": items, "labels": labels, "ticks": ticks, "unit": ", ".join(units),
        "legend_keys": [{"x": left + 90 * i, "colour": colour[m], "label": m} for i, m in enumerate(metrics)],
        "limits": limit_lines, "x_end": left + span,
    }


def repetition_plot(points: list[tuple[int, float]], limit: float | None, ylabel: str, w: int = 520,
                    h: int = 180) -> dict[str, Any] | None:
    """A burn-in item's judged metric against its repetition number (linear x axis), with the limit line:
    a card that slows as it heats, or one bad hour among good ones, shows as a slope or a dip."""
    pts = [(i, v) for i, v in points if _finite(v)]
    # a repetition that read NaN (and failed) is marked on the axis, as plot() marks a size: left out, the
    # line read as every repetition measured
    nans = [(i, v) for i, v in points if _nan(v)]
    if len(pts) + len(nans) < 2:
        return None
    ymax, yticks, pad = _y_axis([v for _, v in pts] or [0.0], limit)
    right, top, n = 24, 10, max(i for i, _ in pts + nans)

    def sx(i: int) -> float:
        return round(pad + (i - 1) / max(1, n - 1) * (w - pad - right), 1)

    def sy(y: float) -> float:
        return round(h - 34 - y / ymax * (h - 34 - top), 1)

    step = max(1, math.ceil(n / 10))
    return {"w": w, "h": h, "ylabel": ylabel, "pad": pad, "x_end": w - right, "top": top, "x_axis_y": h - 34,
            "points": " ".join(f"{sx(i)},{sy(v)}" for i, v in pts),
            "dots": [(sx(i), sy(v), i, fmt(v)) for i, v in pts],
            "nan_marks": [(sx(i), i, _nan_text(v)) for i, v in nans],
            "xticks": [(sx(i), str(i)) for i in range(1, n + 1, step)],
            "yticks": [(sy(y), label) for y, label in yticks],
            "limit_y": sy(limit) if limit else None, "limit": fmt(limit) if limit else None}
