"""The zygote (run/zygote.py): local ranks forked from one process that imported torch once must be the
processes `python -m clustercheck.run.worker` would have been, and must end as those did."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from clustercheck.run import zygote
from clustercheck.run.pool import PoolKey
from clustercheck.run.reaper import Reaped
from clustercheck.run.pools import PoolManager

pytestmark = pytest.mark.pool
PARAMS = {"sizes": [1024], "dtype": "float32", "warmup": 1, "iters": 2, "check_iters": 1, "judge_at": 1024,
          "placements": ["in"]}

# What a rank sees of its own process, run by the pool's own task path (measure.run_task's runner).
PROBE = '''
import os, sys, torch
def seen(ctx, params):
    return {"cwd": os.getcwd(), "path0": sys.path[0], "argv": sys.argv[1:], "threads": torch.get_num_threads(),
            "env": {k: os.environ.get(k) for k in ("CC_WORLD_SIZE", "OMP_NUM_THREADS", "CC_PROBE_MARK",
                                                   "GLOO_SOCKET_IFNAME")},
            "group_leader": os.getpgid(0) == os.getpid(), "parent": os.getppid(),
            "stdin_open": not sys.stdin.closed, "pid": os.getpid()}
'''


def _seen(tmp_path: Path, sub: str) -> list[dict]:
    manager = PoolManager(tmp_path / sub)
    try:
        pool = manager.get(PoolKey("gloo", 2))
        return [r for r in pool.run("probe", {}, 60, runner="cc_probe_mod:seen")]
    finally:
        manager.close(kill=True)


def test_a_forked_rank_sees_what_a_fresh_one_sees(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "cc_probe_mod.py").write_text(PROBE)
    monkeypatch.chdir(tmp_path)  # the rank imports the probe from its directory, as `python -m` puts it first
    monkeypatch.setenv("CC_PROBE_MARK", "x")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    forked = _seen(tmp_path, "forked")
    monkeypatch.setenv(zygote.ENV, "0")
    fresh = _seen(tmp_path, "fresh")
    for a, b in zip(forked, fresh):
        assert {k: v for k, v in a.items() if k not in ("parent", "pid")} == \
            {k: v for k, v in b.items() if k not in ("parent", "pid")}
    assert forked[0]["cwd"] == str(tmp_path) and forked[0]["argv"][:2] == ["--rank", "0"]
    assert forked[1]["env"] == {"CC_WORLD_SIZE": "2", "OMP_NUM_THREADS": "1", "CC_PROBE_MARK": "x",
                                "GLOO_SOCKET_IFNAME": "lo"}
    # fresh ranks are each the child of a reaper of their own (run/reaper.py), the controller's child,
    assert len({r["parent"] for r in fresh}) == 2 and os.getpid() not in {r["parent"] for r in fresh}
    assert {r["parent"] for r in forked} != {os.getpid()}  # forked ones the zygote's
    assert len({r["parent"] for r in forked}) == 1


def test_identity_leaves_out_only_what_is_read_after_the_fork() -> None:
    env = {"PATH": "/bin", "CC_X": "1", "OMP_NUM_THREADS": "4", "GLOO_SOCKET_IFNAME": "lo", "PYTEST_CURRENT_TEST": "t",
           "NCCL_ALGO": "Ring", "TORCH_NCCL_BLOCKING_WAIT": "1"}
    assert zygote.identity(env) == (("PATH", "/bin"), ("TORCH_NCCL_BLOCKING_WAIT", "1"))  # NCCL_*: read at NCCL's calls
    assert zygote.identity({**env, "OMP_NUM_THREADS": "4,2"}) == (  # not one number: the zygote cannot apply it
        ("OMP_NUM_THREADS", "4,2"), ("PATH", "/bin"), ("TORCH_NCCL_BLOCKING_WAIT", "1"))
    assert zygote.identity({**env, zygote.ENV: "0"}) is None
    assert zygote.identity({**env, "CC_BACKEND": "nccl"}) == zygote.identity(env)  # NCCL ranks fork too


def _zygote_of(pool) -> zygote.Zygote:
    found = {p._zygote for p in pool.procs if isinstance(p, zygote.ZygoteRank)}
    assert len(found) == 1 and len(pool.procs) == pool.key.nranks, pool.procs
    return found.pop()


def test_a_check_env_gets_a_zygote_of_its_own_and_the_one_it_replaces_ends_with_its_last_rank(tmp_path: Path) -> None:
    manager = PoolManager(tmp_path / "logs")
    try:
        plain = manager.get(PoolKey("gloo", 2))
        own = manager.get(PoolKey("gloo", 2, (("CC_ZYGOTE_TEST", "x"),)))
        first = _zygote_of(plain)
        assert _zygote_of(own) is first  # CC_*: read after the fork
        other = manager.get(PoolKey("gloo", 2, (("ZYGOTE_TEST", "1"),)))  # may be read at import
        second = _zygote_of(other)
        assert second is not first and first.retired and not second.retired
        assert ("ZYGOTE_TEST", "1") in second.identity and ("ZYGOTE_TEST", "1") not in first.identity
        assert plain.run("all_reduce", PARAMS, 60) and other.run("all_reduce", PARAMS, 60)  # both live on
        assert first.proc.poll() is None  # retired, with live ranks
        manager.discard(PoolKey("gloo", 2))
        assert first.proc.poll() is None  # `own` still lives
        manager.discard(PoolKey("gloo", 2, (("CC_ZYGOTE_TEST", "x"),)))
        assert first.proc.wait(30) == 0  # its last rank ended: it left
    finally:
        manager.close(kill=True)


def test_a_rank_killed_is_read_as_killed_and_a_dead_zygote_ends_its_ranks(tmp_path: Path) -> None:
    manager = PoolManager(tmp_path / "logs")
    try:
        pool = manager.get(PoolKey("gloo", 2))
        first, second = pool.procs
        first.kill()
        assert first.wait(30) == -signal.SIGKILL and second.poll() is None
        dying = _zygote_of(pool)
        dying.proc.kill()  # the zygote dies: its ranks get their parent-death signal
        assert second.wait(30) == -signal.SIGTERM
        assert isinstance(second, zygote.ZygoteRank) and "ended with the zygote that started it" in second.ended
        again = manager.get(PoolKey("gloo", 2))  # the next pool gets a new zygote
        assert again.alive() and _zygote_of(again) is not dying
    finally:
        manager.close(kill=True)


def test_a_rank_that_exits_at_once_says_why_in_its_log(tmp_path: Path) -> None:
    shared = zygote.shared(dict(os.environ), tmp_path / "z.log")
    assert shared is not None
    log = tmp_path / "rank.log"
    rank = shared.start(["--backend", "nope"], dict(os.environ), log, "key")
    assert rank.wait(60) == 2  # argparse's exit, as a fresh `python -m clustercheck.run.worker --backend nope`
    assert rank.pid > 0 and "invalid choice: 'nope'" in log.read_text()


def test_a_rank_killed_before_the_zygote_forked_it_ends_at_once_and_never_runs(tmp_path: Path) -> None:
    """A run refused while its zygote still imports torch must not wait for the import (prestart.end)."""
    ident = zygote.identity(dict(os.environ))
    assert ident is not None
    young = zygote.Zygote(ident, tmp_path / "z.log")
    silent = socket.create_server(("127.0.0.1", 0))  # accepts, never answers: the rank would wait 180 s
    try:
        rank = young.start(["--rank", "0", "--world-size", "1", "--store", f"127.0.0.1:{silent.getsockname()[1]}",
                            "--backend", "gloo"], dict(os.environ), tmp_path / "rank.log", "key")
        started = time.monotonic()
        rank.kill()
        assert rank.wait(1) == -signal.SIGKILL and time.monotonic() - started < 1
        with young.changed:  # the zygote forks it once it has imported, and it is killed then
            assert young.changed.wait_for(lambda: rank._pid is not None, 120)
        deadline = time.monotonic() + 10
        while _running(rank._pid):
            assert time.monotonic() < deadline, "the rank forked after its kill still runs"
            time.sleep(0.05)
        with young.changed:
            assert young.changed.wait_for(lambda: rank._reaped, 10) and rank.returncode == -signal.SIGKILL
    finally:
        young.close()
        silent.close()
    assert young.proc.returncode == 0  # it read the end of its socket and left


def _running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


def test_a_zygote_that_cannot_start_leaves_the_ranks_to_start_afresh(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "logs" / "zygote.log").mkdir(parents=True)  # its log cannot be opened
    monkeypatch.setenv("CLUSTERCHECK_TEST_UNSTARTABLE", "1")  # another environment: a new zygote is wanted
    manager = PoolManager(tmp_path / "logs")
    try:
        pool = manager.get(PoolKey("gloo", 2))
        assert all(isinstance(p, Reaped) for p in pool.procs)  # started afresh, each under its reaper
        assert pool.run("all_reduce", PARAMS, 60)
    finally:
        manager.close(kill=True)



def test_a_pools_logs_that_move_take_the_zygotes_log_name_with_them(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A pool started before the run directory existed (the facts pool, a local run's first pool) has its
    logs moved into it, and the zygote's log goes with them: a zygote that dies later names its log where
    it is, not where it was."""
    monkeypatch.setenv("CLUSTERCHECK_TEST_OWN_ZYGOTE", str(tmp_path))  # read at import: a zygote of its own
    manager = PoolManager(tmp_path / "starting")
    try:
        pool = manager.get(PoolKey("gloo", 2))
        found = _zygote_of(pool)
        assert found.log == tmp_path / "starting" / "zygote.log"
        pool.move_logs(tmp_path / "run")
        assert found.log == tmp_path / "run" / "zygote.log" and found.log.is_file()
        assert [p.parent for p in pool.logs] == [tmp_path / "run"] * 2 and all(p.is_file() for p in pool.logs)
        found.proc.kill()
        for rank in pool.procs:
            rank.wait(30)
        said = [rank.ended for rank in pool.procs if isinstance(rank, zygote.ZygoteRank)]
        assert said and all(f"its log: {tmp_path / 'run' / 'zygote.log'})" in s for s in said), said
    finally:
        manager.close(kill=True)


