"""A tool a rank started (all_reduce_perf, nvbandwidth, ib_write_bw, nvidia-smi) runs in a session of its own
so that a timeout kills all it started; it must still end with the rank. A rank killed outright (SIGKILL, or
its parent-death signal) never runs its own kill: the tool went on loading the GPUs and NICs for up to its
tool_timeout after the run had reported, beside the next checks and the next run. The zygote, which forks
the ranks, adopts such orphans (a child subreaper) and kills them when it reaps a rank and when it ends.
Real processes and signals: a fake tool on PATH that sleeps, found by a marker in its environment."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, TypeVar

import pytest

from helpers import marked

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a child subreaper is Linux's")

MARK = "CLUSTERCHECK_ORPHAN_TEST_MARK"  # not CC_*: the tool is not given those
T = TypeVar("T")

SUITE = """suite: orphan
defaults:
  timeout: 120
checks:
  - id: nt
    measure: nccl_tests
    params: {binary: all_reduce_perf, min_bytes: 1MiB, max_bytes: 1MiB, iters: 2, warmup: 1}
"""

PROFILE = """platform: cpu
detect: {gpu_count: 0}
checks: {}
"""


def _marked(token: str) -> dict[int, str]:
    return marked(MARK, token)


def _tool(token: str) -> dict[int, str]:
    return {pid: cmd for pid, cmd in _marked(token).items() if "all_reduce_perf" in cmd or cmd.startswith("sleep")}


def _poll(what: Callable[[], T], seconds: float, run: subprocess.Popen[bytes] | None = None) -> T:
    """what() once true, or once `seconds` have passed (or `run` has ended)."""
    deadline = time.monotonic() + seconds
    while True:
        found = what()
        if found or time.monotonic() > deadline or run is not None and run.poll() is not None:
            return found
        time.sleep(0.1)


def _start_run(tmp_path: Path, token: str) -> subprocess.Popen[bytes]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    tool = bin_dir / "all_reduce_perf"
    tool.write_text("#!/bin/sh\necho '# fake all_reduce_perf'\nexec sleep 60\n")
    tool.chmod(0o755)
    (tmp_path / "th").mkdir()
    (tmp_path / "th" / "cpu.yaml").write_text(PROFILE)
    (tmp_path / "s.yaml").write_text(SUITE)
    env = {**os.environ, MARK: token, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
           "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[1]),
                                          *filter(None, [os.environ.get("PYTHONPATH")])])}
    env.pop("CLUSTERCHECK_ZYGOTE", None)
    with (tmp_path / "run.log").open("wb") as log:
        return subprocess.Popen([sys.executable, "-m", "clustercheck", "run", "s.yaml", "--thresholds", "th",
                                 "--out", "out", "--no-progress"], cwd=tmp_path, env=env, stdin=subprocess.DEVNULL,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def _rank_of(tool: int) -> int:
    stat = Path(f"/proc/{tool}/stat").read_text()
    return int(stat[stat.rindex(")") + 2:].split()[1])


@pytest.mark.parametrize("kill", ["controller SIGTERM", "rank SIGKILL"])
def test_a_tool_ends_with_the_rank_that_started_it(tmp_path: Path, kill: str) -> None:
    token = f"{os.getpid()}-{tmp_path.name}"
    run = _start_run(tmp_path, token)
    try:
        tools = _poll(lambda: {p: c for p, c in _tool(token).items() if "sleep" in c}, 120, run)
        assert tools, f"the fake tool never started (run exit {run.poll()}): {(tmp_path / 'run.log').read_text()}"
        if kill == "controller SIGTERM":
            run.send_signal(signal.SIGTERM)
        else:
            rank = _rank_of(next(iter(tools)))
            assert "sleep" not in Path(f"/proc/{rank}/cmdline").read_text(), "the tool's parent is not its rank"
            os.kill(rank, signal.SIGKILL)
        run.wait(120)
        _poll(lambda: not _tool(token), 10)
        left = _tool(token)
        assert not left, f"{kill}: the rank's tool outlived it: {left}"
    finally:
        for pid in _marked(token):  # leave nothing behind, whatever failed
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        if run.poll() is None:
            run.kill()
            run.wait()
