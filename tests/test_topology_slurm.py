"""--topology slurm: the switch tree the running Slurm holds, read from `scontrol show topology`. The
parser is tested on what Slurm 22.05 printed for the test cluster's topology.conf; the live read on the
real test Slurm cluster is in tests/slurm/test_slurm.py; here, what a missing, failing or tree-less
scontrol does (a stand-in at that boundary: this machine has one Slurm, configured with a tree)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from clustercheck.errors import UserError
from clustercheck.exitcodes import Exit
from clustercheck.localize import parse_topology_conf, read_topology
from clustercheck.localize.topology import SCONTROL, for_nodes, slurm_topology
from evidence import FIXTURES

pytestmark = pytest.mark.pool  # starts real rank pools or whole runs: `pytest -m 'not pool'` leaves it out

CAPTURE = FIXTURES / "slurm" / "scontrol-show-topology-22.05.txt"
LEAVES = {"ccnode1": "ccleaf1", "ccnode2": "ccleaf1", "ccnode3": "ccleaf2"}
PARENTS = {"ccleaf1": "ccspine", "ccleaf2": "ccspine"}

# scontrol's form of a three-level tree (topology.conf(5)'s EXAMPLE shape): a switch above others lists
# every node below it in Nodes=, which topology.conf itself never does.
THREE_LEVELS = """\
SwitchName=s0 Level=0 LinkSpeed=1 Nodes=dev[0-3]
SwitchName=s1 Level=0 LinkSpeed=1 Nodes=dev[4-7]
SwitchName=s2 Level=0 LinkSpeed=1 Nodes=dev[8-11]
SwitchName=s3 Level=1 LinkSpeed=1 Nodes=dev[0-7] Switches=s[0-1]
SwitchName=s4 Level=2 LinkSpeed=1 Nodes=dev[0-11] Switches=s[2-3]
"""


def test_what_slurm_22_05_printed_gives_each_node_its_leaf_and_each_leaf_its_spine() -> None:
    topo = parse_topology_conf(CAPTURE.read_text(), SCONTROL, scontrol=True)
    assert dict(topo.leaf_of) == LEAVES and dict(topo.parent_of) == PARENTS
    assert topo.crossed("ccnode1", "ccnode2") == () and topo.crossed("ccnode1", "ccnode3") == ("ccleaf1", "ccleaf2")


def test_a_switch_above_others_takes_its_nodes_from_them_not_from_its_own_nodes_list() -> None:
    topo = parse_topology_conf(THREE_LEVELS, SCONTROL, scontrol=True)
    assert topo.leaf("dev5") == "s1" and topo.leaf("dev9") == "s2"
    assert dict(topo.parent_of) == {"s0": "s3", "s1": "s3", "s2": "s4", "s3": "s4"}
    assert topo.crossed("dev0", "dev9") == ("s0", "s3", "s2")
    # read as a topology.conf, the same text is refused: Level is no key of that file, and the parents'
    # Nodes= would put every node under two switches
    with pytest.raises(UserError, match="unknown key"):
        parse_topology_conf(THREE_LEVELS, "topology.conf")
    with pytest.raises(UserError, match="already under switch"):
        parse_topology_conf(THREE_LEVELS.replace(" Level=0", "").replace(" Level=1", "").replace(" Level=2", ""))


def test_a_node_under_two_leaves_in_scontrols_answer_is_refused_naming_it() -> None:
    text = THREE_LEVELS.replace("Nodes=dev[8-11]", "Nodes=dev[7-11]")
    with pytest.raises(UserError, match="'dev7' is already under switch 's1'") as exc:
        parse_topology_conf(text, SCONTROL, scontrol=True)
    assert SCONTROL in str(exc.value) and ":3" in str(exc.value)


def stand_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stdout: str, stderr: str = "", code: int = 0) -> None:
    (tmp_path / "out.txt").write_text(stdout)
    (tmp_path / "err.txt").write_text(stderr)
    script = tmp_path / "scontrol"
    script.write_text(f"#!/bin/sh\n/bin/cat {tmp_path / 'out.txt'}\n/bin/cat {tmp_path / 'err.txt'} >&2\nexit {code}\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))


def test_a_slurm_without_a_tree_is_one_line_saying_what_to_set(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Slurm's answer without TopologyPlugin: nothing on stdout, exit 0, this error on stderr
    stand_in(tmp_path, monkeypatch, "", "scontrol: error: No topology information available\n")
    with pytest.raises(UserError) as exc:
        read_topology("slurm")
    said = str(exc.value)
    assert "holds no switch tree" in said and "No topology information available" in said
    assert "TopologyPlugin=topology/tree" in said and "\n" not in said


def test_a_failing_or_missing_scontrol_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stand_in(tmp_path, monkeypatch, "", "slurm_load_topo error: Unable to contact slurm controller\n", code=1)
    with pytest.raises(UserError, match="exited 1: slurm_load_topo error: Unable to contact slurm controller"):
        slurm_topology()
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(UserError, match="scontrol is not on PATH"):
        slurm_topology()


def test_a_run_node_missing_from_slurms_tree_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stand_in(tmp_path, monkeypatch, CAPTURE.read_text())
    topo = for_nodes("slurm", ["ccnode3", "ccnode1"])
    assert dict(topo.leaf_of) == {"ccnode3": "ccleaf2", "ccnode1": "ccleaf1"}
    with pytest.raises(UserError, match=r"1 node\(s\) are under no switch: vm") as exc:
        for_nodes("slurm", ["ccnode1", "vm"])
    assert SCONTROL in str(exc.value)


def test_a_file_named_like_the_word_is_read_by_its_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "slurm").write_text("SwitchName=s0 Nodes=a[1-2]\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # no scontrol: only the file can answer
    assert dict(read_topology("./slurm").leaf_of) == {"a1": "s0", "a2": "s0"}


def test_the_cli_refuses_a_tree_less_slurm_before_anything_runs(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text("#!/bin/sh\necho 'scontrol: error: No topology information available' >&2\n")
    (bin_dir / "scontrol").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    res = subprocess.run([sys.executable, "-m", "clustercheck", "run", "cpu-smoke", "--out", "out", "--topology",
                          "slurm"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    out = res.stdout + res.stderr
    assert res.returncode == Exit.BAD_INPUT, out
    assert "holds no switch tree" in out and "Traceback" not in out
    assert not any((tmp_path / "out").rglob("run.jsonl")) if (tmp_path / "out").exists() else True
