"""Ranks that a node agent started on another machine, as the pool watches them (run/join.py): each
rank's exit status and output as its agent reports them (the output into the controller's rank logs, so
that a failure quotes it as it quotes a local rank's), and an agent that went silent taking its ranks
with it."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import IO, Any, Mapping, Protocol

from clustercheck.run import gang, wire

POLL = 0.1  # seconds between looks at the store while a pool waits on its ranks


class Agents(Protocol):
    """What a remote pool needs of the launcher that holds the agents (join.JoinLauncher)."""

    store: Any

    def silent(self) -> Mapping[int, str]: ...

    def post(self, member: gang.Member, message: dict[str, Any]) -> None: ...


class RemotePool:
    """One pool's ranks as their agents report them: exit statuses, pids, output (into the controller's
    rank logs, so that a failure quotes them as it quotes a local rank's)."""

    def __init__(self, launcher: Agents, number: int, placement: list[gang.Member], logs: list[Path]) -> None:
        self.launcher = launcher
        self.number = number
        self.placement = placement  # rank -> its agent
        self.codes: dict[int, int] = {}
        self.why: dict[int, str] = {}
        self.pids: dict[int, int] = {}
        # kept open: the session may move the log directory (the facts pool), the files stay ours
        self.files: list[IO[bytes] | None] = [log.open("ab") for log in logs]
        self.killed: set[int] = set()
        self.seen_exits = 0
        self.seen_logs = 0
        self.chunks: dict[int, int] = {}  # agent -> log chunks read
        self._next = 0.0
        self.ranks = [RemoteRank(self, r) for r in range(len(placement))]

    def refresh(self, force: bool = False) -> None:
        now = time.monotonic()
        if self.launcher.store is None or not force and now < self._next or len(self.codes) == len(self.ranks):
            return
        self._next = now + POLL
        store = self.launcher.store
        exits = store.add(gang.exits_key(self.number), 0)  # before the logs: an agent ships output first
        if (logs := store.add(gang.logs_key(self.number), 0)) != self.seen_logs:
            self.seen_logs = logs
            self._read_logs()
        if exits != self.seen_exits:
            self.seen_exits = exits
            for r, m in enumerate(self.placement):
                if r not in self.codes and store.check([gang.exit_key(self.number, r)]):
                    self._ended(r, self._unseal(m, store.get(gang.exit_key(self.number, r))).get("code", -1))
        for index, why in self.launcher.silent().items():
            for r, m in enumerate(self.placement):
                if m.index == index and r not in self.codes:
                    self.why[r] = f"was lost with {why},"
                    self._write(r, f"clustercheck: {why}: its ranks are taken as gone\n")
                    self._ended(r, -9)

    def _read_logs(self) -> None:
        store = self.launcher.store
        for m in {m.index: m for m in self.placement}.values():
            have = store.add(gang.log_count(self.number, m.index), 0)
            for n in range(self.chunks.get(m.index, 0) + 1, have + 1):
                chunk = self._unseal(m, store.get(gang.log_chunk(self.number, m.index, n)))
                rank = chunk.get("rank")
                if isinstance(rank, int) and 0 <= rank < len(self.ranks) and self.placement[rank] is m:
                    self._write(rank, str(chunk.get("text", "")))
            self.chunks[m.index] = have

    def _unseal(self, member: gang.Member, value: bytes) -> dict[str, Any]:
        try:
            found = wire.unseal(member.key, value)
            return found if isinstance(found, dict) else {}
        except wire.Forged:
            return {"code": -1, "text": f"clustercheck: a message from agent {member.index} failed verification\n"}

    def _write(self, rank: int, text: str) -> None:
        fh = self.files[min(rank, len(self.files) - 1)]
        if fh is not None:
            fh.write(text.encode())
            fh.flush()

    def _ended(self, rank: int, code: int) -> None:
        self.codes[rank] = int(code)
        fh = self.files[min(rank, len(self.files) - 1)]
        if fh is not None and len(self.files) == len(self.ranks):
            fh.close()
            self.files[rank] = None

    def pid(self, rank: int) -> int:
        if rank not in self.pids and self.launcher.store is not None:
            m = self.placement[rank]
            key = gang.spawned_key(self.number, m.index)
            if self.launcher.store.check([key]):
                found = self._unseal(m, self.launcher.store.get(key)).get("pids") or {}
                self.pids.update({int(r): int(p) for r, p in found.items()})
        return self.pids.get(rank, 0)

    def kill(self, rank: int) -> None:
        m = self.placement[rank]
        if m.index not in self.killed and self.launcher.store is not None and m.index not in self.launcher.silent():
            self.killed.add(m.index)
            self.launcher.post(m, {"op": "kill", "pool": self.number})

    def close_files(self) -> None:
        for i, fh in enumerate(self.files):
            if fh is not None:
                fh.close()
                self.files[i] = None


class RemoteRank:
    """A rank on another node as the pool watches a process (run.launcher.RankProcess)."""

    def __init__(self, pool: RemotePool, rank: int) -> None:
        self.pool = pool
        self.rank = rank

    @property
    def pid(self) -> int:
        return self.pool.pid(self.rank)

    @property
    def returncode(self) -> int | None:
        return self.pool.codes.get(self.rank)

    @property
    def ended(self) -> str:
        """How it ended where an exit status does not say it (its agent went silent); "" otherwise."""
        return self.pool.why.get(self.rank, "")

    def poll(self) -> int | None:
        self.pool.refresh()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """Until the agent reports this rank's end; without a timeout, at most until its agent counts as
        silent (gang.SILENCE), which a rank whose agent is alive reaches only by ending."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while (code := self.poll()) is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(f"rank {self.rank} on {self.pool.placement[self.rank].node}",
                                                timeout or 0.0)
            if self.pool.launcher.store is None:  # the launcher closed: nothing more will be heard
                return -9
            time.sleep(POLL / 2)
        return code

    def kill(self) -> None:
        self.pool.kill(self.rank)
