"""report.html's network section names every node of the run: one whose first rank reported no network
facts, one the record holds no facts of, and one that never joined each get a row that says their network
facts were not read and why, beside the nodes whose facts read (a real AWS p5 sysfs tree)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from helpers import render_all

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_fabric_facts import p5  # noqa: E402  (a real AWS p5 sysfs tree: one EFA port, ACTIVE at 100 Gb/s)

from clustercheck.fabric import rdma  # noqa: E402


def _header(**extra: Any) -> dict[str, Any]:
    return {"type": "run", "schema": 1, "started": "2026-01-01T00:00:00+00:00", "argv": ["clustercheck", "run"],
            "platform": "cpu", "platform_detected": True, "thresholds": {"file": "thresholds/cpu.yaml", "sha256": "ab"},
            "suites": [], "launcher": "join", "backend": "gloo", "ranks": 4, **extra}


def _network_section(tmp_path: Path, header: dict[str, Any]) -> str:
    record = tmp_path / "run.jsonl"
    record.write_text(json.dumps(header) + "\n")
    (tmp_path / "out").mkdir()
    html = render_all(record, tmp_path / "out")["html"].read_text()
    return html[html.index('<h2 id="network">'):html.index('<h2 id="environment">')]


def _block(net: str, node: str) -> str:
    """The node's own part of the section: from its heading to the next one."""
    start = net.index(f"<h3>{node}</h3>")
    end = net.find("<h3>", start + 1)
    return net[start:end if end != -1 else None]


def test_every_node_of_the_run_without_network_facts_has_a_row_saying_why(tmp_path: Path) -> None:
    net = rdma.read(p5(tmp_path), proc_root=tmp_path / "proc", kernel="6.8.0").as_dict()
    header = _header(facts={"host": "p5-a", "network": net},
                     nodes=["p5-a", "p5-b", "p5-c"],
                     node_facts={"p5-a": {"host": "p5-a", "network": net}, "p5-b": {"host": "p5-b", "gpu_count": 8}},
                     absent={"p5-d": "its agent never joined within 600 s"})
    section = _network_section(tmp_path, header)
    assert "line rate 100 Gb/s (1 active of 1 GPU-facing port(s))" in _block(section, "p5-a")
    assert "network facts not read: p5-b&#39;s first rank reported none" in _block(section, "p5-b")
    assert "network facts not read: the record holds no facts of p5-c" in _block(section, "p5-c")
    assert ("network facts not read: p5-d never joined (its agent never joined within 600 s)"
            in _block(section, "p5-d"))
    for node in ("p5-b", "p5-c", "p5-d"):  # nothing said of what was not read reads as a node without RDMA
        assert "no RDMA port" not in _block(section, node) and 'class="error not-read"' in _block(section, node)


def test_a_one_node_run_whose_facts_hold_no_network_facts_is_named(tmp_path: Path) -> None:
    section = _network_section(tmp_path, _header(facts={"host": "n1", "gpu_count": 0}, nodes=["n1"]))
    assert section.count("<h3>") == 1
    assert "network facts not read: n1&#39;s first rank reported none" in _block(section, "n1")
