"""SLA evidence (sla.json and the HTML section) and the per-node drill-down, from a run record."""

from __future__ import annotations

import json
import math
from pathlib import Path

from test_reports import EVIL, write_record

from helpers import render_all
from clustercheck.report.sla import spread


def test_sla_json_has_threshold_source_sizes_and_environment(tmp_path: Path) -> None:
    paths = render_all(write_record(tmp_path / "run.jsonl"), tmp_path)
    sla = json.loads(paths["sla"].read_text())
    assert sla["schema"] == 1 and sla["platform"] == "cpu" and sla["complete"] is False  # no `end` line
    assert sla["environment"]["facts"]["host"] == EVIL
    assert sla["inputs"]["thresholds"] == {"file": "thresholds/cpu.yaml", "sha256": "ab"}
    first, error, skipped = sla["checks"]
    assert first["id"] == f"s::{EVIL}[{EVIL}]" and first["sizes"] == [1024, 4096, 16384] and first["judged_at"] == 16384
    m = first["metrics"][0]
    assert m["threshold"] == {"op": ">=", "value": 1.0, "expression": ">= 1.0", "source": "a source & more",
                              "origin": "thresholds/cpu.yaml:9"}
    assert m["measured"] == 0.1 and m["spread"] is None  # this record kept no per-iteration times
    assert error["metrics"] == [] and error["message"] == "rank 0 died" and skipped["outcome"] == "skipped"


def test_spread_over_iterations_scales_bandwidth_by_time() -> None:
    row = {"size": 1024, "time_us": 10.0, "iter_us_min": 8.0, "iter_us_median": 10.0, "iter_us_max": 20.0,
           "iter_us": [8.0, 10.0, 20.0]}
    r = {"judged_at": 1024, "rows": [row]}
    bw = spread(r, {"metric": "busbw", "unit": "GB/s", "measured": 2.0})
    assert bw is not None and bw["iterations"] == 3
    assert math.isclose(bw["min"], 1.0) and math.isclose(bw["median"], 2.0) and math.isclose(bw["max"], 2.5)
    t = spread(r, {"metric": "time_us", "unit": "us", "measured": 10.0})
    assert t == {"min": 8.0, "median": 10.0, "max": 20.0, "iterations": 3}
    assert spread(r, {"metric": "wrong", "unit": "count", "measured": 0}) is None


def test_html_sla_section_and_node_drill_down_are_escaped(tmp_path: Path) -> None:
    html = render_all(write_record(tmp_path / "run.jsonl"), tmp_path)["html"].read_text()
    assert '<h2 id="sla">SLA evidence</h2>' in html and '<h2 id="nodes">Nodes</h2>' in html
    sla = html[html.index('id="sla"'):html.index('id="environment"')]
    assert "a source &amp; more" in sla and "judged at 16KiB" in sla and "FAIL" in sla
    nodes = html[html.index('id="nodes"'):html.index('id="checks"')]
    assert "<b>&lt;script&gt;alert(1)&lt;/script&gt;</b>" in nodes and "(cluster)" in nodes
    assert 'href="#check-1"' in nodes and '<h2 id="check-1">' in html
    assert "<script" not in html


def test_sla_json_and_html_name_the_nccl_the_ranks_loaded() -> None:
    """sla.json's `software` and the HTML environment's `ranks.nccl` come from the ranks (the NCCL that ran,
    fabric/nccl_lib.py), as the signed statement's versions do; a run without NCCL ranks shows none."""
    from clustercheck.report.html import environment
    from clustercheck.report.sla import evidence

    header = {"type": "run", "platform": "h100-sxm-1x",
              "facts": {"driver": "580.159.04", "versions": {"torch": "2.11.0"}}}
    ranks = [{"rank": r, "nccl": "2.30.7", "nccl_torch_built": "2.28.9", "cuda": "13.0"} for r in range(2)]
    results = [{"type": "result", "name": "ar", "check": "ar", "node": None, "outcome": "passed", "verdicts": [],
                "suite_file": "s.yaml", "line": 3, "pool": {"ranks": ranks}}]
    software = evidence(header, results, None)["environment"]["software"]  # type: ignore[arg-type]
    assert software["nccl"] == "2.30.7" and software["cuda"] == "13.0" and software["driver"] == "580.159.04"
    rows = dict(environment(header, results))
    assert rows["ranks.nccl"] == "2.30.7" and rows["ranks.cuda"] == "13.0" and rows["versions.torch"] == "2.11.0"
    assert "ranks.nccl" not in dict(environment(header, []))


def test_each_sla_metric_names_its_gpu_in_sla_json_and_the_html(tmp_path: Path) -> None:
    """An item judges many GPUs (pairs, links): the buyer's evidence must say which one failed, not only
    `h2d FAIL`."""
    import re

    from gpu_record import H2D_SLOW_GPU, write_gpu_record

    paths = render_all(write_gpu_record(tmp_path / "run.jsonl"), tmp_path)
    sla = json.loads(paths["sla"].read_text())
    h2d = next(c for c in sla["checks"] if c["check"] == "h2d-d2h")
    failed = [(m["subject"], m["metric"]) for m in h2d["metrics"] if not m["passed"]]
    assert failed == [(H2D_SLOW_GPU, "h2d")] and H2D_SLOW_GPU == "GPU4"
    assert {m["subject"] for m in h2d["metrics"]} == {f"GPU{i}" for i in range(8)}
    html = paths["html"].read_text()
    section = html[html.index('id="sla"'):]
    rows = [re.sub(r"\s+", " ", row) for row in re.findall(r"<tr><td>[^<]*h2d-d2h[^<]*</td>.*?</tr>", section, re.S)]
    assert [row for row in rows if "FAIL" in row] and all("<td>GPU4 h2d</td>" in row for row in rows if "FAIL" in row)
