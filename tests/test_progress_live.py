"""The progress line: live on a terminal (a thread rewrites it with \\r once per interval, the elapsed time of
the current check moving, and ends it with a newline when the item finishes), one plain line per item off a
terminal, and a thread that stops on an interrupt."""

from __future__ import annotations

import io
import threading
import time

from clustercheck.progress import CLEAR, Progress

import pytest

pytestmark = pytest.mark.pool  # starts real rank pools or whole runs: `pytest -m 'not pool'` leaves it out


class FakeTTY(io.StringIO):
    def isatty(self) -> bool:
        return True


def _wait_for(condition, timeout: float = 5.0) -> bool:  # type: ignore[no-untyped-def]
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(0.01)
    return False


def test_a_terminal_line_is_rewritten_while_the_check_runs_and_ended_when_it_finishes() -> None:
    tty = FakeTTY()
    p = Progress(2, tty, interval=0.02)
    p.t0 -= 61  # the run is a minute old: the rewritten lines show that clock
    p.start("allreduce-sweep", "node7")
    assert _wait_for(lambda: tty.getvalue().count("\r") >= 4)  # redrawn by the thread, not by the caller
    p.finished_one()
    text = tty.getvalue()
    assert text.endswith("\n") and text.count("\n") == 1
    assert all(part.startswith("clustercheck [1/2] allreduce-sweep on node7, elapsed 1:01 (this 0:00)")
               and part.rstrip("\n").endswith(CLEAR)
               for part in text.split("\r")[1:])
    p.start("b", None)
    p.finished_one()
    assert tty.getvalue().splitlines()[-1].split("\r")[-1].startswith("clustercheck [2/2] b, elapsed")
    p.stop()
    assert p._thread is None


def test_off_a_terminal_one_plain_line_per_item_and_no_thread() -> None:
    log = io.StringIO()
    p = Progress(2, log, interval=0.01)
    p.start("a", "n1")
    time.sleep(0.05)
    p.finished_one()
    p.start("b", "n1")
    p.finished_one()
    lines = log.getvalue().splitlines()
    assert "\r" not in log.getvalue() and CLEAR not in log.getvalue()
    assert [line.split(",")[0] for line in lines] == ["clustercheck [1/2] a on n1", "clustercheck [2/2] b on n1"]
    assert p._thread is None


def test_the_thread_sleeps_between_redraws_and_stops_on_an_interrupt() -> None:
    tty = FakeTTY()
    interrupted = threading.Event()
    p = Progress(1, tty, interval=0.05, stopped=interrupted.is_set)
    cpu = time.thread_time()
    p.start("long", "n1")
    time.sleep(0.3)
    assert 2 <= tty.getvalue().count("\r") <= 10  # about one redraw per interval: no busy loop
    interrupted.set()  # teardown never comes after an interrupt
    assert p._thread is not None and _wait_for(lambda: not p._thread.is_alive(), 1.0)  # type: ignore[union-attr]
    quiet = tty.getvalue()
    time.sleep(0.15)
    assert tty.getvalue() == quiet  # nothing more is written over the summary
    assert time.thread_time() - cpu < 0.2


def test_the_live_line_shows_where_the_running_sweep_stands_from_its_ranks(project):
    """A gloo sweep posts its size step to the pool's store; the controller's poll reads it about once a
    second (pool.progress), and the live line shows it (checked through the pool, on real ranks)."""
    from pathlib import Path

    from clustercheck.kinds import KINDS
    from clustercheck.run.pool import PoolKey
    from clustercheck.run.pools import PoolManager

    manager = PoolManager(Path(project.path) / "logs")
    seen: list[str] = []
    try:
        pool = manager.get(PoolKey("gloo", 2))
        params = {"collective": "all_reduce", "sizes": [1 << 10, 1 << 22, 1 << 24], "dtype": "float32",
                  "warmup": 1, "iters": 100, "check_iters": 1, "placements": ["in"]}
        import threading

        stop = threading.Event()

        def watch() -> None:
            while not stop.wait(0.2):
                if manager.progress():
                    seen.append(manager.progress())

        t = threading.Thread(target=watch, daemon=True)
        t.start()
        pool.run("all_reduce", params, 120, runner=KINDS["all_reduce"].runner)
        stop.set()
        t.join()
    finally:
        manager.close(kill=True)
    assert seen and all(" of 3" in s for s in seen), seen
    from clustercheck.progress import Progress

    p = Progress(1)
    p.detail = lambda: "16MiB in-place, 3 of 3"
    assert ": 16MiB in-place, 3 of 3, elapsed" in p.line("sweep", "vm", started=0.0)
