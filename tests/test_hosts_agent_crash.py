"""A node agent that crashes from a bug of clustercheck's own exits with a code of its own (gang.AGENT_BUG, 70,
never 3: its "controller gone"), and the hosts launcher, which has its exit code and its last words, says so
(`HostsLauncher.disrupted`): its node is lost and not measured, an error, but never blamed (`unreachable`)
nor put on the exclusion list. An agent killed by a signal stays blamed (tests/test_hosts_agents.py).
For real: hosts that are this machine, reached through the `reach` stand-in for ssh."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from clustercheck.exitcodes import Exit

sys.path.insert(0, str(Path(__file__).resolve().parent))
from joining import project, results, wait_for  # noqa: E402

pytestmark = pytest.mark.pool  # whole runs with real rank pools

# the ssh stand-in of tests/test_hosts_agents.py; the host $CC_CRASH's agent is started through crashy.py
REACH = """#!/bin/sh
host=$1; shift
if [ "$host" = "$CC_CRASH" ]; then python=$1; shift 3; exec env CC_HOST="$host" "$python" "$CC_CRASHY" "$@"; fi
exec env CC_HOST="$host" "$@"
"""
# `clustercheck agent ...` with a bug planted: shipping its ranks' output raises once the trigger file is there
CRASHY = """import os, sys
from pathlib import Path
from clustercheck.run import agent

shipped = agent.Agent._ship

def _ship(self):
    if Path(os.environ["CC_CRASH_TRIGGER"]).exists():
        raise ValueError("a bug the test planted in Agent._ship")
    shipped(self)

agent.Agent._ship = _ship
sys.argv = ["clustercheck", *sys.argv[1:]]
from clustercheck.cli import entry
entry()
"""


def test_an_agent_that_crashes_from_clustercheck_s_own_bug_leaves_its_node_an_error_never_excluded(
        tmp_path: Path) -> None:
    """h2's agent raises ValueError once the first result is written (every rank then waits 2 s before
    node-ar, a test-only delay): it exits 70 after `clustercheck: internal error: ValueError: ...`. Its node's
    items are errors naming the crash, h2 is not `unreachable`, and exclude.txt is empty. Failed before the
    fix: the agent exited 3 and h2 was excluded as "stopped answering (no heartbeat: unreachable or dead)"."""
    project(tmp_path)
    (tmp_path / "reach").write_text(REACH)
    (tmp_path / "reach").chmod(0o755)
    (tmp_path / "crashy.py").write_text(CRASHY)
    trigger = tmp_path / "crash-now"
    env = {**os.environ, "CC_CRASH": "h2", "CC_CRASHY": str(tmp_path / "crashy.py"), "CC_CRASH_TRIGGER": str(trigger)}
    ctl = subprocess.Popen([sys.executable, "-m", "clustercheck", "run", "s.yaml", "--thresholds", "th", "--out", "out",
                            "--launcher", "hosts", "--hosts", "h[1-2]", "--host-command",
                            f"{tmp_path / 'reach'} {{host}} {{python}}", "--ranks", "2",
                            "--cc-inject-fault=node-ar:delay"],
                           cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_for(tmp_path / "out" / "latest" / "run.jsonl", '"type": "result"', 180)
        trigger.touch()
        out, _ = ctl.communicate(timeout=300)
    finally:
        ctl.kill()
    data = results(tmp_path)
    outcome = {r["name"]: r for r in data["results"]}
    assert outcome["cluster-ar"]["outcome"] == "passed", out[-3000:]
    for name in ("node-ar[h2]", "node-late[h2]"):
        crashed = outcome[name]
        assert crashed["outcome"] == "error" and not crashed.get("unreachable"), (name, crashed)
        assert "its agent crashed: clustercheck: internal error: ValueError: a bug the test planted" \
            in crashed["message"], crashed["message"]
    assert "exited with 70" in outcome["node-ar[h2]"]["message"]
    assert outcome["node-late[h1]"]["outcome"] == "passed", outcome["node-late[h1]"]["message"]
    excluded = tmp_path / "out" / "latest" / "exclude.txt"
    assert not excluded.exists() or excluded.read_text().split() == [], excluded.read_text()
    assert data["verdict"] == "ERROR" and ctl.returncode == Exit.ERROR


def test_an_agent_that_exits_a_moment_after_its_loss_is_read_by_its_code(tmp_path: Path) -> None:
    """The controller asks how a node was lost as its agent's connection drops, before the agent's process (or
    the ssh before it) has exited: poll() then read no code and a crash of clustercheck's own (70) blamed,
    excluded and drained its node. disrupted() gives the process EXIT_WAIT to exit; one still running stands."""
    from clustercheck.run.hosts import HostsLauncher

    launcher = HostsLauncher(["h1", "h2"], "{python}")
    launcher.agent_dir = tmp_path
    (tmp_path / "agent-1-h2.log").write_text("clustercheck: internal error: ValueError: boom\n")
    late = subprocess.Popen(["sh", "-c", "sleep 0.3; exit 70"])
    running = subprocess.Popen(["sleep", "30"])
    launcher.agents = [running, late]
    try:
        launcher.losing()  # both found lost (Losses.ask)
        loss = launcher.disrupted(1, "h2")
        assert loss is not None and not loss.blamed and "ValueError: boom" in loss.why, loss
        assert launcher.disrupted(0, "h1") is None  # running on past EXIT_WAIT: its going stands
    finally:
        running.kill()
        running.wait()
        late.wait()


def test_nodes_lost_together_share_one_exit_wait(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A hundred hosts gone at once (their ssh hangs) must not cost EXIT_WAIT each: the losses asked together
    share one window, and those asked once it ended are only looked at (a wait of 0)."""
    from clustercheck.run import hosts

    monkeypatch.setattr(hosts, "EXIT_WAIT", 0.3)
    launcher = hosts.HostsLauncher([f"h{i}" for i in range(4)], "{python}")
    launcher.agent_dir = tmp_path
    asked: list[float | None] = []
    procs = [subprocess.Popen(["sleep", "30"]) for _ in range(4)]
    for proc in procs:
        wait = proc.wait
        proc.wait = lambda timeout=None, _wait=wait: (asked.append(timeout), _wait(timeout))[1]  # type: ignore
    launcher.agents = procs
    try:
        launcher.losing()  # the four found lost together (Losses.ask)
        assert all(launcher.disrupted(i, f"h{i}") is None for i in range(4))  # each still running: blamed
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
    assert len(asked) >= 4 and sum(t or 0.0 for t in asked[:4]) <= 0.3 + 1e-6, asked
    assert asked[1:4] == [0.0, 0.0, 0.0], asked


