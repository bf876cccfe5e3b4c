"""A rank's facts of another shape (an agent's host with another clustercheck whose version string is the
same: a development tree) are one line, exit 3, naming why: pytest's INTERNALERROR and no record before.
Real: the hosts launcher, each host this machine, with a template whose Python first loads a shim that adds a
field this clustercheck's Facts does not know to every facts answer."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from clustercheck.exitcodes import Exit

sys.path.insert(0, str(Path(__file__).resolve().parent))
from joining import project  # noqa: E402

pytestmark = pytest.mark.pool

SHIM = """from clustercheck.judging import platform
_as_dict = platform.Facts.as_dict
platform.Facts.as_dict = lambda self: {**_as_dict(self), "a_later_field": 1}
"""


def test_facts_of_another_shape_are_one_line_and_exit_3(tmp_path: Path) -> None:
    project(tmp_path)
    (tmp_path / "shim").mkdir()
    (tmp_path / "shim" / "sitecustomize.py").write_text(SHIM)
    here = str(Path(__file__).resolve().parents[1])
    template = f"env PYTHONPATH={tmp_path / 'shim'}:{here} {{python}}"
    cmd = [sys.executable, "-m", "clustercheck", "run", "s.yaml", "--thresholds", "th", "--out", "out",
           "--launcher", "hosts", "--hosts", "h[1-2]", "--host-command", template, "--ranks", "2"]
    proc = subprocess.run(cmd, cwd=tmp_path, env=dict(os.environ), capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == Exit.ERROR and "INTERNALERROR" not in out and "Traceback" not in out, out[-3000:]
    assert "clustercheck: ERROR: could not read the nodes' platform facts: a rank's answer is not of this " \
           "clustercheck's shape (TypeError: " in out, out[-3000:]
