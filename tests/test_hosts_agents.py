"""--launcher hosts starts one node agent per host through --host-command (run/hosts.py), for real on this
machine: "hosts" that are this machine, reached through a template that is a script of ours, as ssh would
be. A host whose agent cannot start is absent and named with what it printed (the run is INCOMPLETE); an
agent whose process dies mid-run takes its node's ranks with it at once, and the node is named
unreachable."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from clustercheck.exitcodes import Exit

sys.path.insert(0, str(Path(__file__).resolve().parent))
from joining import kill_mid_run, project, results, wait_for  # noqa: E402

pytestmark = pytest.mark.pool  # starts real rank pools or whole runs: `pytest -m 'not pool'` leaves it out

# a stand-in for ssh: `reach HOST PROGRAM ARGS...`; the host h2 is unreachable when $CC_DOWN names it
REACH = """#!/bin/sh
host=$1; shift
if [ "$host" = "$CC_DOWN" ]; then echo "ssh: connect to host $host port 22: No route to host" >&2; exit 255; fi
exec env CC_HOST="$host" "$@"
"""


def run(tmp: Path, *args: str, env: dict[str, str] | None = None, hosts: str = "h[1-2]") -> subprocess.Popen[str]:
    (tmp / "reach").write_text(REACH)
    (tmp / "reach").chmod(0o755)
    cmd = [sys.executable, "-m", "clustercheck", "run", "s.yaml", "--thresholds", "th", "--out", "out",
           "--launcher", "hosts", "--hosts", hosts, "--host-command", f"{tmp / 'reach'} {{host}} {{python}}",
           "--ranks", "2", *args]
    return subprocess.Popen(cmd, cwd=tmp, env={**os.environ, **(env or {})}, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def agent_pid(node: str, under: int) -> int:
    """The pid of the agent the controller `under` runs for `node` (its command line names it). Its zygote
    and the ranks forked from it carry the same command line, and once pids wrap (pid_max is 32768 here) one
    of them can come first in /proc: the agent is the one whose parent is none of them. Only the
    controller's own descendants count: another test's run on another xdist worker may have an `h2` too."""
    found: dict[int, int] = {}  # pid -> its parent's
    for proc in Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
            if b"agent" in argv and b"--node" in argv and argv[argv.index(b"--node") + 1] == node.encode() \
                    and under in _ancestors(int(proc.name)):
                found[int(proc.name)] = _parent(int(proc.name))
        except (OSError, ValueError, IndexError):
            continue
    agents = [pid for pid, parent in found.items() if parent not in found]
    assert len(agents) == 1, f"no single agent for {node} under {under}: {found}"
    return agents[0]


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/status").read_text().split("\nPPid:", 1)[1].split()[0])


def _ancestors(pid: int) -> list[int]:
    out = []
    while pid > 1:
        pid = _parent(pid)
        out.append(pid)
    return out


def test_a_host_whose_agent_cannot_start_is_absent_named_and_the_run_incomplete(tmp_path: Path) -> None:
    project(tmp_path)
    ctl = run(tmp_path, env={"CC_DOWN": "h2"})
    out, _ = ctl.communicate(timeout=300)
    data = results(tmp_path)
    assert ctl.returncode == Exit.INCOMPLETE and data["verdict"] == "INCOMPLETE", out[-3000:]
    assert data["run"]["absent"] == {"h2": "its agent exited with 255 before joining: ssh: connect to host h2 "
                                           "port 22: No route to host"}
    assert data["untested"] == ["h2"]
    assert {r["node"]: r["outcome"] for r in data["results"] if r["node"]} == {"h1": "passed"}
    assert "Traceback" not in out


def test_an_agent_killed_mid_run_errors_its_node_at_once_and_names_it_unreachable(tmp_path: Path) -> None:
    """h2's agent is killed (SIGKILL) once the first result is written, while every rank waits 2 s before
    the node check (a test-only delay): its process has exited, so its ranks are taken as gone at once (the
    message says so, not "silent for 10 s"), and only h2 is excluded."""
    project(tmp_path)
    ctl = run(tmp_path, "-k", "not node-late", "--cc-inject-fault=node-ar:delay")
    out = kill_mid_run(ctl, tmp_path / "out" / "latest" / "run.jsonl", lambda: agent_pid("h2", ctl.pid))
    data = results(tmp_path)
    outcome = {r["name"]: r for r in data["results"]}
    # h1's item passes when the kill lands inside the check, and errors with h2 named as the cause when it
    # lands while node-ar's ranks start (one pool serves both nodes); either way h1 is never excluded
    assert outcome["cluster-ar"]["outcome"] == "passed", out[-3000:]
    died = outcome["node-ar[h2]"]  # killed in the check, or as its pool starts (then h2 is left out of it)
    assert died["outcome"] == "error" and "agent (h2), which exited with -9" in died["message"], died["message"]
    assert "advertised at" not in died["message"]  # the agents reached the store: its address is not the cause
    assert died["unreachable"] == ["h2"] and (tmp_path / "out" / "latest" / "exclude.txt").read_text().split() == ["h2"]
    assert ctl.returncode == Exit.ERROR and data["verdict"] == "ERROR"
    assert "Traceback" not in out


def test_with_the_first_host_absent_an_agent_killed_later_is_named_by_its_own_host(tmp_path: Path) -> None:
    """h1 never joins, so the run's nodes are h2 and h3; h3's agent (index 2) is then killed mid-run. The
    launcher keeps the hosts as given for its agents' indices: h3 is named (not an index past the joined
    nodes, or h2), excluded alone, and h2 keeps its verdict."""
    project(tmp_path)
    ctl = run(tmp_path, "-k", "not node-late", "--cc-inject-fault=node-ar:delay", env={"CC_DOWN": "h1"},
              hosts="h[1-3]")
    out = kill_mid_run(ctl, tmp_path / "out" / "latest" / "run.jsonl", lambda: agent_pid("h3", ctl.pid))
    data = results(tmp_path)
    outcome = {r["name"]: r for r in data["results"]}
    died = outcome["node-ar[h3]"]
    # killed while node-ar measures ("rank 4 (h3) was lost with its node's agent (h3), which exited with -9"),
    # or as its pool starts, when h3 is left out ("not measured: h3 was lost during node-ar (its node's agent
    # (h3), which exited with -9 ...)"): which one depends on where the kill lands; both name h3
    assert died["outcome"] == "error" and "agent (h3), which exited with -9" in died["message"], out[-3000:]
    assert outcome["node-ar[h2]"]["outcome"] == "passed" and died["unreachable"] == ["h3"]
    assert list(data["run"]["absent"]) == ["h1"] and data["untested"] == ["h1"]
    assert (tmp_path / "out" / "latest" / "exclude.txt").read_text().split() == ["h3"]
    assert "Traceback" not in out


NODE_ONLY = """checks:
  - id: node-ar
    measure: all_reduce
    scope: node
    timeout: 120
    params: {sizes: [64KiB], iters: 2, warmup: 1, check_iters: 1}