def test_a_forked_zygote_is_watched_as_popen_would_be() -> None:
    """zygote_serve.Forked, an agent's handle on the zygote it forked: wait with a timeout, kill, and a
    kill after the wait found it ended (another thread may reap it first) is no error."""
    from clustercheck.run.zygote_serve import Forked

    pid = os.fork()
    if pid == 0:  # the child only sleeps and leaves: nothing of the parent's threads is touched
        time.sleep(60)
        os._exit(0)
    forked = Forked(pid)
    with pytest.raises(subprocess.TimeoutExpired):
        forked.wait(0.1)
    forked.kill()
    assert forked.wait(10) == -signal.SIGKILL and forked.returncode == -signal.SIGKILL
    forked.kill()  # ended and reaped: nothing to do
    assert forked.wait() == -signal.SIGKILL


HUNG_UP_WHILE_IMPORTING = """
import sys, time
from clustercheck.run import zygote_serve
zygote_serve.preimport = lambda: time.sleep(120)  # an import that a loaded machine makes take long
sys.exit(zygote_serve.serve(int(sys.argv[1])))
"""


@pytest.mark.parametrize("how", ["shutdown", "close"])
def test_a_zygote_whose_controller_hangs_up_while_it_imports_leaves_at_once(how: str) -> None:
    """A controller signalled while the run starts exits without waiting for its zygote, which reads its
    socket only once its import is done: it must not outlive the run by that import (a rank of the run,
    left behind, on a loaded machine: tests/test_incomplete.py's signal-at-start test failed so)."""
    ours, theirs = socket.socketpair()
    proc = subprocess.Popen([sys.executable, "-c", HUNG_UP_WHILE_IMPORTING, str(theirs.fileno())],
                            pass_fds=[theirs.fileno()])
    theirs.close()
    try:
        time.sleep(1)  # it is in its import now
        assert proc.poll() is None
        if how == "shutdown":  # what zygote.close() does first
            ours.shutdown(socket.SHUT_RDWR)
        ours.close()  # what a controller's exit does
        assert proc.wait(60) == 0  # within seconds, not after the 120 s import
    finally:
        proc.kill()
        proc.wait()
