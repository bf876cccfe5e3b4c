"""The report's figures from a hand-made 8-GPU record: the p2p heatmap, one busbw line per placement,
the per-node overlay of every collective, and the per-GPU bar chart."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpu_record import BIDIR_FAIL, GPUS, H2D_SLOW_GPU, NO_PEER, SLOW, p2p_result, write_gpu_record

from helpers import render_all
from clustercheck.report.figures import RATIO_HI, RATIO_LO, bars, colour_for, heatmap, node_plot, plot


def _html(tmp_path: Path) -> str:
    return render_all(write_gpu_record(tmp_path / "run.jsonl"), tmp_path)["html"].read_text()


def _section(html: str, title: str) -> str:
    start = html.index(f">{title} <span")
    end = html.find("<h2 ", start)
    return html[start:end if end > 0 else len(html)]


def test_heatmap_cells_colours_and_outlines() -> None:
    m = heatmap(p2p_result())
    assert m is not None and m["gpus"] == GPUS and m["pairs"] == GPUS * (GPUS - 1)
    cells = m["cells"]
    assert len(cells) == GPUS * GPUS and sum(1 for c in cells if c.get("diagonal")) == GPUS
    assert [g for _, g in m["rows"]] == [f"GPU{i}" for i in range(GPUS)]  # natural order, rows = sources
    by_pair = {c["title"].split(":")[0]: c for c in cells if "title" in c}
    slow = by_pair[f"{SLOW[0]} -> {SLOW[1]}"]
    assert slow["text"] == "210" and slow["fill"] == colour_for(0.0) and slow["failed"]
    # every pair that missed a limit is outlined: the slow one, both no-peer ones, and both directions
    # of the pair whose bidirectional sum failed
    outlined = {t for t, c in by_pair.items() if c["failed"]}
    a, b = BIDIR_FAIL
    assert outlined == {f"{SLOW[0]} -> {SLOW[1]}", *(f"{x} -> {y}" for x, y in NO_PEER), f"{a} -> {b}", f"{b} -> {a}"}
    assert all(by_pair[f"{x} -> {y}"]["no_peer"] for x, y in NO_PEER)
    assert "FAIL bidirectional 601 GB/s misses >= 670" in by_pair[f"{a} -> {b}"]["title"]
    assert m["median"] == "376"
    assert [k["label"] for k in m["legend"]][0] == "≤0.80×" and m["legend"][-1]["label"] == "≥1.10×"


def test_nice_axis_ends() -> None:
    from clustercheck.report.figures import nice_max

    assert [nice_max(v) for v in (57.4, 60.0, 0.0, 1.3e-6, 411.0, 990.0)] == [
        60.0, 60.0, 1.0, pytest.approx(1.6e-6), 500.0, 1000.0]


def test_colour_scale_is_sequential_and_clamped() -> None:
    steps = [colour_for(RATIO_LO + (RATIO_HI - RATIO_LO) * k / 20) for k in range(21)]
    lightness = [sum(int(c[i:i + 2], 16) for i in (1, 3, 5)) for c in steps]
    assert lightness == sorted(lightness, reverse=True)  # darker as the value rises
    assert colour_for(0.1) == colour_for(RATIO_LO) and colour_for(5.0) == colour_for(RATIO_HI)


def test_heatmap_in_the_p2p_section(tmp_path: Path) -> None:
    html = _html(tmp_path)
    section = _section(html, "p2p-matrix[node7]")
    assert section.count('class="heatmap"') == 1
    assert section.count('<g class="cell') == GPUS * (GPUS - 1)
    assert section.count('class="diagonal"') == GPUS
    assert section.count('stroke="#b3261e" stroke-width="3"') == 5 + 1  # 5 outlined cells and the legend key
    assert section.count(">no P2P</text>") == 2
    assert "node median of 376 GB/s" in section and "5 pair(s) outlined" in section
    assert 'class="bars"' not in section and 'class="plot"' not in section


def test_two_placements_draw_two_lines_with_a_legend(tmp_path: Path) -> None:
    html = _html(tmp_path)
    gather = _section(html, "allgather-sweep[node7]")
    assert gather.count("<polyline") == 2
    assert re.search(r">out-of-place</text>", gather) and re.search(r">in-place</text>", gather)
    reduce = _section(html, "allreduce-sweep[node7]")
    assert reduce.count("<polyline") == 1 and "-place</text>" not in reduce  # one placement: no legend
    p = plot(p2p_result()["rows"], None)
    assert p is None  # rows without sizes draw no curve


def test_node_overlay_of_every_collective(tmp_path: Path) -> None:
    html = _html(tmp_path)
    nodes = html[html.index('<h2 id="nodes">'):html.index('<h2 id="checks">')]
    assert nodes.count('class="overlay"') == 1
    overlay = nodes[nodes.index('class="overlay"'):nodes.index("</svg>", nodes.index('class="overlay"'))]
    assert overlay.count("<polyline") == 3
    for check, measure in (("allreduce-sweep", "all_reduce"), ("allgather-sweep", "all_gather"),
                           ("reducescatter-sweep", "reduce_scatter")):
        assert f"</title>{check}</text>" in overlay and f'class="tiny">{measure}</text>' in overlay
    assert 'x="{' not in overlay and "1GiB" in overlay and "1MiB" in overlay  # log2 axis labels


def test_node_overlay_needs_two_curves() -> None:
    from gpu_record import collective_result

    one = collective_result("a", "all_reduce", ("in",), 400.0)
    assert node_plot([one]) is None
    both = node_plot([one, collective_result("b", "all_gather", ("out", "in"), 360.0)])
    assert both is not None and len(both["series"]) == 2
    # the all_gather line is the worse placement at each size (out-of-place here)
    ag = [r for r in collective_result("b", "all_gather", ("out", "in"), 360.0)["rows"] if r["placement"] == "out"]
    assert len(both["series"][1]["dots"]) == len(ag)


def test_bar_chart_of_per_gpu_results(tmp_path: Path) -> None:
    from gpu_record import host_device_result

    b = bars(host_device_result())
    assert b is not None and len(b["bars"]) == 2 * GPUS
    assert [s for _, s in b["labels"]] == [f"GPU{i}" for i in range(GPUS)]
    failed = [i for i in b["bars"] if i["failed"]]
    assert len(failed) == 1 and failed[0]["title"].startswith(f"{H2D_SLOW_GPU} h2d: median 26.1 GB/s")
    assert [l["label"] for l in b["limits"]] == ["h2d, d2h limit 48"]  # one line for a shared limit
    assert [label for _, label in b["ticks"]] == ["0", "15", "30", "45", "60"]
    assert b["unit"] == "GB/s"
    section = _section(_html(tmp_path), "h2d-d2h[node7]")
    assert section.count('class="bars"') == 1 and section.count(" FAIL</text>") == 1
    assert "per-device table" in section  # the numbers stay available as a table
    assert bars(p2p_result()) is None  # pairs get the heatmap, not bars


def test_node_table_folds_per_subject_verdicts(tmp_path: Path) -> None:
    html = _html(tmp_path)
    nodes = html[html.index('<h2 id="nodes">'):html.index('<h2 id="checks">')]
    assert '<span class="failed">FAIL unidirectional: 53 of 56 pass, worst GPU7-&gt;GPU6 20.8 GB/s (&gt;= 335)</span>' in nodes
    assert '<span class="failed">FAIL GPU1&lt;-&gt;GPU2 bidirectional 601 GB/s (&gt;= 670)</span>' in nodes  # a lone one
    assert "h2d: 7 of 8 pass, worst GPU4 26.1 GB/s" in nodes and "d2h: 8 of 8 pass" in nodes
    assert '<span class="passed">busbw ' in nodes  # check-wide verdicts as before


def test_terminal_table_names_the_subject(tmp_path: Path) -> None:
    from clustercheck.report.terminal import summary_lines
    from clustercheck.record.io import read_record

    _, results, _ = read_record(write_gpu_record(tmp_path / "run.jsonl"))
    lines = summary_lines(results)
    assert any(line.split()[:3] == ["h2d-d2h[node7]", "GPU4", "h2d"] and line.rstrip().endswith("FAIL") for line in lines)
    assert any(line.split()[:3] == ["allreduce-sweep[node7]", "busbw", "472.5"] for line in lines)


def test_a_failed_measurement_of_nan_is_drawn_failed_never_as_not_measured() -> None:
    """A pair (a GPU, a size) whose median is NaN measured nothing and failed: it was drawn as a grey
    'not measured' cell, left out of the outlined count, and dropped from the bars and the line plot."""
    from gpu_record import collective_result, host_device_result

    r = p2p_result()
    for row in r["rows"]:
        if row["subject"] == "GPU0->GPU1":
            row["median"] = float("nan")
    for v in r["verdicts"]:
        if v["subject"] == "GPU0->GPU1":
            v["measured"], v["margin"], v["passed"] = float("nan"), float("nan"), False
    before = heatmap(p2p_result())
    m = heatmap(r)
    assert m is not None and before is not None
    cell = next(c for c in m["cells"] if c.get("title", "").startswith("GPU0 -> GPU1"))
    assert not cell.get("missing") and cell["failed"] and cell["text"] == "NaN"
    assert cell["title"].startswith("GPU0 -> GPU1: NaN: measured nothing; FAIL unidirectional nan GB/s")
    assert m["failed"] == before["failed"] + 1 and m["pairs"] == before["pairs"]

    h = host_device_result()
    for row in h["rows"]:
        if (row["subject"], row["metric"]) == ("GPU2", "d2h"):
            row["median"] = float("nan")
    for v in h["verdicts"]:
        if (v["subject"], v["metric"]) == ("GPU2", "d2h"):
            v["measured"], v["passed"] = float("nan"), False
    b = bars(h)
    assert b is not None and len(b["bars"]) == 2 * GPUS
    nan_bar = next(i for i in b["bars"] if i["title"].startswith("GPU2 d2h"))
    assert nan_bar["failed"] and nan_bar["text"] == "NaN" and nan_bar["title"] == "GPU2 d2h: NaN: measured nothing FAIL"

    sweep = collective_result("allreduce-sweep", "all_reduce", ("in",), 480.0)
    rows = sweep["rows"]
    rows[-1] = {**rows[-1], "busbw": float("nan")}
    p = plot(rows, 100.0)
    assert p is not None and p["nan_marks"] and p["nan_marks"][-1][1].endswith(": NaN: measured nothing")
