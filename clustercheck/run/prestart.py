"""The first rank pool of a local run, started before anything else: its ranks spend seconds importing
torch and joining a process group, and the controller meanwhile reads the suites and profiles, starts
pytest, collects and reads the platform. The session adopts the pool when it wants one of that kind (its
logs move into the run directory, as the facts pool's do) and ends it otherwise; nothing is measured on
it before the session starts.

Only for the local launcher: a multi-node run reads each node's facts on a pool of its own first. The
ranks are spawned from the calling thread (Linux sends a rank its parent-death signal when the *thread*
that forked it ends); only the controller's side (reaching the store, which the zygote forks once it has
imported torch, and waiting for the ranks) runs in a background thread."""

from __future__ import annotations

import os
import shutil
import threading
from dataclasses import dataclass, field
from pathlib import Path

from clustercheck.judging.platform import Facts, layout, read_facts
from clustercheck.run.launch import LocalLauncher
from clustercheck.run.pool import PoolKey, WorkerPool
from clustercheck.run.zygote import end_shared as end_shared_zygote


@dataclass
class Prestarted:
    pool: WorkerPool
    facts: Facts  # this machine's, read once for the pool and the session
    starting: Path  # where its logs are until the run directory exists
    made: tuple[Path, ...] = ()  # the directories above `starting` that did not exist before (--out)
    thread: threading.Thread | None = None
    error: BaseException | None = field(default=None)

    def _connect(self) -> None:
        try:
            self.pool.connect()
        except BaseException as exc:  # said again, with its cause, by the pool the session starts instead
            self.error = exc

    def ready(self) -> WorkerPool | None:
        """The pool once every rank has joined; None (and the pool ended) when it could not start."""
        if self.thread is not None:
            self.thread.join()
        else:  # never handed to a thread (connect_later, then no go()): connect here
            self._connect()
        if self.error is None:
            return self.pool
        self.discard()
        return None

    def discard(self, also: Path | None = None) -> None:
        """End the pool now: its ranks are killed first, so that a start still under way ends at once. `also`
        (the run directory a signal cut short) goes before the directories made for --out are removed: it
        is inside them, and its removal after left an empty --out behind."""
        for proc in self.pool.procs:
            if proc.poll() is None:
                proc.kill()
        if self.thread is not None:
            self.thread.join()
        self.pool.close(kill=True)
        for gone in (self.starting, also):
            if gone is not None:
                shutil.rmtree(gone, ignore_errors=True)
        for directory in self.made:  # a run that never started leaves no --out behind
            try:
                directory.rmdir()
            except OSError:
                break  # something else is in it now


_pending: Prestarted | None = None


def begin(out: Path, backend: str, ranks: int | None, nccl_log: str, connect_later: bool = False) -> None:
    """Start the pool a local run of these options starts first, if none is pending; a failure to start
    it is left for the session to meet and report (nothing is said here). With `connect_later`, only the
    ranks start: the controller's side (reaching the store and waiting for the ranks) waits for go(), so
    that input refused in the meantime ends the run at once, with nothing to wait for."""
    global _pending
    if _pending is not None or ranks is not None and not 1 <= ranks <= (os.cpu_count() or 1):
        return  # more ranks than cores is the options' to refuse or allow (--force), not ours to start early
    facts = read_facts()
    try:
        backend, per_node = layout(backend, ranks, {facts.host: facts})
    except Exception:
        return
    mode = "init" if backend == "nccl" and nccl_log in ("full", "init") else "off"
    starting = out / f".starting-{os.getpid()}"
    made = tuple(d for d in (out.absolute(), *out.absolute().parents) if not d.exists())  # deepest first
    pool = WorkerPool(PoolKey(backend, per_node, (), nccl_log=mode), starting / "logs", 1, LocalLauncher())
    # pending before any process starts: a signal from here on (KeyboardInterrupt, out of pool.spawn too)
    # leaves it to end(), which kills the zygote at once; otherwise it would outlive the run by its import
    pending = _pending = Prestarted(pool, facts, starting, made)
    try:
        starting.mkdir(parents=True)
        pool.spawn()
    except Exception:
        _pending = None
        pending.discard()  # the session meets the failure again and says it; the zygote is its to use
        return
    if not connect_later:
        go()


def go() -> None:
    """The controller's side of the pending pool: reach the store, wait for the ranks, in a
    thread while pytest starts."""
    if _pending is not None and _pending.thread is None:
        _pending.thread = threading.Thread(target=_pending._connect, name="clustercheck-prestart", daemon=True)
        _pending.thread.start()


def take() -> Prestarted | None:
    """The pending pool, handed over once (the session adopts or ends it)."""
    global _pending
    found, _pending = _pending, None
    return found


def end() -> None:
    """End a pool nobody took (a run refused before it started, --collect-only, nothing collected)."""
    found = take()
    if found is not None:
        found.discard()
        end_shared_zygote()  # it may still be importing torch, seconds of CPU for nothing
