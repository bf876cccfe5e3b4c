"""Every node agent lost at once (run/join.py `JoinLauncher.over`): the controller's network or store is then
the likelier cause than every node, so no node is named on the exclusion list and the run stops INCOMPLETE,
every item of the check it was in an error naming no node. Tested for real through the hosts launcher (each
host a node agent on this machine, as in tests/test_hosts_agents.py)."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest

from clustercheck.exitcodes import Exit

sys.path.insert(0, str(Path(__file__).resolve().parent))
from joining import project, results, wait_for  # noqa: E402
from test_hosts_agents import agent_pid, run  # noqa: E402

pytestmark = pytest.mark.pool  # whole runs with real rank pools


def test_every_agent_lost_at_once_excludes_no_node_and_the_run_is_incomplete(tmp_path: Path) -> None:
    """Both agents of h[1-2] are killed (SIGKILL) once the first pool is up: every agent stopped answering at
    once, which a node cannot explain alone. exclude.txt names no node; the items of the check they were lost
    in are errors that name no node unreachable, and the run is INCOMPLETE. Failed before the fix: exclude.txt
    named h1 and h2, and the run was ERROR."""
    project(tmp_path)
    ctl = run(tmp_path, "--cc-inject-fault=cluster-ar:delay")
    try:
        wait_for(tmp_path / "out" / "latest" / "run.jsonl", '"type": "pool"', 180)
        pids = [agent_pid(h, ctl.pid) for h in ("h1", "h2")]
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        out, _ = ctl.communicate(timeout=300)
    finally:
        ctl.kill()
    data = results(tmp_path)
    assert (tmp_path / "out" / "latest" / "exclude.txt").read_text().split() == [], out[-3000:]
    assert ctl.returncode == Exit.INCOMPLETE and data["verdict"] == "INCOMPLETE", out[-3000:]
    errored = [r for r in data["results"] if r["outcome"] == "error"]
    assert errored and all(not r.get("unreachable") for r in errored), errored
    assert "every node agent still in the run (2) stopped answering at once" in errored[0]["message"], errored[0]["message"]
    assert not any(r["outcome"] in ("passed", "failed") for r in data["results"])
    assert "Traceback" not in out
