"""A rank started afresh (CLUSTERCHECK_ZYGOTE=0, or no zygote to ask) leaves nothing running either. Its
tool that double-forked, or that it left when killed, re-parented to init and went on holding a GPU, a NIC
or a port into the next check and the next run: only the zygote was a child subreaper. Each fresh rank
now has a reaper of its own as its parent (run/reaper.py), which kills what the rank left once it ends.
Real pools, real processes: the rank's task starts a child that double-forks `sleep 300`, marked by its
environment, and exits; the sleep must be gone once the pool has closed."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest

from clustercheck.run import zygote
from clustercheck.run.failure import RankFailure
from clustercheck.run.pool import PoolKey
from clustercheck.run.pools import PoolManager
from helpers import marked

pytestmark = [pytest.mark.pool,
              pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a child subreaper is Linux's")]

MARK = "CLUSTERCHECK_FRESH_ORPHAN_MARK"

# run by the pool's own task path (measure.run_task's runner): a child that double-forks a sleep and exits
# at once, as a tool that daemonizes does; the rank waits for the child, so the sleep is an orphan by then
RANK_SIDE = '''
import os, subprocess

def double_fork(ctx, params):
    env = {**os.environ, "%s": params["token"]}
    subprocess.run(["sh", "-c", "(sleep 300 &) ; exit 0"], env=env, start_new_session=True, check=True)
    return {"pid": os.getpid()}

def hang(ctx, params):
    double_fork(ctx, params)
    import time
    time.sleep(600)
''' % MARK


def _sleeps(token: str) -> list[int]:
    """Live `sleep` processes carrying this test's marker (zombies left out)."""
    return [pid for pid, cmd in marked(MARK, token).items() if cmd.split(" ", 1)[0].endswith("sleep")]


def _gone(token: str, seconds: float = 30) -> list[int]:
    """The marked sleeps still alive once none is, or once `seconds` have passed (a bound, not a timing)."""
    deadline = time.monotonic() + seconds
    while (left := _sleeps(token)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


@pytest.fixture
def fresh(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "cc_orphan_mod.py").write_text(RANK_SIDE)
    monkeypatch.chdir(tmp_path)  # the rank imports the module from its directory, as `python -m` puts it first
    monkeypatch.setenv(zygote.ENV, "0")  # ranks started afresh
    return tmp_path


@pytest.mark.parametrize("close", ["the ranks leave", "the ranks are killed"])
def test_a_fresh_ranks_double_forked_child_ends_with_the_pool(fresh: Path, close: str) -> None:
    token = f"{os.getpid()}-{fresh.name}"
    manager = PoolManager(fresh / "logs")
    try:
        pool = manager.get(PoolKey("gloo", 2))
        if close == "the ranks leave":
            pool.run("orphan", {"token": token}, 60, runner="cc_orphan_mod:double_fork")
        else:  # the task never returns: the pool kills its ranks, as after a check's timeout
            with pytest.raises(RankFailure):
                pool.run("orphan", {"token": token}, 3, runner="cc_orphan_mod:hang")
        started = _sleeps(token)
        assert len(started) == 2, f"each rank's child should have left one sleep: {started}"
        manager.close(kill=close != "the ranks leave")
        left = _gone(token)
        assert not left, f"{close}: the sleeps the fresh ranks' children double-forked outlived the pool: {left}"
    finally:
        manager.close(kill=True)
        for pid in _sleeps(token):  # leave nothing behind, whatever failed
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


def test_a_fresh_rank_killed_outright_takes_its_orphans_with_it(fresh: Path) -> None:
    """The rank SIGKILLed by something else (the OOM killer): its reaper still kills what it left, and the
    pool reads the rank's own death, not the reaper's."""
    token = f"{os.getpid()}-{fresh.name}"
    manager = PoolManager(fresh / "logs")
    try:
        pool = manager.get(PoolKey("gloo", 2))
        ranks = [r["pid"] for r in pool.run("orphan", {"token": token}, 60, runner="cc_orphan_mod:double_fork")]
        assert len(_sleeps(token)) == 2
        os.kill(ranks[0], signal.SIGKILL)
        proc = pool.procs[0]
        proc.wait(60)
        assert proc.returncode == -signal.SIGKILL
        manager.close(kill=True)
        assert not _gone(token)
    finally:
        manager.close(kill=True)
        for pid in _sleeps(token):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