"""


def resume(pids: list[int]) -> None:
    """SIGCONT each of these processes still there (a pool that gave up on them has killed them)."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)


def test_an_agent_killed_while_another_nodes_group_still_measures_leaves_that_node_its_verdict(tmp_path: Path) -> None:
    """node-ar runs h1's and h2's groups in one task. Once its pool is up (every rank then waits 2 s, a
    test-only delay), h1's ranks are stopped (SIGSTOP), h2's agent is killed, and h1's ranks go on 5 s later,
    past the 3 s the pool gives the other ranks to be heard from after a death (pool.GRACE): h1's group
    shares no rank with h2's, so its answer is waited for and judged; h2's item is an error naming h2, h2
    alone is excluded, and the run is ERROR. Failed before the fix: h1's item was an error too ("no answer
    from rank 0 (h1), rank 1 (h1)")."""
    project(tmp_path)
    (tmp_path / "s.yaml").write_text(NODE_ONLY)
    ctl = run(tmp_path, "--cc-inject-fault=node-ar:delay")
    record, h1 = tmp_path / "out" / "latest" / "run.jsonl", []
    try:
        wait_for(record, '"type": "pool"', 180)
        (pool,) = [x for x in map(json.loads, record.read_text().splitlines()) if x["type"] == "pool"]
        h1 = [r["pid"] for r in pool["ranks"] if r["host"] == "h1"]
        for pid in h1:
            os.kill(pid, signal.SIGSTOP)
        os.kill(agent_pid("h2", ctl.pid), signal.SIGKILL)
        time.sleep(5)
        resume(h1)
        out, _ = ctl.communicate(timeout=300)
    finally:
        resume(h1)
        ctl.kill()
    data = results(tmp_path)
    outcome = {r["name"]: r for r in data["results"]}
    assert outcome["node-ar[h1]"]["outcome"] == "passed", outcome["node-ar[h1]"].get("message") or out[-3000:]
    measured = outcome["node-ar[h1]"]["metrics"]  # its own measurement, judged
    assert measured["busbw"]["value"] > 0 and measured["wrong"]["value"] == 0
    died = outcome["node-ar[h2]"]
    assert died["outcome"] == "error" and "was lost with its node's agent (h2), which exited with -9" in \
        died["message"], died["message"]
    assert died["unreachable"] == ["h2"] and (tmp_path / "out" / "latest" / "exclude.txt").read_text().split() == ["h2"]
    assert ctl.returncode == Exit.ERROR and data["verdict"] == "ERROR"
    assert "Traceback" not in out