def test_a_loss_found_after_another_s_window_gets_a_window_of_its_own(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A window reopened only after a quiet EXIT_WAIT: a node lost shortly after another's window ended was
    given no time, and its agent's crash of clustercheck's own (70) a moment later blamed the node. Each
    burst of losses (Losses.ask) opens its own window."""
    from clustercheck.run import hosts

    monkeypatch.setattr(hosts, "EXIT_WAIT", 0.3)
    launcher = hosts.HostsLauncher(["h1", "h2"], "{python}")
    launcher.agent_dir = tmp_path
    (tmp_path / "agent-1-h2.log").write_text("clustercheck: internal error: ValueError: boom\n")
    from clustercheck.run import gang
    from clustercheck.run.losses import Losses

    launcher.members = {i: gang.Member(i, f"h{i + 1}", "k" * 64, None, f"h{i + 1}", 1) for i in (0, 1)}
    losses = Losses(["h1", "h2"])
    running = subprocess.Popen(["sleep", "30"])
    late: subprocess.Popen[bytes] | None = None
    other: subprocess.Popen[bytes] | None = None
    try:
        other = subprocess.Popen(["true"])
        launcher.agents = [running, other]
        losses.ask(launcher, ["h1"])  # h1 lost: its whole window passes, its agent running on
        assert "h1" not in losses.excused
        late = subprocess.Popen(["sh", "-c", "sleep 0.2; exit 70"])
        launcher.agents = [running, late]
        losses.ask(launcher, ["h2"])  # found lost a moment after h1's window ended
        assert "h2" in losses.excused, losses.excused
    finally:
        running.kill()
        running.wait()
        for proc in (late, other):
            if proc is not None:
                proc.wait()


def test_an_agent_taken_as_gone_is_ended_at_close_not_waited_for(tmp_path: Path) -> None:
    """A silent agent (its host cut off) hears no goodbye; close() waited 5 s for it to leave and then killed it
    (SIGKILL), holding every run that lost a host. It is ended at once (SIGTERM), as one that never joined is;
    an agent that answers is left to leave on its own."""
    from clustercheck.run.hosts import HostsLauncher

    launcher = HostsLauncher(["h1", "h2"], "{python}")
    launcher.agent_dir = tmp_path
    gone = subprocess.Popen(["sleep", "30"], start_new_session=True)
    leaving = subprocess.Popen(["sh", "-c", "sleep 0.2"], start_new_session=True)
    launcher.agents = [gone, leaving]
    launcher.members = {0: object(), 1: object()}  # type: ignore[dict-item]  # both joined
    launcher._silent[0] = "its node's agent (h1), silent for 10 s"
    try:
        launcher.close()
    finally:
        for proc in (gone, leaving):
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert gone.returncode == -signal.SIGTERM and leaving.returncode == 0, (gone.returncode, leaving.returncode)
