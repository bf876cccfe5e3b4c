"""What a run stopped while it starts leaves behind: nothing. The hosts launcher's agent directory, an
agent's work directory, a run directory two runs picked at once, and a .starting-<pid> directory of a
controller that was SIGKILLed (tests for the faults an audit found, one each)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from joining import project  # noqa: E402
from test_hosts_agents import run as hosts_run  # noqa: E402


def descendants_named(root: int, word: bytes) -> list[int]:
    """The live processes under `root` whose command line holds the argument `word`."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if word not in (proc / "cmdline").read_bytes().split(b"\0"):
                continue
            pid = int(proc.name)
            while pid > 1:
                pid = int((Path("/proc") / str(pid) / "stat").read_text().rpartition(")")[2].split()[1])
                if pid == root:
                    found.append(int(proc.name))
                    break
        except (OSError, ValueError):
            continue
    return found


@pytest.mark.pool
def test_a_hosts_run_stopped_while_its_agents_start_keeps_no_agent_directory(tmp_path: Path) -> None:
    """Failed before: out of SIGTERM during the agents' start, close() counted every agent's non-zero exit
    (killed by close itself) as a failure and kept $TMPDIR/clustercheck-hosts-*, naming it nowhere."""
    project(tmp_path)
    tmp = tmp_path / "t"
    tmp.mkdir()
    ctl = hosts_run(tmp_path, env={"TMPDIR": str(tmp)})
    end = time.monotonic() + 120
    while not descendants_named(ctl.pid, b"agent") and time.monotonic() < end and ctl.poll() is None:
        time.sleep(0.05)
    assert descendants_named(ctl.pid, b"agent"), "no agent started"
    ctl.send_signal(signal.SIGTERM)
    out, _ = ctl.communicate(timeout=120)
    assert ctl.returncode == 2, out
    assert "stopped before any check ran" in out, out
    assert not list(tmp.glob("clustercheck-hosts-*")), (out, os.listdir(tmp))
