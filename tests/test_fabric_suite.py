"""The shipped fabric suite and what the fabric adds to profiles and reports: the suite loads as shipped
(and from the wheel's data directory), `clustercheck run fabric` on one node skips every check saying why,
every 8-GPU profile carries a fabric rule with a public source, `platforms show` prints it, and the HTML and
JSON reports show each node's network facts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clustercheck.cli import main
from clustercheck.exitcodes import Exit
from clustercheck.judging.thresholds import load_profile
from clustercheck.suite.load import load_suite
from helpers import clustercheck_here, render_all
from test_sources import problems

ROOT = Path(__file__).resolve().parent.parent
EIGHT_GPU = ("h100-sxm-8x", "h200-sxm-8x", "b200-8x", "a100-sxm-8x", "a100-sxm-80gb-8x", "mi300x-8x", "mi325x-8x")


def test_the_fabric_suite_is_valid_multi_node_and_ships_in_the_package():
    suite = load_suite(ROOT / "suites" / "fabric.yaml")
    assert suite.name == "fabric" and all(c.min_nodes == 2 for c in suite.checks)
    by_id = {c.id: c for c in suite.checks}
    assert {(c.measure, c.scope) for c in suite.checks} >= {("all_reduce", "cluster"), ("all_gather", "cluster"),
                                                            ("all_reduce", "localize"), ("probe", "node"),
                                                            ("ib_write_bw", "node")}
    ring = by_id["allreduce-ring-all-nodes"]
    assert dict(ring.env)["NCCL_ALGO"] == "Ring" and ring.params["judge_at"] == 16 << 30
    assert by_id["allreduce-ring-pairs"].params["judge_at"] == 8 << 30  # 2 nodes reach the plateau at 8 GiB
    assert (ROOT / "clustercheck" / "data" / "suites" / "fabric.yaml").read_text() == \
        (ROOT / "suites" / "fabric.yaml").read_text()


@pytest.mark.pool
def test_run_fabric_on_one_node_skips_every_check_with_its_reason(tmp_path):
    res = clustercheck_here("run", "fabric", "--out", "out", cwd=tmp_path)
    assert res.returncode == Exit.NOTHING, res.stdout[-3000:] + res.stderr[-3000:]
    data = json.loads((tmp_path / "out" / "latest" / "results.json").read_text())
    assert {r["outcome"] for r in data["results"]} == {"skipped"} and len(data["results"]) == 6
    for r in data["results"]:
        assert r["message"].endswith("needs 2 nodes or more (min_nodes: it judges the network between nodes); this "
                                     "run has 1"), r["message"]
    assert data["run"]["facts"]["network"]["gdr"]["text"].startswith(("available", "not available"))


@pytest.mark.parametrize("name", EIGHT_GPU)
def test_every_8gpu_profile_has_a_fabric_rule_with_a_public_source_and_expects_rdma(name):
    profile = load_profile(ROOT / "thresholds" / f"{name}.yaml")
    assert profile.fabric is not None and profile.fabric.fraction == dict.fromkeys(
        ("all_reduce", "all_gather", "reduce_scatter"), 0.9) and profile.fabric.min_size == 8 << 30
    assert problems(profile.fabric.source) == [], profile.fabric.source
    assert profile.expect["net"] == "IB" and profile.expect["gdr"] is True


def test_platforms_show_prints_the_fabric_rule_with_its_source(capsys):
    assert main(["platforms", "show", "h100-sxm-8x"]) == 0
    out = capsys.readouterr().out.splitlines()
    (i,) = [n for n, line in enumerate(out) if line.startswith("  fabric (multi-node) ")]
    profile = Path(__file__).resolve().parents[1] / "thresholds" / "h100-sxm-8x.yaml"
    at = 1 + profile.read_text().splitlines().index("fabric:")  # the block's own line, wherever the file puts it
    assert out[i] == ("  fabric (multi-node) busbw >= 0.9 x line rate / 8 for multi-node all_reduce, all_gather, "
                      "reduce_scatter (Ring), judged at >= 8GiB; line rate read from the nodes' RDMA ports "
                      f"(thresholds/h100-sxm-8x.yaml:{at} fabric)")
    assert out[i + 1].startswith("      source: NVIDIA's NCCL maintainers expect 46-48 GB/s per ConnectX-7 NDR 400 Gb/s "
                                 "NIC with Ring") and "https://github.com/NVIDIA/nccl-tests/issues/290" in out[i + 1]


def test_the_html_and_json_reports_show_each_nodes_network(tmp_path):
    from test_fabric_facts import p5

    from clustercheck.fabric import rdma

    net = rdma.read(p5(tmp_path), proc_root=tmp_path / "proc", kernel="6.8.0").as_dict()
    header = {"type": "run", "schema": 1, "started": "2026-01-01T00:00:00+00:00", "argv": ["clustercheck", "run"],
              "platform": "cpu", "platform_detected": True, "facts": {"host": "p5-a", "network": net},
              "node_facts": {"p5-a": {"host": "p5-a", "network": net}, "p5-b": {"host": "p5-b", "network": net}},
              "thresholds": {"file": "thresholds/cpu.yaml", "sha256": "ab"}, "suites": [], "launcher": "hosts",
              "backend": "gloo", "ranks": 4}
    record = tmp_path / "run.jsonl"
    record.write_text(json.dumps(header) + "\n")
    (tmp_path / "out").mkdir()
    paths = render_all(record, tmp_path / "out")
    html = paths["html"].read_text()
    assert html.count("<h3>p5-a</h3>") == 1 and "<h3>p5-b</h3>" in html and "Network (per node)" in html
    assert "<td>rdmap79s0/1</td><td class=\"passed\">ACTIVE</td><td>LinkUp</td><td>100 Gb/sec</td>" in html
    assert "<td>0000:53:00.0</td><td>PIX</td><td class=\"small\">0000:4f:00.0 16 GT/s x8</td>" in html
    assert "line rate 100 Gb/s (1 active of 1 GPU-facing port(s))" in html
    data = json.loads(paths["json"].read_text())
    assert data["run"]["node_facts"]["p5-b"]["network"]["nic_paths"]["rdmap79s0"]["level"] == "PIX"


@pytest.mark.pool
@pytest.mark.parametrize("value", ["0", "-800", "fast"])
def test_run_refuses_a_line_rate_that_is_not_a_positive_number_in_one_line(tmp_path, value):
    res = clustercheck_here("run", "fabric", "--out", "out", "--expect", f"fabric_gbps={value}", cwd=tmp_path)
    assert res.returncode == Exit.BAD_INPUT and "Traceback" not in res.stderr
    (line,) = [ln for ln in (res.stdout + res.stderr).splitlines() if "fabric_gbps" in ln]
    assert line.startswith("ERROR: --expect: fabric_gbps: expected "), line
    assert not (tmp_path / "out" / "latest").exists()  # refused before anything ran
