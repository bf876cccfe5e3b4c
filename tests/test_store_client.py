"""run/store.py, the controller's TCPStore client in plain Python, against torch's own TCPStore server and
clients; and the local pool's store in a process of its own, so that a controller imports no torch."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest
import torch.distributed as dist

from clustercheck.errors import HarnessError
from clustercheck.run.pool import PoolKey
from clustercheck.run.pools import PoolManager
from clustercheck.run.store import StoreClient, StoreLost, StoreSilent, StoreTimeout, served



@pytest.fixture
def server():
    """torch's TCPStore server, as the store's process runs it (on a socket made beforehand)."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    store = dist.TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False,
                          timeout=timedelta(seconds=10), master_listen_fd=listener.detach())
    yield store, port
    del store


def test_every_query_reads_and_writes_what_torchs_clients_do(server) -> None:
    torch_side, port = server
    ours = StoreClient("127.0.0.1", port, 10.0)
    ours.set("a", "text")
    ours.set("b", b"\x00\xff bytes")
    assert torch_side.get("a") == b"text" and ours.get("b") == b"\x00\xff bytes"
    torch_side.set("c", b"from torch")
    assert ours.get("c") == b"from torch"
    assert (ours.add("n", 3), ours.add("n", -1), torch_side.add("n", 0)) == (3, 2, 2)
    assert ours.check(["a", "b", "c"]) and not ours.check(["a", "absent"]) and ours.check([])
    assert ours.multi_get(["c", "a"]) == [b"from torch", b"text"]
    assert ours.delete_key("a") and not ours.delete_key("a") and not torch_side.check(["a"])
    prefixed = dist.PrefixStore("pool3", dist.TCPStore("127.0.0.1", port, is_master=False,
                                                       timeout=timedelta(seconds=10)))
    prefixed.set("ready/0", b"r")  # a rank's PrefixStore: "pool3/" before the key
    assert ours.get("pool3/ready/0") == b"r"
    many = {f"result/{i}": bytes([i % 251]) * (i % 300) for i in range(3000)}  # a big pool's answers at once
    for k, v in many.items():
        torch_side.set(k, v)  # no reply: only a query with one, on the same connection, says they are in
    assert torch_side.check(list(many))
    assert ours.multi_get(list(many)) == list(many.values())


def test_get_waits_for_a_key_set_later(server) -> None:
    torch_side, port = server
    ours = StoreClient("127.0.0.1", port, 10.0)
    threading.Timer(0.3, lambda: torch_side.set("later", b"1")).start()
    t0 = time.monotonic()
    assert ours.get("later") == b"1" and time.monotonic() - t0 >= 0.25


def test_a_wait_that_times_out_is_cancelled_and_the_connection_goes_on(server) -> None:
    torch_side, port = server
    ours = StoreClient("127.0.0.1", port, 10.0)
    with pytest.raises(StoreTimeout, match="never not set within 0.2 s"):
        ours.wait(["never"], 0.2)
    torch_side.set("x", b"y")
    assert ours.get("x") == b"y" and ours.add("k", 1) == 1  # the server stopped waiting for us: in step


def test_a_server_that_ends_is_a_harness_error_not_a_hang() -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    store = dist.TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False,
                          timeout=timedelta(seconds=10), master_listen_fd=listener.detach())
    ours = StoreClient("127.0.0.1", port, 10.0, "pool 1's store")
    del store
    t0 = time.monotonic()
    with pytest.raises(StoreLost, match="pool 1's store: ") as caught:
        for _ in range(3):  # the first query after the close may still be written
            ours.check(["a"])
    assert isinstance(caught.value, HarnessError) and time.monotonic() - t0 < 5


def test_nothing_listening_is_said_at_once() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(StoreLost, match="cannot be reached"):
        StoreClient("127.0.0.1", port, 5.0)


def test_served_asks_again_until_the_server_starts_and_stops_when_nothing_waits() -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    started = []
    threading.Timer(1.5, lambda: started.append(dist.TCPStore(
        "127.0.0.1", port, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=10),
        master_listen_fd=listener.detach()))).start()
    t0 = time.monotonic()
    client = served("127.0.0.1", port, 30.0, "pool 2's store", lambda: True)  # asked at 0 s and 1 s, answered
    assert 1.4 < time.monotonic() - t0 < 10 and client.timeout == 30.0 and client.add("k", 2) == 2

    quiet = socket.create_server(("127.0.0.1", 0))  # listens, never served
    t0 = time.monotonic()
    with pytest.raises(StoreLost, match="pool 3's store: no answer, and nothing waits for it any more"):
        served("127.0.0.1", quiet.getsockname()[1], 30.0, "pool 3's store", lambda: time.monotonic() - t0 < 1.5)
    assert time.monotonic() - t0 < 5
    with pytest.raises(StoreSilent, match="no answer within 2 s"):
        served("127.0.0.1", quiet.getsockname()[1], 2.0, "pool 3's store", lambda: True)
    quiet.close()


