"""signals.deferred: SIGINT and SIGTERM wait until a block that must not be cut in two is done, then reach
the handler they would have reached, even with other threads running (the kernel may hand a signal to any
of them; Python runs its handler in the main thread)."""

from __future__ import annotations

import os
import signal
import threading
import time

from clustercheck.run.signals import deferred


def test_a_signal_inside_the_block_reaches_its_handler_after_it() -> None:
    seen: list[tuple[int, bool]] = []
    inside = False
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: seen.append((signum, inside)))
    busy = threading.Event()
    other = threading.Thread(target=busy.wait, daemon=True)  # a thread that does not block the signal
    other.start()
    try:
        with deferred():
            inside = True
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.2)  # long enough for the handler to have run, were it not deferred
            assert seen == []
            inside = False
        assert seen == [(signal.SIGTERM, False)]
    finally:
        busy.set()
        signal.signal(signal.SIGTERM, previous)


def test_nothing_arrives_nothing_is_raised() -> None:
    seen: list[int] = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: seen.append(signum))
    try:
        with deferred():
            pass
        assert seen == [] and signal.getsignal(signal.SIGTERM) is not None
    finally:
        signal.signal(signal.SIGTERM, previous)
