"""--launcher hosts where no host's agent joined: the run stops before any check, in one line naming each
host with what its agent (or ssh) printed. Its exit code says whose the fault is: 3 (the harness could not
reach or start the agents: ssh failed, Python there lacks a module) where every agent printed a reason
other than bad input, 4 only where an agent refused its input (`clustercheck: error: ...`) or the
template's program is missing. The loopback `--store-addr` hint only where an agent tried to reach the
controller (tests/test_netns.py has that case): not where none ever ran."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from clustercheck.exitcodes import Exit

sys.path.insert(0, str(Path(__file__).resolve().parent))
from joining import project  # noqa: E402
from test_hosts_agents import run  # noqa: E402

pytestmark = pytest.mark.pool  # whole runs (the controller imports torch for its store)


def stopped(tmp: Path, template: str) -> subprocess.CompletedProcess[str]:
    """A run of one host, h1, whose agent is started by `template` and advertised at loopback."""
    return subprocess.run([sys.executable, "-m", "clustercheck", "run", "s.yaml", "--thresholds", "th", "--out", "out",
                           "--launcher", "hosts", "--hosts", "h1", "--host-command", template, "--ranks", "2",
                           "--store-addr", "127.0.0.1"], cwd=tmp, env=dict(os.environ), capture_output=True, text=True,
                          timeout=300)


def test_a_single_host_that_cannot_be_reached_is_a_harness_error_without_the_loopback_hint(tmp_path: Path) -> None:
    """h1's ssh (the stand-in) fails: nothing was measured, exit 3, never 4 (usage), as one of two hosts
    unreachable is INCOMPLETE (2); its agent never ran, so the controller's loopback address is no cause.
    Failed before the fix: exit 4, and the line said the controller was advertised at 127.0.0.1."""
    project(tmp_path)
    ctl = run(tmp_path, "--store-addr", "127.0.0.1", env={"CC_DOWN": "h1"}, hosts="h1")
    out, _ = ctl.communicate(timeout=300)
    line = next((ln for ln in out.splitlines() if "no host's agent joined" in ln), "")
    assert "(h1: its agent exited with 255 before joining: ssh: connect to host h1 port 22: No route to host)" \
        in line, out[-3000:]
    assert "advertised at" not in out and "check --hosts and --host-command" in line, line
    assert ctl.returncode == Exit.ERROR and "Traceback" not in out, out[-3000:]
    assert not (tmp_path / "out").exists()  # refused before any rank or record


def test_an_agent_that_cannot_import_is_a_harness_error_without_the_loopback_hint(tmp_path: Path) -> None:
    """Python on h1 lacks a module clustercheck needs: exit 3 and the agent's own words, no loopback hint."""
    project(tmp_path)
    res = stopped(tmp_path, "sh -c 'echo \"ModuleNotFoundError: No module named pluggy\" >&2; exit 1' {host}")
    out = res.stdout + res.stderr
    assert "h1: its agent exited with 1 before joining: ModuleNotFoundError: No module named pluggy" in out, out[-3000:]
    assert "advertised at" not in out and res.returncode == Exit.ERROR, out[-3000:]


def test_an_agent_that_refused_its_input_stays_a_usage_error(tmp_path: Path) -> None:
    """An agent that said `clustercheck: error: ...` (exit 4) refused what it was given: the run's input, exit 4."""
    project(tmp_path)
    res = stopped(tmp_path, "sh -c 'echo \"clustercheck: error: --local-ranks must be between 1 and 1024\" >&2; "
                            "exit 4' {host}")
    out = res.stdout + res.stderr
    assert "h1: its agent exited with 4 before joining: clustercheck: error: --local-ranks" in out, out[-3000:]
    assert res.returncode == Exit.BAD_INPUT, out[-3000:]


def test_a_start_the_harness_could_not_finish_is_said_in_clustercheck_words(tmp_path: Path) -> None:
    """The one host's rank dies as the facts are read (while pytest collects): one line on stderr,
    `clustercheck: ERROR: ...; nothing was measured`, exit 3, and the summary's line says the same. Failed
    before the fix: stderr had nothing, the summary read `_pytest.outcomes.Exit: ERROR: ...` (and a harness
    error while pytest configured read `Exit: ERROR: ...`: tests/test_first_hour.py)."""
    project(tmp_path)
    ctl = run(tmp_path, "--cc-inject-fault=facts:crash", hosts="h1")
    out, _ = ctl.communicate(timeout=300)
    said = [ln for ln in out.splitlines() if "nothing was measured" in ln]
    assert said and said[0].startswith("clustercheck: ERROR: could not read the nodes' platform facts: rank 1 "
                                       "(h1) "), out[-3000:]
    assert all("clustercheck: ERROR: " in ln for ln in said) and "Exit" not in out, out[-3000:]
    assert ctl.returncode == Exit.ERROR and "Traceback" not in out, out[-3000:]
