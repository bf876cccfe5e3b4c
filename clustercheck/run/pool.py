"""Long-lived rank processes, one pool per launch environment, driven through a c10d TCPStore.

Starting torch and a process group costs seconds, so a pool is started once and reused by every
check with the same (backend, ranks, env); NCCL reads some variables once per process, so a check
with another environment gets its own pool. The controller posts `task/<seq>` and each rank
answers `result/<seq>/<rank>`; a dead or silent rank ends the pool, and the next check gets a
fresh one.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from clustercheck.errors import HarnessError, escape
from clustercheck.run import wire
from clustercheck.run.failure import (PEER_LOST, Heard, RankFailure, exit_text, log_tail, quote, rank_names,
                                      silent_story)
from clustercheck.run.launch import Launcher, LocalLauncher
from clustercheck.run.launcher import RankProcess
from clustercheck.run.store import StoreClient, StoreLost, served
from clustercheck.run.zygote import moved as zygote_moved

START_TIMEOUT = 180.0
# After a first rank fails, how long to let the others answer, die or be reported dead (an agent reports a
# killed rank a moment after its peers have seen the connection drop), so that the message names the
# rank that caused the failure rather than the first peer that noticed it.
GRACE = 3.0
BEAT_WAIT = 2.5  # after a timeout, how long to watch the silent ranks' heartbeats (worker.BEAT: 1 s)
IDLE = {"idle": True}  # the result of a rank in no group of its task (measure.run_task's own)


@dataclass(frozen=True)
class PoolKey:
    backend: str  # nccl or gloo
    nranks: int
    env: tuple[tuple[str, str], ...] = ()
    nccl_log: str = "off"  # what NCCL logs to each rank's file: off, init (timed pools), tuning (untimed)


class WorkerPool:
    def __init__(self, key: PoolKey, log_dir: Path, number: int, launcher: Launcher | None = None) -> None:
        self.key = key
        self.log_dir = log_dir
        self.number = number
        self.launcher = launcher or LocalLauncher()
        self.procs: list[RankProcess] = []
        self.logs: list[Path] = []
        self.ranks: list[dict[str, Any]] = []
        self.seq = 0
        self.progress = ""  # what the running task last said of itself (wire.PROGRESS_KEY), for the live line
        self.store: Any = None
        self.key_hex = self.launcher.pool_key(number)
        self.start_seconds = 0.0  # from the first socket to the last rank ready
        self._t0 = 0.0
        self._advertised = ""
        self._listener: socket.socket | None = None
        self._store_proc: RankProcess | None = None  # the store's own process, where the launcher gave one
        self._store_port = 0
        self._exit_asked: float | None = None  # when the ranks were told to leave

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> None:
        """Start the ranks and wait until each has joined (RankFailure when one cannot)."""
        self.spawn()
        self.connect()

    def spawn(self) -> None:
        """Start the rank processes (from the thread that will outlive them: Linux sends a rank its
        parent-death signal when the *thread* that forked it ends). The local launcher listens on
        loopback only (TCPStore alone would bind every interface); node agents reach the controller at
        one port, the launcher's store, which it lends every pool. The socket
        listens before the ranks start and `connect` hands it to the store: the ranks import torch
        meanwhile (seconds each) and their connections wait in the backlog."""
        self._t0 = time.monotonic()
        lent = self.launcher.pool_store(self.number)
        if lent is not None:
            self.store, self._advertised, port = lent
        else:
            bind, self._advertised = self.launcher.store_bind()
            self._listener = socket.create_server((bind, 0), backlog=1024)
            port = self._store_port = self._listener.getsockname()[1]
        self.log_dir.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ)
        env.update(self.key.env)
        env.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")  # c10d store polling would log every wait
        if self.key.backend == "gloo" and not self.launcher.remote:
            env.setdefault("GLOO_SOCKET_IFNAME", "lo")
        # Ranks share a node's cores; as torchrun does, keep each rank's intra-op threads from
        # oversubscribing them (which slows CPU-side work and distorts gloo timings).
        placed = [n for n in self.launcher.nodes if n not in self.launcher.left_out]  # less the nodes lost mid-run
        per_node = max(1, self.key.nranks // max(1, len(placed)))
        env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // per_node)))
        env.update(CC_WORLD_SIZE=str(self.key.nranks), CC_BACKEND=self.key.backend,
                   CC_STORE_HOST=self._advertised, CC_STORE_PORT=str(port), CC_NCCL_LOG=self.key.nccl_log,
                   CC_LOG_DIR=str(self.log_dir), CC_POOL_NUMBER=str(self.number))
        env.pop(wire.TOKEN_ENV, None)
        self.logs = [self.log_dir / f"pool{self.number}-rank{r}.log" for r in range(self.key.nranks)]
        try:
            if self._listener is not None:  # served elsewhere (the zygote's child), or by `connect` here
                self._store_proc = self.launcher.store_process(self._listener, self._advertised, port, env,
                                                               self._store_log)
                if self._store_proc is not None:
                    self._listener.close()  # the store process holds its own copy
                    self._listener = None
            self.procs = list(self.launcher.start(env, self.key.nranks, self.key_hex, self.logs,
                                                  check_env=dict(self.key.env)))
        except BaseException:
            if self._listener is not None:
                self._listener.close()
            self._end_store()
            raise

    def connect(self) -> None:
        """Reach the store: the client of the store's own process where `spawn` started one, else torch's
        TCPStore served here on the socket `spawn` made (imported while the ranks import theirs), unless
        the launcher lent one; then wait until every rank has joined."""
        if self.store is None and self._store_proc is not None:
            self.store = self._store_client()
        elif self.store is None:
            import torch.distributed as dist

            assert self._listener is not None, "connect() follows spawn()"
            self.store = dist.TCPStore(self._advertised, self._store_port, is_master=True, wait_for_workers=False,
                                       timeout=timedelta(seconds=START_TIMEOUT),
                                       master_listen_fd=self._listener.detach())  # the store owns and closes it
        keys = {r: f"ready/{r}" for r in range(self.key.nranks)}
        self._wait(keys, START_TIMEOUT, "starting the ranks")
        self.ranks = [self._read(k) for k in keys.values()]
        self.start_seconds = time.monotonic() - self._t0

    def alive(self) -> bool:
        return bool(self.procs) and all(p.poll() is None for p in self.procs)

    def move_logs(self, to: Path) -> None:
        """Rename the logs' directory (a pool started before the run directory existed joins it): the
        ranks keep writing to the same files, and the zygote's log, in the same directory, is named
        anew wherever it is quoted."""
        os.replace(self.log_dir, to)
        zygote_moved(self.log_dir, to)
        self.log_dir, self.logs = to, [to / p.name for p in self.logs]

    def ask_exit(self) -> None:
        """Tell the ranks to leave, waiting for none of them (close() waits)."""
        if self._exit_asked is None and self.alive() and self.store is not None:
            self.seq += 1
            try:
                self.store.set(wire.task_key(self.seq), wire.seal(self.key_hex, {"op": "exit"}))
            except StoreLost:  # the store's process is gone: nobody can tell them, close() kills them
                return
            self._exit_asked = time.monotonic()

    def close(self, *, kill: bool = False) -> None:
        if not kill:
            self.ask_exit()
        if not kill and self._exit_asked is not None:
            deadline = self._exit_asked + 10
            for p in self.procs:
                try:
                    p.wait(max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    pass
        for p in self.procs:
            if p.poll() is None:
                p.kill()
        for p in self.procs:
            p.wait()
        self.procs = []
        self._end_store()
        self.store = None

    # -- the store in a process of its own -------------------------------------------------------------
    @property
    def _store_log(self) -> Path:
        return self.log_dir / f"pool{self.number}-store.log"

    def _store_client(self) -> StoreClient:
        """The client of the store `_store_proc` serves, once the zygote has forked it (after its import)."""
        proc = self._store_proc
        assert proc is not None
        try:
            return served(self._advertised, self._store_port, START_TIMEOUT, "the pool's store",
                          lambda: proc.poll() is None and any(p.poll() is None for p in self.procs))
        except StoreLost as exc:
            said = log_tail(self._store_log, 3)  # a store process that ran and failed says why there
            raise StoreLost(f"{exc}; " + (f"its process said: {escape(said)}" if said else
                                          f"its process left no words in {self._store_log}")) from None

    def _end_store(self) -> None:
        """End the store's process (after the ranks: they read their last task from it)."""
        if isinstance(self.store, StoreClient):
            self.store.close()
        if self._store_proc is not None:
            self._store_proc.kill()
            self._store_proc.wait()
            self._store_proc = None

    # -- tasks -----------------------------------------------------------------------------
    def run(self, op: str, params: dict[str, Any], timeout: float,
            groups: list[list[int]] | None = None, runner: str | None = None) -> list[dict[str, Any]]:
        """Run one task on every rank (inside `groups` of global ranks at once, when given): `runner`
        ("module:function", a measure kind's rank-side code) called with `params`, `op` naming it in
        messages. Return each rank's result in rank order (IDLE for a rank in no group), or raise
        RankFailure."""
        self.progress = ""
        self.store.delete_key(wire.PROGRESS_KEY)  # the last task's words are not this one's (absent: no-op)
        self.seq += 1
        seq = self.seq
        n = self.key.nranks
        busy = sorted({r for g in groups for r in g}) if groups is not None else list(range(n))
        # Ranks outside every group post nothing: a localization round leaves about half of them idle,
        # and their results were half of what the controller read and verified (docs/localize.md).
        task = {"op": op, "params": params, "groups": groups, "runner": runner, "answering": len(busy)}
        self.store.set(wire.task_key(seq), wire.seal(self.key_hex, task))
        keys = {r: wire.result_key(seq, r) for r in busy}
        heard = self._wait(keys, timeout, op, seq, idle=frozenset(range(n)) - frozenset(busy), groups=groups)
        if heard.errors:
            raise self._failure(heard, op)
        # The store lives in this process: kept, a task's keys would cost a few KiB per check for the
        # whole session, outside Python's heap. Each rank deletes its result when it reads the next task.
        for k in (wire.task_key(seq), wire.answers_key(seq), wire.complete_key(seq)):
            self.store.delete_key(k)
        return [heard.ok[r] for r in range(self.key.nranks)]

    def _wait(self, keys: dict[int, str], timeout: float, what: str, seq: int | None = None,
              idle: frozenset[int] = frozenset(), groups: list[list[int]] | None = None) -> Heard:
        """Wait for task `seq`'s answers (or, without `seq`, for every key), watching the ranks; backs
        off from 1 ms so short checks pay no latency. Each round costs two store lookups and a
        waitpid per local process, whatever the number of ranks. Returns the answers; a death, an
        error or the timeout raises RankFailure once the other ranks have had GRACE seconds to answer
        or be reported, and the `groups` that share no rank with the failed ones have answered (until
        the timeout: silent then, they time out)."""
        deadline = time.monotonic() + timeout
        delay = 0.001
        done = [wire.complete_key(seq)] if seq is not None else list(keys.values())
        errors = [wire.errors_key(seq)] if seq is not None else []
        # where to look for answers on a failure: every rank's key (an idle rank posts only an error)
        results = {r: wire.result_key(seq, r) for r in range(self.key.nranks)} if seq is not None else {}
        heard = Heard(ok=dict.fromkeys(idle, IDLE), idle=idle, groups=tuple(frozenset(g) for g in groups or ()))
        next_look = time.monotonic() + 1.0
        while not self.store.check(done):
            if seq is not None and time.monotonic() >= next_look:  # where the task stands, for the live line
                next_look += 1.0
                self.progress = self._progress()
            if any(p.poll() is not None for p in self.procs) or errors and self.store.check(errors):
                self._listen(results, heard)
                self._settle(results, heard)
                raise self._failure(heard, what, timed_out=None if self._untouched(results, heard, deadline, seq)
                                    else timeout)
            if time.monotonic() > deadline:
                self._listen(results, heard)
                raise self._failure(heard, what, timed_out=timeout)
            time.sleep(delay)
            delay = min(delay * 2, 0.05)
        if seq is not None:
            multi_get = getattr(self.store, "multi_get", None)  # torch >= 2.4: one round trip for all
            names = list(keys.values())
            values = multi_get(names) if multi_get else [self.store.get(k) for k in names]
            for (rank, k), value in zip(keys.items(), values):
                heard.hear(rank, self._unseal(k, value))
            if self.store.check(errors):  # an idle rank's error does not hold up the count: read it too
                self._listen(results, heard)
        return heard

    def _progress(self) -> str:
        try:
            if self.store.check([wire.PROGRESS_KEY]):
                return escape(self.store.get(wire.PROGRESS_KEY).decode("utf-8", "replace"))[:80]
        except Exception:  # a store hiccup must not fail the task it only reports on
            pass
        return ""

    def _listen(self, results: dict[int, str], heard: Heard) -> None:
        """Add new answers (from the `results` keys) and deaths to `heard`."""
        for rank, k in results.items():
            if (rank in heard.idle or rank not in heard.ok) and rank not in heard.errors and self.store.check([k]):
                heard.hear(rank, self._read(k))
        # a stand-in for a remote rank may know more than an exit status (its node's agent went silent)
        deaths = {r: getattr(p, "ended", "") or exit_text(p.returncode) for r, p in enumerate(self.procs)
                  if p.poll() is not None}
        for rank, why in deaths.items():
            if rank in heard.idle:  # it had nothing to say, but a rank that died ends the pool
                heard.ok.pop(rank, None)
            if rank not in heard.ok and rank not in heard.errors:  # it had its say before it went
                heard.dead.setdefault(rank, why)

    def _settle(self, results: dict[int, str], heard: Heard) -> None:
        """Give the other ranks GRACE seconds to answer, fail or be reported dead."""
        end = time.monotonic() + GRACE
        while len(heard.accounted()) < self.key.nranks and time.monotonic() < end:
            time.sleep(0.05)
            self._listen(results, heard)

    def _untouched(self, results: dict[int, str], heard: Heard, deadline: float, seq: int | None) -> bool:
        """Wait, up to the task's deadline, for the groups that no failed rank touched (Heard.awaited): alive
        and measuring, they keep their results. Their answers are read when the task's counts of answers and
        errors move (a rank posts its result first), deaths at each look. False: some still silent at the end."""
        seen: tuple[int, int] | None = None
        while seq is not None and heard.awaited() and time.monotonic() < deadline:
            time.sleep(0.05)
            counts = (self.store.add(wire.answers_key(seq), 0), self.store.add(wire.errors_key(seq), 0))
            self._listen(results if counts != seen else {}, heard)
            seen = counts
        return not heard.awaited()

    def _failure(self, heard: Heard, what: str, timed_out: float | None = None) -> RankFailure:
        """The story of a failed task, cause first: ranks that died, then ranks that raised an error of
        their own, then those that only lost a peer, then those that said nothing."""
        n = self.key.nranks
        if not heard.dead and not heard.errors and len(heard.ok) == n:
            # all posted, none completed: a rank died between posting its result and counting it (worker._answer)
            for r, p in enumerate(self.procs):
                if p.poll() is not None:
                    heard.ok.pop(r, None)
                    heard.dead[r] = getattr(p, "ended", "") or exit_text(p.returncode)
        lost = {r for r, e in heard.errors.items() if PEER_LOST.search(e)}
        own = sorted(set(heard.errors) - lost)
        silent = [r for r in range(n) if r not in heard.accounted()]
        causes = [*heard.dead, *own]  # deaths in the order seen
        parts = [f"rank {r} ({self._host(r)}) {reason} during {what}" for r, reason in heard.dead.items()]
        if parts and (said := self._last_line(next(iter(heard.dead)))):  # the launcher's own words (ssh: ...) first
            parts[0] += f": {said}"
        parts += [f"rank {r} ({self._host(r)}) raised {heard.errors[r]}" for r in own]
        for r in sorted(lost):
            first = heard.errors[r].splitlines()[0]
            parts.append(f"rank {r} ({self._host(r)}) then lost a peer: {first}" if causes
                         else f"rank {r} ({self._host(r)}) raised {heard.errors[r]}")
        stopped: frozenset[int] = frozenset()
        if timed_out is not None:
            before = self._beats(silent)
            time.sleep(BEAT_WAIT)  # a live rank beats at least twice meanwhile
            story, stopped = silent_story(silent, before, self._beats(silent), self._names, BEAT_WAIT)
            parts.insert(len(heard.dead), f"timed out after {timed_out:g} s during {what}: {story}")  # deaths first
        elif silent:
            parts.append(f"no answer from {self._names(silent)}")
        # what the cause was doing: a rank that died, else one that raised (its traceback is in its log)
        quoted = list(heard.dead)[:1] or own[:1] or sorted(stopped) or (silent if timed_out is not None else [])
        message = "; ".join(parts) + (quote(quoted, self.logs, self.log_dir, self.number) if quoted else "")
        failed = frozenset(range(n)) - frozenset(heard.ok)
        hosts = {self._host(r) for r in stopped}  # a node is unreachable when none of its silent ranks beats
        unreachable = {h for h in hosts if not any(self._host(r) == h for r in silent if r not in stopped)}
        # ... or when its node's agent went silent, taking its ranks (remote.RemotePool)
        unreachable |= {self._host(r) for r in heard.dead if getattr(self.procs[r], "ended", "")}
        return RankFailure(message, dict(heard.ok), failed, tuple(sorted(unreachable)))

    def _beats(self, ranks: list[int]) -> dict[int, str]:
        """Each rank's heartbeat counter as the store has it now (worker.py); a rank that never beat, a beat
        not sealed with this pool's key for that rank (it reads as no beat), or a store that cannot answer,
        is left out."""
        try:
            values = wire.read_present(self.store, {r: wire.alive_key(r) for r in ranks})
        except Exception:  # a store hiccup: every silent rank reads as stopped, as before heartbeats
            return {}
        return {r: str(beat) for r, v in values.items() if (beat := wire.beat_of(self.key_hex, v, rank=r)) is not None}

    def _names(self, ranks: list[int]) -> str:
        return rank_names(ranks, self._host)

    def _read(self, key: str) -> Any:
        return self._unseal(key, self.store.get(key))

    def _unseal(self, key: str, value: bytes) -> Any:
        try:
            return wire.unseal(self.key_hex, value)
        except wire.Forged as exc:
            raise HarnessError(f"{key}: {exc}") from None

    def _last_line(self, rank: int) -> str:
        """The last line a rank (or the program that was to start it, such as ssh) wrote, cut to 200
        characters: the one line a one-line summary quotes."""
        lines = [ln.strip() for ln in self.tail(rank, 4).splitlines() if ln.strip()]
        return lines[-1][:200] if lines else ""

    def _host(self, rank: int) -> str:
        """The host a rank said it runs on; before it said so (a failed start), where it was sent."""
        if rank < len(self.ranks):
            return str(self.ranks[rank]["host"])
        return self.launcher.node_of(rank, self.key.nranks)

    def tail(self, rank: int, lines: int = 8) -> str:
        """The last lines this rank wrote."""
        return log_tail(self.logs[rank], lines) if rank < len(self.logs) else ""

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]
