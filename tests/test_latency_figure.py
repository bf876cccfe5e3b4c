"""A check judged on time per operation (a latency check: `time_us <= limit`) plots time against size with
its limit line, not busbw; a bandwidth check still plots busbw."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from test_reports import write_record

from helpers import render_all
from clustercheck.report.figures import plot, sweep_metric

SIZES = (8, 64, 512, 4096)


def _rows() -> list[dict[str, Any]]:  # time per op grows with size while busbw is tiny: the two plots differ
    return [{"size": s, "count": s // 4, "dtype": "float32", "time_us": 100.0 + s / 10, "algbw": s / 1e6,
             "busbw": s / 1e6, "wrong": 0, "rank_time_us": [1.0, 1.0], "slowest_rank": 0} for s in SIZES]


def _latency_verdict(limit: float, unit: str = "us") -> dict[str, Any]:
    return {"metric": "time_us", "measured": 100.8, "unit": unit, "op": "<=", "limit": limit, "passed": True,
            "margin": 0.5, "worst": "rank 0", "expression": f"<= {limit}", "origin": "thresholds/cpu.yaml:16",
            "source": "own", "spec_sources": []}


def test_a_time_limit_plots_time_per_operation_with_its_limit() -> None:
    metric, unit, limit = sweep_metric([_latency_verdict(600.0)])
    assert (metric, unit, limit) == ("time_us", "us", 600.0)
    p = plot(_rows(), limit, metric, unit)
    assert p is not None and p["ylabel"] == "time per operation (us)" and p["limit"] == "600"
    values = [float(v) for _, _, _, v in p["series"][0]["dots"]]
    assert values == [100.8, 106.4, 151.2, 509.6]  # time_us per size, not busbw
    assert p["limit_y"] < p["x_axis_y"] and p["limit_y"] > p["top"]  # the limit line is inside the plot


def test_a_limit_in_ms_draws_the_rows_in_ms() -> None:
    metric, unit, limit = sweep_metric([_latency_verdict(0.6, "ms")])
    p = plot(_rows(), limit, metric, unit)
    assert p is not None and p["ylabel"] == "time per operation (ms)"
    assert float(p["series"][0]["dots"][-1][3]) == 0.5096


def test_a_bandwidth_check_still_plots_busbw() -> None:
    busbw = {**_latency_verdict(1.0, "GB/s"), "metric": "busbw", "op": ">="}
    assert sweep_metric([busbw]) == ("busbw", "GB/s", 1.0)
    assert sweep_metric([]) == ("busbw", "GB/s", None)


def test_the_html_report_draws_the_latency_check_as_time(tmp_path: Path) -> None:
    path = write_record(tmp_path / "run.jsonl")
    latency = {"type": "result", "name": "allreduce-small-latency[n1]", "check": "allreduce-small-latency",
               "node": "n1", "measure": "all_reduce", "scope": "node", "suite_file": "suites/s.yaml", "line": 21,
               "outcome": "passed", "duration": 0.4, "message": "", "verdicts": [_latency_verdict(600.0)],
               "rows": _rows(), "judged_at": 8, "finished": "2026-01-01T00:00:03+00:00"}
    with path.open("a") as f:
        f.write(json.dumps(latency) + "\n")
    html = render_all(path, tmp_path)["html"].read_text()
    start = html.index(">allreduce-small-latency[n1] <span")
    section = html[start:html.find("<h2 ", start)]
    assert 'aria-label="time per operation (us) against size' in section and ">time per operation (us)</text>" in section
    svg = section[section.index("<svg"):section.index("</svg>")]
    assert ">limit 600</text>" in svg and "busbw" not in svg
    assert re.search(r'aria-label="busbw \(GB/s\) against size', html)  # the bandwidth check beside it is unchanged
