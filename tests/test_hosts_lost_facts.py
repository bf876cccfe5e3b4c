"""A host lost while the run's first pool reads the nodes' platform facts (run/nodefacts.py), before any check:
it is left out as absent, with why ("lost before any check: ..."), and the facts are read again on the others,
which are then measured; the run is INCOMPLETE naming it, as for a host whose agent never joined. Tested for real
through the hosts launcher (each host a node agent on this machine, as in tests/test_hosts_agents.py), with a
stand-in for ssh that kills h2's agent as soon as it joined."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from clustercheck.exitcodes import Exit

sys.path.insert(0, str(Path(__file__).resolve().parent))
from joining import project, results  # noqa: E402

pytestmark = pytest.mark.pool  # whole runs with real rank pools

# a stand-in for ssh: `reach HOST PROGRAM ARGS...`; the agent on the host $CC_CRASH is killed (SIGKILL), and so
# is this stand-in, as soon as the agent says it joined the controller (a host that goes down just then)
REACH = f"""#!{sys.executable}
import os, signal, subprocess, sys
host, *cmd = sys.argv[1:]
env = {{**os.environ, "CC_HOST": host}}
if host != os.environ.get("CC_CRASH"):
    os.execvpe(cmd[0], cmd, env)
agent = subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE)
for line in agent.stderr:
    sys.stderr.buffer.write(line)
    sys.stderr.flush()
    if b"joined the controller" in line:
        agent.kill()
        agent.wait()
        os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_host_lost_while_the_facts_are_read_is_absent_and_the_others_are_measured(tmp_path: Path) -> None:
    """Failed before the fix: the whole run ended in one line, `ERROR: could not read the nodes' platform
    facts: ...` (exit 3), with no record, h1 and h3 unmeasured."""
    project(tmp_path)
    (tmp_path / "reach").write_text(REACH)
    (tmp_path / "reach").chmod(0o755)
    cmd = [sys.executable, "-m", "clustercheck", "run", "s.yaml", "--thresholds", "th", "--out", "out", "-k",
           "not node-late", "--launcher", "hosts", "--hosts", "h[1-3]", "--host-command",
           f"{tmp_path / 'reach'} {{host}} {{python}}", "--ranks", "2"]
    proc = subprocess.run(cmd, cwd=tmp_path, env={**os.environ, "CC_CRASH": "h2"},
                          capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == Exit.INCOMPLETE, out[-3000:]
    data = results(tmp_path)
    assert data["verdict"] == "INCOMPLETE" and list(data["run"]["absent"]) == ["h2"], out[-3000:]
    assert data["run"]["absent"]["h2"].startswith("lost before any check: "), data["run"]["absent"]
    assert "exited with -9" in data["run"]["absent"]["h2"]
    assert data["run"]["nodes"] == ["h1", "h3"] and data["untested"] == ["h2"]
    outcome = {r["name"]: r["outcome"] for r in data["results"]}
    assert {n: o for n, o in outcome.items() if "h2" not in n} == {"cluster-ar": "passed", "node-ar[h1]": "passed",
                                                                    "node-ar[h3]": "passed"}, outcome
    for name in ("node-ar[h2]",):  # collected before h2 was lost: not run, naming it, as for one never joined
        lost = next(r for r in data["results"] if r["name"] == name)
        assert lost["outcome"] == "error" and lost["absent"] == ["h2"], lost
        assert "h2: lost before any check: " in lost["message"], lost["message"]
    assert (tmp_path / "out" / "latest" / "exclude.txt").read_text() == ""
    logs = sorted(p.name for p in (tmp_path / "out" / "latest" / "logs").glob("pool1-rank*.log"))
    assert logs, "the failed facts pool's rank logs (h2's last words among them) are kept in the run's logs"
    assert "Traceback" not in out


def test_a_node_whose_rank_dies_reading_its_facts_is_absent_and_the_others_are_measured(tmp_path: Path) -> None:
    """h2's agent lives on, but its rank 3 is killed as the facts are read (a GPU whose NVML segfaults or
    hangs there would do the same): h2 is lost before any check, h1 is measured, INCOMPLETE. Failed before the
    fix: `clustercheck: ERROR: could not read the nodes' platform facts: rank 3 (h2) was killed by SIGKILL
    during ping`, exit 3, no record: one broken node stopped the whole gate."""
    from test_hosts_agents import run

    project(tmp_path)
    ctl = run(tmp_path, "-k", "not node-late", "--cc-inject-fault=facts:crash@3")
    out, _ = ctl.communicate(timeout=300)
    assert ctl.returncode == Exit.INCOMPLETE, out[-3000:]
    data = results(tmp_path)
    assert list(data["run"]["absent"]) == ["h2"] and data["untested"] == ["h2"], out[-3000:]
    assert data["run"]["absent"]["h2"].startswith("lost before any check: rank 3 (h2) was killed by SIGKILL"), \
        data["run"]["absent"]
    outcome = {r["name"]: r["outcome"] for r in data["results"]}
    assert outcome == {"cluster-ar": "passed", "node-ar[h1]": "passed", "node-ar[h2]": "error"}, outcome
    assert (tmp_path / "out" / "latest" / "exclude.txt").read_text() == ""  # untested, not failed
    assert "Traceback" not in out


def test_a_signal_while_the_facts_are_read_leaves_no_out_behind(tmp_path: Path) -> None:
    """Ctrl-C while h2's rank hangs reading its facts: exit 2, the INCOMPLETE line, and nothing left under --out
    (a run stopped before any check has no record). Failed before the fix: out/.starting-<pid>/logs stayed,
    with the facts pool's rank logs, named nowhere."""
    import signal
    import time

    from test_hosts_agents import run

    project(tmp_path)
    ctl = run(tmp_path, "--cc-inject-fault=facts:hang@3")
    end = time.monotonic() + 120
    while len(list((tmp_path / "out").glob(".starting-*/logs/pool1-rank*.log"))) < 4 and time.monotonic() < end:
        time.sleep(0.1)
    time.sleep(1.0)  # the ranks are up and rank 3 hangs in the facts read (FACTS_TIMEOUT is 120 s)
    ctl.send_signal(signal.SIGINT)
    out, _ = ctl.communicate(timeout=120)
    assert ctl.returncode == Exit.INCOMPLETE, out[-3000:]
    assert "INCOMPLETE: interrupted: stopped before any check ran" in out, out[-3000:]
    assert not (tmp_path / "out").exists(), sorted(str(p) for p in (tmp_path / "out").rglob("*"))
