"""The rank pool with real processes: reuse, the control plane's exposure, forged messages."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from clustercheck.run import wire
from clustercheck.errors import HarnessError
from clustercheck.run.failure import RankFailure, rank_ranges
from clustercheck.run.pool import PoolKey
from clustercheck.run.pools import PoolManager

pytestmark = pytest.mark.pool  # starts real rank pools or whole runs: `pytest -m 'not pool'` leaves it out

PARAMS = {"sizes": [1024], "dtype": "float32", "warmup": 1, "iters": 2, "check_iters": 1, "judge_at": 1024,
          "placements": ["in"]}


@pytest.fixture
def pools(tmp_path: Path):
    manager = PoolManager(tmp_path / "logs")
    yield manager
    manager.close(kill=True)


def _client(port: int):
    import torch.distributed as dist

    return dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timedelta(seconds=10))


def test_same_key_reuses_the_pool_and_another_env_starts_one(pools: PoolManager) -> None:
    a = pools.get(PoolKey("gloo", 2))
    pids = a.pids
    a.run("all_reduce", PARAMS, 60)
    assert pools.get(PoolKey("gloo", 2)) is a and a.pids == pids
    b = pools.get(PoolKey("gloo", 2, (("CC_EXAMPLE", "1"),)))
    assert b is not a and pools.starts == 2


def test_local_ranks_share_the_controllers_session_in_a_group_of_their_own(pools: PoolManager) -> None:
    """Same session: the kernel's autogroup shares CPUs among ranks as it does for a bare torchrun.
    Own process group: Ctrl-C at the terminal reaches the controller, which ends the ranks itself."""
    import os

    pool = pools.get(PoolKey("gloo", 2))
    for pid in pool.pids:
        assert os.getsid(pid) == os.getsid(0)
        assert os.getpgid(pid) == pid != os.getpgid(0)


def test_closing_without_waiting_tells_every_pool_at_once_and_a_later_close_reaps_them(pools: PoolManager) -> None:
    """The end of a run tells every pool's ranks to leave and goes on to the reports; the ranks end
    meanwhile (a GPU rank's CUDA context takes a quarter of a second to go), and the run waits for them
    after the reports (run/session.py `release`)."""
    import time

    first, second = pools.get(PoolKey("gloo", 2)), pools.get(PoolKey("gloo", 2, (("CC_EXAMPLE", "1"),)))
    procs = [*first.procs, *second.procs]
    pools.close(wait=False)
    assert set(pools.pools.values()) == {first, second}  # nothing reaped yet: close() still waits for them
    deadline = time.monotonic() + 30
    while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [p.poll() for p in procs] == [0, 0, 0, 0]  # both pools' ranks left of themselves, none killed
    pools.close()
    assert not pools.pools and first.procs == [] and second.procs == []


def test_the_store_forgets_each_task_once_answered(pools: PoolManager) -> None:
    """The store lives in the controller: a week of burn-in must not keep every task and result."""
    pool = pools.get(PoolKey("gloo", 2))
    pool.run("all_reduce", PARAMS, 60)
    keys = pool.store.num_keys()
    for _ in range(5):
        pool.run("all_reduce", PARAMS, 60)
    assert pool.store.num_keys() == keys
    seq = pool.seq  # the task's own keys are gone; each rank deleted its previous result on reading this task
    assert not any(pool.store.check([k]) for k in (wire.task_key(seq), wire.answers_key(seq), wire.complete_key(seq),
                                                   wire.result_key(seq - 1, 0), wire.result_key(seq - 1, 1)))


def _rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("VmRSS:")) / 1024


def test_ranks_hand_free_memory_back_between_tasks(pools: PoolManager) -> None:
    """A burn-in rank must not keep the high-water mark of earlier checks: 16 MiB buffers sit below
    glibc's mmap threshold once it has risen, so without a trim they stay in the heap."""
    pool = pools.get(PoolKey("gloo", 2))
    small = {**PARAMS, "sizes": [1024], "judge_at": 1024}
    big = {**PARAMS, "sizes": [16 << 20, 24 << 20], "judge_at": 24 << 20, "placements": ["out", "in"],
           "check_iters": 2}
    pool.run("all_gather", small, 60)
    before = [_rss_mib(pid) for pid in pool.pids]
    for _ in range(3):
        pool.run("all_gather", big, 120)
    after = [_rss_mib(pid) for pid in pool.pids]
    # measured on the 2-vCPU CI VM: +48 MiB with the trim (what gloo and torch keep), +184 and +248 without
    assert all(a - b < 96 for a, b in zip(after, before)), (before, after)


def test_control_plane_listens_on_loopback_only(pools: PoolManager) -> None:
    pool = pools.get(PoolKey("gloo", 2))
    port = pool.store.port
    listening = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            addr, _, hexport = local.rpartition(":")
            if state == "0A" and int(hexport, 16) == port:
                listening.append(addr)
    assert listening == ["0100007F"]  # 127.0.0.1, and nothing on other interfaces or IPv6


def test_forged_result_is_refused_not_counted(pools: PoolManager) -> None:
    pool = pools.get(PoolKey("gloo", 2))
    intruder = _client(pool.store.port)
    forged = {"ok": True, "result": {"rows": [{"size": 1024, "count": 256, "bytes": 1024, "placement": "in",
                                               "seconds": 1e-9, "iter_seconds": [], "wrong": 0}],
                                     "dtype": "float32"}}
    for rank in range(2):  # the next task is seq 1; rank 1 will hang so only the forgery is there
        intruder.set(wire.result_key(1, rank), wire.seal("not-the-pool-key", forged))
    intruder.set(wire.complete_key(1), "1")  # and it says every rank has answered
    with pytest.raises(HarnessError, match="failed verification"):
        pool.run("all_reduce", {**PARAMS, "fault": {"kind": "hang", "rank": 1}}, 30)


def test_forged_task_is_not_run_by_the_ranks(pools: PoolManager) -> None:
    pool = pools.get(PoolKey("gloo", 2))
    intruder = _client(pool.store.port)
    intruder.set("task/1", wire.seal("not-the-pool-key", {"op": "all_reduce", "params": PARAMS}))
    for proc in pool.procs:  # the ranks read it, refuse it and leave
        proc.wait(30)
    with pytest.raises(HarnessError, match="exited with code 0"):
        pool.run("all_reduce", PARAMS, 30)  # the ranks refused task 1 and left
    assert "refusing task 1" in pool.tail(0)


def test_a_dead_rank_is_named_and_the_ranks_that_answered_keep_their_results(pools: PoolManager) -> None:
    pool = pools.get(PoolKey("gloo", 2))
    with pytest.raises(RankFailure) as failure:  # two groups of one rank: rank 0's work does not need rank 1
        pool.run("all_reduce", {**PARAMS, "fault": {"kind": "crash", "rank": 1}}, 30, groups=[[0], [1]])
    assert str(failure.value).startswith("rank 1 (") and "was killed by SIGKILL during all_reduce" in str(failure.value)
    assert set(failure.value.answered) == {0} and failure.value.failed == {1}
    assert failure.value.answered[0]["rows"][0]["wrong"] == 0


# NCCL's own words, as it writes them to NCCL_DEBUG_FILE (ROCm/rccl#5656's log: host:pid:tid [dev] file:line NCCL WARN)
NCCL_WARN = ('corona:927:927 [0] /src/rccl/hipify/src/init.cc:140 NCCL WARN NUMA auto balancing enabled which can '
             'lead to variability in the RCCL performance! Disable by "sudo sysctl kernel.numa_balancing=0"')


def test_a_dead_ranks_message_quotes_nccl_warnings_from_its_debug_file(pools: PoolManager) -> None:
    """With NCCL_DEBUG_FILE set NCCL writes its WARN lines there, not to the rank's output: found on the
    lent H100, where the failure message would otherwise miss NCCL's reason."""
    pool = pools.get(PoolKey("gloo", 2))
    (pool.log_dir / f"pool{pool.number}-nccl-rank1.4242.log").write_text(
        "corona:927:927 [0] NCCL INFO Bootstrap : Using eth0\n" + NCCL_WARN + "\n")
    with pytest.raises(RankFailure) as failure:
        pool.run("all_reduce", {**PARAMS, "fault": {"kind": "crash", "rank": 1}}, 30, groups=[[0], [1]])
    message = str(failure.value)
    assert f"--- rank 1 NCCL warnings ({pool.log_dir / f'pool{pool.number}-nccl-rank1.4242.log'}):" in message
    assert NCCL_WARN in message and "Bootstrap" not in message
    assert "rank 0 NCCL warnings" not in message


def test_ranks_in_no_group_post_nothing_and_read_as_idle(pools: PoolManager) -> None:
    """A localization round leaves about half the ranks idle: they post no result, so the controller
    reads and verifies only the busy ranks' (docs/localize.md, dispatch)."""
    from clustercheck.run.pool import IDLE

    pool = pools.get(PoolKey("gloo", 3))
    results = pool.run("all_reduce", PARAMS, 60, groups=[[0, 1]])
    assert results[2] == IDLE and all(r["rows"][0]["wrong"] == 0 for r in results[:2])
    seq = pool.seq
    assert [pool.store.check([wire.result_key(seq, r)]) for r in range(3)] == [True, True, False]
    assert pool.run("all_reduce", PARAMS, 60)[2]["rows"][0]["wrong"] == 0  # idle once, busy the next task


def test_a_rank_that_dies_while_idle_still_fails_the_task(pools: PoolManager) -> None:
    """Idle is not silent: a dead rank outside every group ends the task, named, as any death does."""
    import os
    import signal

    pool = pools.get(PoolKey("gloo", 3))
    os.kill(pool.pids[2], signal.SIGKILL)
    pool.procs[2].wait()
    with pytest.raises(RankFailure) as failure:
        pool.run("all_reduce", PARAMS, 30, groups=[[0, 1]])
    assert str(failure.value).startswith("rank 2 (") and "was killed by SIGKILL" in str(failure.value)
    assert 2 in failure.value.failed and 2 not in failure.value.answered


def test_an_error_waits_for_the_others_then_says_who_did_not_answer(pools: PoolManager) -> None:
    pool = pools.get(PoolKey("gloo", 2))
    with pytest.raises(RankFailure) as failure:  # rank 0 waits in the all_reduce for rank 1, which raised
        pool.run("all_reduce", {**PARAMS, "fault": {"kind": "raise", "rank": 1}}, 30)
    assert str(failure.value).startswith("rank 1 (") and "raised RuntimeError: injected fault" in str(failure.value)
    first, _, quoted = str(failure.value).partition("\n")
    assert first.endswith(")") and "no answer from rank 0 (" in first
    # the rank that raised is quoted as a dead one is: its traceback says where
    assert quoted.startswith("--- rank 1 last output (") and quoted.endswith("RuntimeError: injected fault")
    assert failure.value.answered == {} and failure.value.failed == {0, 1}


def test_many_silent_ranks_are_summarised_in_one_line(pools: PoolManager) -> None:
    pool = pools.get(PoolKey("gloo", 10))  # more than NAMED: a hung collective leaves every rank silent
    with pytest.raises(RankFailure) as failure:
        pool.run("all_reduce", {**PARAMS, "fault": {"kind": "hang", "rank": 9}}, 3)
    head, *quoted = str(failure.value).splitlines()
    host = pool.ranks[0]["host"]
    assert head.startswith(f"timed out after 3 s during all_reduce: no answer from 10 ranks (0-9) on 1 node(s) {host}")
    assert sum(line.startswith("--- rank ") for line in quoted) <= 8  # the last lines of 8 ranks at the most
    assert quoted[-1] == f"--- (the other 2: {pool.log_dir})"


def test_rank_ranges_are_short() -> None:
    assert rank_ranges([7, 0, 1, 2, 5, 8]) == "0-2,5,7-8"
    assert rank_ranges(list(range(8192))) == "0-8191" and rank_ranges([3]) == "3"


def test_seal_round_trip_and_tamper() -> None:
    key = wire.new_key()
    assert wire.unseal(key, wire.seal(key, {"a": [1, 2]})) == {"a": [1, 2]}
    sealed = wire.seal(key, {"wrong": 0})
    assert '"wrong": 0' in sealed
    for forged in (sealed.replace('"wrong": 0', '"wrong": 1'),  # the body changed
                   wire.seal(wire.new_key(), {"wrong": 0}),  # sealed with another pool's key
                   sealed[:64], "", "not json", b"\xff" * 80):
        with pytest.raises(wire.Forged):
            wire.unseal(key, forged)


def test_a_rank_that_posted_its_result_then_died_before_it_was_counted_is_named(pools: PoolManager) -> None:
    """A rank (or its node's agent) killed between posting its result and counting it: every rank reads as
    answered, yet the task never completes. Seen once in CI (an agent killed during the opening counter
    snapshot): the failure's message was empty and named no node. It names the rank that died."""
    import os
    import signal

    pool = pools.get(PoolKey("gloo", 2))
    os.kill(pool.pids[1], signal.SIGKILL)
    pool.procs[1].wait()
    # what rank 1 would have posted before it was killed: its result, sealed, but not yet counted
    pool.store.set(wire.result_key(pool.seq + 1, 1),
                   wire.seal(pool.key_hex, {"ok": True, "result": {"rows": []}}))
    with pytest.raises(RankFailure) as failure:
        pool.run("all_reduce", PARAMS, 30, groups=[[0], [1]])
    message = str(failure.value)
    assert message.startswith("rank 1 (") and "was killed by SIGKILL during all_reduce" in message, message
    assert failure.value.failed == {1} and set(failure.value.answered) == {0}


@pytest.mark.parametrize("collective", ["broadcast", "all_gather", "sendrecv"])
def test_a_group_given_out_of_rank_order_measures_right(pools: PoolManager, collective: str) -> None:
    """A localization pair lists its nodes in the planner's order ([2, 0]), which torch's new_group sorts:
    each rank's place in the group is torch's, or its buffer and check follow another rank's place and a
    healthy collective counts wrong elements."""
    from clustercheck.formulas import PLACEMENTS

    pool = pools.get(PoolKey("gloo", 3))
    results = pool.run(collective, {**PARAMS, "placements": list(PLACEMENTS[collective])}, 60, groups=[[2, 0]])
    assert [[row["wrong"] for row in results[r]["rows"]] for r in (0, 2)] == [[0] * len(PLACEMENTS[collective])] * 2


def test_a_fault_lands_on_the_global_rank_named_in_a_group_out_of_rank_order(pools: PoolManager) -> None:
    pool = pools.get(PoolKey("gloo", 3))
    with pytest.raises(RankFailure, match=r"rank 2 \(\S+\) raised RuntimeError: injected fault"):
        pool.run("all_reduce", {**PARAMS, "fault": {"kind": "raise", "rank": 2}}, 30, groups=[[2, 0]])
