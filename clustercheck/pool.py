"""Long-lived rank processes, one pool per launch environment, driven through a c10d TCPStore.

Starting torch and a process group costs seconds, so a pool is started once and reused by every
check with the same (backend, ranks, env); NCCL reads some variables once per process, so a check
with another environment gets its own pool. The controller posts `task/<seq>` and each rank
answers `result/<seq>/<rank>`; a dead or silent rank ends the pool, and the next check gets a
fresh one.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections import deque
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, Callable

from clustercheck import wire
from clustercheck.launch import Launcher, LocalLauncher

START_TIMEOUT = 180.0


@dataclass(frozen=True)
class PoolKey:
    backend: str  # nccl or gloo
    nranks: int
    env: tuple[tuple[str, str], ...] = ()
    nccl_log: str = "off"  # what NCCL logs to each rank's file: off, init (timed pools), tuning (untimed)


class HarnessError(Exception):
    """The harness could not measure (rank died, hung, raised): an *error* outcome, never *failed*."""


class WorkerPool:
    def __init__(self, key: PoolKey, log_dir: Path, number: int, launcher: Launcher | None = None) -> None:
        self.key = key
        self.log_dir = log_dir
        self.number = number
        self.launcher = launcher or LocalLauncher()
        self.procs: list[subprocess.Popen[bytes]] = []
        self.logs: list[Path] = []
        self.ranks: list[dict[str, Any]] = []
        self.seq = 0
        self.store: Any = None
        self.key_hex = wire.new_key()

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> None:
        import torch.distributed as dist

        # The local launcher listens on loopback only (TCPStore alone would bind every interface);
        # multi-node launchers must listen where the other nodes reach us.
        bind, advertised = self.launcher.store_bind()
        listener = socket.create_server((bind, 0), backlog=1024)
        port = listener.getsockname()[1]
        self.store = dist.TCPStore(advertised, port, is_master=True, wait_for_workers=False,
                                   timeout=timedelta(seconds=START_TIMEOUT),
                                   master_listen_fd=listener.detach())  # the store owns and closes it
        self.log_dir.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ)
        env.update(self.key.env)
        env.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")  # c10d store polling would log every wait
        if self.key.backend == "gloo" and self.launcher.kind == "local":
            env.setdefault("GLOO_SOCKET_IFNAME", "lo")
        # Ranks share a node's cores; as torchrun does, keep each rank's intra-op threads from
        # oversubscribing them (which slows CPU-side work and distorts gloo timings).
        per_node = max(1, self.key.nranks // max(1, len(self.launcher.nodes)))
        env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // per_node)))
        env.update(CC_WORLD_SIZE=str(self.key.nranks), CC_BACKEND=self.key.backend, CC_STORE_HOST=advertised,
                   CC_STORE_PORT=str(port), CC_NCCL_LOG=self.key.nccl_log, CC_LOG_DIR=str(self.log_dir),
                   CC_POOL_NUMBER=str(self.number))
        env.pop(wire.TOKEN_ENV, None)
        self.logs = [self.log_dir / f"pool{self.number}-rank{r}.log" for r in range(self.key.nranks)]
        if self.launcher.kind == "slurm":
            self.logs = [self.log_dir / f"pool{self.number}-srun.log"]
        self.procs = self.launcher.start(env, self.key.nranks, self.key_hex, self.logs)
        keys = [f"ready/{r}" for r in range(self.key.nranks)]
        self._wait(keys, START_TIMEOUT, "starting the ranks")
        self.ranks = [self._read(k) for k in keys]

    def alive(self) -> bool:
        return bool(self.procs) and all(p.poll() is None for p in self.procs)

    def close(self, *, kill: bool = False) -> None:
        if not kill and self.alive() and self.store is not None:
            self.seq += 1
            self.store.set(f"task/{self.seq}", wire.seal(self.key_hex, {"op": "exit"}))
            deadline = time.monotonic() + 10
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
        self.store = None

    # -- tasks -----------------------------------------------------------------------------
    def run(self, op: str, params: dict[str, Any], timeout: float,
            groups: list[list[int]] | None = None) -> list[dict[str, Any]]:
        """Run one task on every rank (inside `groups` of global ranks at once, when given); return each
        rank's result in rank order, or raise HarnessError."""
        self.seq += 1
        self.store.set(f"task/{self.seq}", wire.seal(self.key_hex, {"op": op, "params": params, "groups": groups}))
        keys = [f"result/{self.seq}/{r}" for r in range(self.key.nranks)]
        self._wait(keys, timeout, op)
        results = []
        for rank, k in enumerate(keys):
            payload = self._read(k)
            if not payload["ok"]:
                raise HarnessError(f"rank {rank} ({self._host(rank)}) raised {payload['error']}")
            results.append(payload["result"])
        # Every rank has read the task and answered: the store (in this process) need not keep either.
        # Kept, they cost a few KiB per check for the whole session, outside Python's heap.
        for k in (f"task/{self.seq}", *keys):
            self.store.delete_key(k)
        return results

    def _wait(self, keys: list[str], timeout: float, what: str) -> None:
        """Wait for keys, watching the ranks; backs off from 1 ms so short checks pay no latency."""
        deadline = time.monotonic() + timeout
        delay = 0.001
        while not self.store.check(keys):
            for i, p in enumerate(self.procs):
                if p.poll() is not None:
                    if len(self.procs) == 1 and self.key.nranks > 1:  # srun: one process for every rank
                        raise HarnessError(f"srun (all {self.key.nranks} ranks) {_exit_text(p.returncode)} during "
                                           f"{what}\n--- last output ({self.logs[0]}):\n{self._raw_tail()}")
                    raise HarnessError(f"rank {i} ({self._host(i)}) {_exit_text(p.returncode)} during "
                                       f"{what}{self._quote([i])}")
            for rank, k in enumerate(keys):
                if k.startswith("result/") and self.store.check([k]):
                    payload = self._read(k)
                    if not payload["ok"]:  # the others are probably stuck in a collective: don't wait
                        raise HarnessError(f"rank {rank} ({self._host(rank)}) raised {payload['error']}")
            if time.monotonic() > deadline:
                missing = [r for r, k in enumerate(keys) if not self.store.check([k])]
                names = ", ".join(f"rank {r} ({self._host(r)})" for r in missing)
                raise HarnessError(f"timed out after {timeout:g} s during {what}: no answer from {names}"
                                   f"{self._quote(missing)}")
            time.sleep(delay)
            delay = min(delay * 2, 0.05)

    def _read(self, key: str) -> Any:
        try:
            return wire.unseal(self.key_hex, self.store.get(key))
        except wire.Forged as exc:
            raise HarnessError(f"{key}: {exc}") from None

    def _raw_tail(self, lines: int = 12) -> str:
        try:
            with self.logs[0].open("rb") as fh:
                return b"".join(deque(fh, maxlen=lines)).decode(errors="replace").rstrip()
        except OSError:
            return ""

    def _quote(self, ranks: list[int], lines: int = 6) -> str:
        """The last output lines of these ranks (those that wrote any), to say what they were doing."""
        parts = [f"\n--- rank {r} last output ({self.logs[min(r, len(self.logs) - 1)]}):\n{text}" for r in ranks
                 if (text := self.tail(r, lines))]
        return "".join(parts) if parts else " (no output from them)"

    def _host(self, rank: int) -> str:
        return self.ranks[rank]["host"] if rank < len(self.ranks) else "localhost"

    def tail(self, rank: int, lines: int = 8) -> str:
        """The last lines this rank wrote (from srun's merged, rank-prefixed log under Slurm)."""
        shared = len(self.logs) == 1 and self.key.nranks > 1
        try:
            with self.logs[0 if shared else rank].open("rb") as fh:
                if not shared:
                    return b"".join(deque(fh, maxlen=lines)).decode(errors="replace").rstrip()
                prefix = f"{rank}: ".encode()
                return b"".join(deque((ln for ln in fh if ln.lstrip().startswith(prefix)), maxlen=lines)
                                ).decode(errors="replace").rstrip()
        except (OSError, IndexError):
            return ""

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]


def _exit_text(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


class PoolManager:
    """Pools by launch environment; a pool that failed is dropped and replaced on next use."""

    def __init__(self, log_dir: Path, on_start: Callable[[WorkerPool], None] | None = None,
                 launcher: Launcher | None = None) -> None:
        self.log_dir = log_dir
        self.on_start = on_start
        self.launcher = launcher or LocalLauncher()
        self.pools: dict[PoolKey, WorkerPool] = {}
        self.starts = 0

    def get(self, key: PoolKey) -> WorkerPool:
        pool = self.pools.get(key)
        if pool is not None and pool.alive():
            return pool
        if pool is not None:
            self.discard(key)
        self.starts += 1
        pool = WorkerPool(key, self.log_dir, self.starts, self.launcher)
        self.pools[key] = pool
        try:
            pool.start()
        except BaseException:
            self.discard(key)
            raise
        if self.on_start is not None:
            self.on_start(pool)
        return pool

    def discard(self, key: PoolKey) -> None:
        pool = self.pools.pop(key, None)
        if pool is not None:
            pool.close(kill=True)

    def close(self, kill: bool = False) -> None:
        for key in list(self.pools):
            self.pools.pop(key).close(kill=kill)
