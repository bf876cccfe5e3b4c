"""A reader that leaves (`clustercheck run failing.yaml | head -1`) changes no exit code: the command goes
on with its output going nowhere and exits as its record says (a FAIL is 1, never 0). Real processes whose
stdout is a pipe nobody reads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import CPU_THRESHOLDS, small_check


def closed(*args: str, cwd: Path, both: bool = False) -> subprocess.CompletedProcess[str]:
    """`python -m clustercheck ARGS` with stdout (and, with `both`, stderr) a pipe whose reader is gone."""
    r, w = os.pipe()
    os.close(r)
    try:
        return subprocess.run([sys.executable, "-m", "clustercheck", *args], cwd=cwd, stdout=w,
                              stderr=w if both else subprocess.PIPE, text=True, timeout=300)
    finally:
        os.close(w)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    (tmp_path / "th").mkdir()
    (tmp_path / "th" / "cpu.yaml").write_text(CPU_THRESHOLDS)
    (tmp_path / "fail.yaml").write_text("checks:\n" + small_check("too-fast") + small_check("ok"))
    (tmp_path / "pass.yaml").write_text("checks:\n" + small_check("ok"))
    return tmp_path


@pytest.mark.pool
def test_a_failing_run_whose_reader_left_exits_1_and_so_do_report_and_compare(tree: Path) -> None:
    run = closed("run", "pass.yaml", "--thresholds", "th", "--out", "o", cwd=tree)
    assert run.returncode == 0, run.stderr
    baseline = (tree / "o" / "latest").resolve()
    run = closed("run", "fail.yaml", "--thresholds", "th", "--out", "o", cwd=tree, both=True)
    assert json.loads((tree / "o" / "latest" / "results.json").read_text())["verdict"] == "FAIL"
    assert run.returncode == 1
    assert closed("report", "o/latest", cwd=tree).returncode == 1
    assert closed("compare", str(baseline), "--out", "o", cwd=tree).returncode == 1
    assert closed("platforms", cwd=tree).returncode == 0  # a listing whose reader left is no failure
