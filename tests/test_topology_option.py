"""--topology is read when the options resolve: a mistake in the file stops the run before anything
starts, with file, line and key, exit 4 and no traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from clustercheck.exitcodes import Exit

import pytest

pytestmark = pytest.mark.pool  # starts real rank pools or whole runs: `pytest -m 'not pool'` leaves it out


def _run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "clustercheck", "run", "cpu-smoke", "--out", "out", *args],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)


def test_a_bad_topology_file_is_refused_with_file_line_and_key(tmp_path: Path) -> None:
    (tmp_path / "topology.conf").write_text("SwitchName=s0 Nodes=n[1-2]\nSwitchName=s1 Nodez=n3\n")
    res = _run(tmp_path, "--topology", "topology.conf")
    out = res.stdout + res.stderr
    assert res.returncode == Exit.BAD_INPUT, out
    assert "topology.conf" in out and ":2" in out and "Nodez" in out and "Traceback" not in out
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").rglob("run.jsonl"))


def test_a_missing_topology_file_is_one_line(tmp_path: Path) -> None:
    res = _run(tmp_path, "--topology", "nowhere.conf")
    out = res.stdout + res.stderr
    assert res.returncode == Exit.BAD_INPUT and "cannot read the topology" in out and "Traceback" not in out


def test_a_topology_file_that_is_not_utf8_is_one_line_exit_4(tmp_path: Path) -> None:
    (tmp_path / "topo3.conf").write_bytes(b"\xff\xfe\x00")  # the audit's file; INTERNALERROR, exit 3, before
    res = _run(tmp_path, "--topology", "topo3.conf")
    out = res.stdout + res.stderr
    assert res.returncode == Exit.BAD_INPUT, out
    assert "topo3.conf: not UTF-8 text" in out and "Traceback" not in out and "INTERNALERROR" not in out
    assert len([line for line in out.splitlines() if line.strip()]) == 1, out
