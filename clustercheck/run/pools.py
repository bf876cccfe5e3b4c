"""The run's rank pools, one per launch environment: a live pool is reused, a failed one dropped and
replaced on next use, and every rank killed at once on a signal."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from clustercheck.run.launch import Launcher, LocalLauncher
from clustercheck.run.pool import PoolKey, WorkerPool


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

    def progress(self) -> str:
        """What the task running now last said of itself (the per-size step of a sweep), or ""."""
        return next((p.progress for p in list(self.pools.values()) if p.progress), "")

    def discard(self, key: PoolKey) -> None:
        pool = self.pools.pop(key, None)
        if pool is not None:
            pool.close(kill=True)

    def close(self, kill: bool = False, wait: bool = True) -> None:
        """End every pool (killed with `kill`). Without `wait`, only tell the ranks to leave: they end while
        the controller writes the reports (a rank holding a CUDA context took 0.26 s to go on an H100), and
        a later close() waits for them."""
        if not kill:
            for pool in self.pools.values():
                pool.ask_exit()  # all pools at once: each one's ranks end while the others' do
            if not wait:
                return
        for key in list(self.pools):
            self.pools.pop(key).close(kill=kill)

    def kill_all(self) -> None:
        """SIGKILL every rank at once, waiting for nothing (safe from a signal handler): whatever the
        controller is waiting on then ends within a polling round."""
        for pool in list(self.pools.values()):
            for proc in list(pool.procs):
                if proc.poll() is None:
                    proc.kill()
