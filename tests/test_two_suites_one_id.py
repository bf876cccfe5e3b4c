"""Two suites of one run may each have a check of the same id (`ar`): their items are `a.yaml::ar[h1]` and
`b.yaml::ar[h1]`, and each is measured with its own suite's parameters. The session kept its measurements by
check id alone, so where a's check left a node's outcome unread (its item deselected with -k), b's items read
a's: `no result for h1` for b's, or a's figures as b's. Run for real through the hosts launcher (two hosts
that are this machine, reached by a stand-in for ssh as in tests/test_hosts_agents.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from clustercheck.exitcodes import Exit

sys.path.insert(0, str(Path(__file__).resolve().parent))
from joining import project  # noqa: E402
from test_hosts_agents import REACH  # noqa: E402

pytestmark = pytest.mark.pool  # a whole run with real rank pools

SUITE = """checks:
  - id: ar
    measure: all_reduce
    scope: node
    params: {{sizes: [{size}], iters: 2, warmup: 1, check_iters: 1}}
"""


def test_two_suites_with_one_check_id_are_each_measured_with_their_own_parameters(tmp_path: Path) -> None:
    """Failed before the fix: b.yaml::ar[h1] was an error, `ar: no result for h1 (its ranks took no part)`."""
    project(tmp_path)
    (tmp_path / "a.yaml").write_text(SUITE.format(size="64KiB"))
    (tmp_path / "b.yaml").write_text(SUITE.format(size="1MiB"))
    (tmp_path / "reach").write_text(REACH)
    (tmp_path / "reach").chmod(0o755)
    cmd = [sys.executable, "-m", "clustercheck", "run", "a.yaml", "b.yaml", "--thresholds", "th", "--out", "out",
           "--launcher", "hosts", "--hosts", "h[1-2]", "--host-command", f"{tmp_path / 'reach'} {{host}} {{python}}",
           "--ranks", "2", "-k", "not h2"]
    proc = subprocess.run(cmd, cwd=tmp_path, env=dict(os.environ), capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    data = json.loads((tmp_path / "out" / "latest" / "results.json").read_text())
    sizes = {r["nodeid"]: (r["outcome"], [row["size"] for row in r.get("rows") or []]) for r in data["results"]}
    assert sizes == {"a.yaml::ar[h1]": ("passed", [65536]), "b.yaml::ar[h1]": ("passed", [1048576])}, out[-3000:]
    assert proc.returncode == Exit.ERROR and data["untested"] == ["h2"], out[-3000:]  # -k left h2 unmeasured