# -- the local pool's store ---------------------------------------------------------------------------


@pytest.mark.pool
def test_a_local_pools_store_is_the_zygotes_child_and_ends_with_the_pool(tmp_path: Path) -> None:
    manager = PoolManager(tmp_path / "logs")
    try:
        pool = manager.get(PoolKey("gloo", 2))
        proc = pool._store_proc
        assert proc is not None and isinstance(pool.store, StoreClient)
        assert Path(f"/proc/{proc.pid}/comm").read_text().strip() == "cc-store"
        pool.run("all_reduce", {"sizes": [1024], "dtype": "float32", "warmup": 1, "iters": 2, "check_iters": 1,
                                "judge_at": 1024, "placements": ["in"]}, 60)
        pid = proc.pid
    finally:
        manager.close()
    assert proc.poll() is not None and not Path(f"/proc/{pid}").exists()  # ended, and reaped by the zygote


@pytest.mark.pool
def test_a_store_process_that_dies_fails_the_task_at_once(tmp_path: Path) -> None:
    manager = PoolManager(tmp_path / "logs")
    try:
        pool = manager.get(PoolKey("gloo", 2))
        assert pool._store_proc is not None
        pool._store_proc.kill()
        pool._store_proc.wait(10)
        t0 = time.monotonic()
        with pytest.raises(HarnessError):
            pool.run("all_reduce", {"sizes": [1024], "dtype": "float32", "warmup": 1, "iters": 2,
                                    "check_iters": 1, "judge_at": 1024, "placements": ["in"]}, 60)
        assert time.monotonic() - t0 < 15
    finally:
        manager.close(kill=True)


@pytest.mark.pool
def test_a_local_run_never_imports_torch_in_the_controller(tmp_path: Path) -> None:
    code = ("import sys; from clustercheck import cli; "
            "code = cli.main(['run', 'cpu-smoke', '-k', 'allreduce-small-latency', '--out', sys.argv[1]]); "
            "print('torch in the controller:', 'torch' in sys.modules); sys.exit(code)")
    env = {k: v for k, v in os.environ.items() if k != "CLUSTERCHECK_ZYGOTE"}
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "out")], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "torch in the controller: False" in done.stdout


@pytest.mark.pool
def test_a_store_that_stops_answering_is_a_harness_error_even_while_a_wait_is_cancelled(tmp_path: Path) -> None:
    """The store's process stopped (SIGSTOP) mid-wait: neither the wait's end nor the cancel's answer
    comes, and the client says so as StoreSilent, never a bare socket timeout."""
    import signal

    manager = PoolManager(tmp_path / "logs")
    try:
        pool = manager.get(PoolKey("gloo", 2))
        assert pool._store_proc is not None and isinstance(pool.store, StoreClient)
        pool.store.set_timeout(0.5)
        os.kill(pool._store_proc.pid, signal.SIGSTOP)
        try:
            with pytest.raises(StoreSilent, match="the pool's store: no answer within 0.5 s"):
                pool.store.wait(["never"], 0.2)
        finally:
            os.kill(pool._store_proc.pid, signal.SIGCONT)
    finally:
        manager.close(kill=True)


@pytest.mark.pool
def test_a_pool_whose_store_is_lost_still_closes_and_ends_its_ranks(tmp_path: Path) -> None:
    """The end of a run tells every pool to leave (pools.close): a pool that can no longer reach its store
    must not raise there, or the run's reports would be lost; its ranks are killed instead."""
    manager = PoolManager(tmp_path / "logs")
    pool = manager.get(PoolKey("gloo", 2))
    procs = list(pool.procs)
    assert isinstance(pool.store, StoreClient)
    pool.store.close()  # every query from now on fails: StoreLost
    t0 = time.monotonic()
    manager.close()
    assert all(p.poll() is not None for p in procs) and time.monotonic() - t0 < 15
