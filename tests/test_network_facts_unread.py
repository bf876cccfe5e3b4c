"""A node whose recorded network facts do not read (a `problems` entry of another shape: here one without its
`nic` field, as an edit or another version writes it): `clustercheck report` still writes every report and
shows it as that node's problem, naming the node, the other nodes as they are; the fabric floor counts that
node's line rate for nothing, as it does a node whose ports cannot be read, and says why naming it.
The record is a real one, made by `clustercheck run cpu-smoke`, then edited."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from clustercheck.fabric import rdma
from clustercheck.judging import fabric
from clustercheck.judging.thresholds import load_profile
from clustercheck.run.judge import fabric_of_header

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_fabric_facts import p5  # noqa: E402  (a real AWS p5 sysfs tree: one EFA port, ACTIVE at 100 Gb/s)

MALFORMED = {"subject": None, "text": "<b>x</b>", "unread": True}  # no `nic`: not as fabric/rdma.py writes it


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real run's directory (cpu-smoke on this machine's gloo ranks)."""
    cwd = tmp_path_factory.mktemp("run")
    out = subprocess.run([sys.executable, "-m", "clustercheck", "run", "cpu-smoke", "-q", "--out", "out"], cwd=cwd,
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    return (cwd / "out" / "latest").resolve()


def _edited(recorded: Path, tmp_path: Path, edit: Any) -> Path:
    """A copy of the real run with its header changed by `edit` and its reports removed (the report writes them)."""
    run = tmp_path / "run"
    shutil.copytree(recorded, run)
    lines = (run / "run.jsonl").read_text().splitlines()
    header = json.loads(lines[0])
    edit(header)
    lines[0] = json.dumps(header)
    (run / "run.jsonl").write_text("\n".join(lines) + "\n")
    for name in ("report.html", "junit.xml", "results.json", "sla.json", "ctrf.json"):
        (run / name).unlink(missing_ok=True)
    return run


def _report(run: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "clustercheck", "report", str(run)], capture_output=True, text=True)


def _network_section(html: str) -> str:
    return html[html.index('<h2 id="network">'):html.index('<h2 id="environment">')]


def test_a_malformed_problem_is_that_node_s_problem_in_the_report_and_the_report_is_written(recorded: Path, tmp_path: Path) -> None:
    host = json.loads((recorded / "run.jsonl").read_text().splitlines()[0])["facts"]["host"]

    def edit(header: dict[str, Any]) -> None:
        header["facts"]["network"]["problems"] = [MALFORMED]

    run = _edited(recorded, tmp_path, edit)
    out = _report(run)
    assert out.returncode == 0, out.stderr  # the run's own verdict: cpu-smoke passed; no harness error
    html = (run / "report.html").read_text()
    net = _network_section(html)
    assert f"<h3>{host}</h3>" in net
    said = f"{host}: network facts: problem {{&#39;subject&#39;: None, &#39;text&#39;: &#39;&lt;b&gt;x&lt;/b&gt;&#39;"
    assert said in net and "<b>x</b>" not in html, net  # named, escaped
    assert "line rate unknown: its network facts do not read" in net
    assert "no RDMA port" not in net  # nothing says what was not read
    assert "allreduce-sweep" in html and (run / "junit.xml").exists() and (run / "results.json").exists()


def test_one_node_s_malformed_facts_leave_the_other_nodes_shown(recorded: Path, tmp_path: Path) -> None:
    def edit(header: dict[str, Any]) -> None:
        good = header["facts"]
        bad = {**good, "network": {**good["network"], "problems": [MALFORMED]}}
        header["node_facts"] = {"node-a": good, "node-b": bad}

    run = _edited(recorded, tmp_path, edit)
    out = _report(run)
    assert out.returncode == 0, out.stderr
    net = _network_section((run / "report.html").read_text())
    a, b = net.split("<h3>node-b</h3>")
    assert "<h3>node-a</h3>" in a and "no RDMA port" in a and "network facts" not in a
    assert "node-b: network facts: problem" in b and "ports not known" in b


def _header_with(recorded: Path, nodes: dict[str, Any]) -> dict[str, Any]:
    header: dict[str, Any] = json.loads((recorded / "run.jsonl").read_text().splitlines()[0])
    header["node_facts"] = {n: {**header["facts"], "host": n, "network": net} for n, net in nodes.items()}
    return header


def test_the_fabric_floor_counts_a_malformed_node_as_one_whose_ports_cannot_be_read(recorded: Path, tmp_path: Path) -> None:
    profile = load_profile(recorded / "inputs" / "thresholds" / "cpu.yaml")
    good = rdma.read(p5(tmp_path / "a"), proc_root=tmp_path / "proc", kernel="6.8.0").as_dict()
    bad = {**good, "problems": [MALFORMED]}
    unreadable = {**good, "problems": [rdma.Problem("rdmap79s0/1", "rdmap79s0/1: state cannot be read", True,
                                                    True).as_dict()]}

    # beside a healthy node: its rate sets the bar, exactly as beside a node whose port state could not be read
    run = fabric_of_header(_header_with(recorded, {"node1": bad, "node2": good}), profile)
    like = fabric_of_header(_header_with(recorded, {"node1": unreadable, "node2": good}), profile)
    assert run.node_rate is not None and run.node_rate[0] == 100.0 and run.node_rate == like.node_rate

    # alone: no line rate, the floor not judged, and the why names the node and its entry
    alone = fabric_of_header(_header_with(recorded, {"node1": bad}), profile)
    assert alone.node_rate is not None and alone.node_rate[0] is None
    assert "node1: its network facts have 1 problem(s): node1: network facts: problem " in alone.node_rate[1]
    rule = fabric.FabricRule()
    floor = fabric.floor(rule, "all_reduce", fabric.line_rate({}, rule, alone.node_rate), "c")
    assert isinstance(floor, str) and floor.startswith("not judged: network line rate unknown") and "node1" in floor


@pytest.mark.parametrize("raw", [["not", "a", "mapping"], {"ports": [{"device": "mlx5_0"}]}, {"gdr": {"kernel": "6"}}])
def test_facts_of_any_other_shape_are_why_naming_the_node_never_a_crash(raw: Any) -> None:
    why = fabric.node_net("node7", raw)
    assert isinstance(why, str) and why.startswith("node7: network facts"), why
