"""`clustercheck agent`: a node agent. It reads which node of the run it is from the Indexed Job contract
(JOB_COMPLETION_INDEX, NODE_NAME, CLUSTERCHECK_CONTROLLER: gang.identity), joins the controller
(`clustercheck run --launcher join`, run/join.py), and starts this node's ranks whenever a pool asks,
reporting their exits and output. It never measures anything itself and imports no pytest.

It ends, and takes its ranks with it (SIGKILL to each rank's process group; the ranks also die with it
by PR_SET_PDEATHSIG), when the controller says goodbye (exit 0), when the controller is gone: its
connection drops or stays unanswered for gang.SILENCE seconds (exit 3), or on SIGTERM or SIGINT (a
pod being deleted; exit 128 + the signal). A GPU is so never held by a rank whose run is over. A bug of
clustercheck's own in the agent exits 70 (gang.AGENT_BUG, EX_SOFTWARE), after its traceback and one line
`clustercheck: internal error: ...` (cli.py): a code of its own, never 3, so that the launcher that started it
(run/hosts.py) tells the harness's crash, whose node is not to blame, from a node that went.
"""

from __future__ import annotations

import argparse
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from clustercheck import __version__, argtypes
from clustercheck.errors import UserError
from clustercheck.run import agentdir, gang, wire
from clustercheck.run.launch import WORKER
from clustercheck.run.launcher import RankProcess
from clustercheck.run.reaper import Reaped, command as reaper_command
from clustercheck.run.signals import interruptible
from clustercheck.run.zygote import end_shared as end_zygote, identity, shared as shared_zygote
from clustercheck.run.zygote_serve import preimport
from clustercheck.run.wire import env_line

CHUNK = 64 << 10  # bytes of a rank's output per message
SHIP_LIMIT = 4 << 20  # bytes of one rank's output shipped at most (the rest stays in the agent's directory)
GONE, LEFT = gang.CONTROLLER_GONE, 0
BUG = gang.AGENT_BUG  # an internal error of clustercheck's: never the node's doing


def add_parser(sub: Any) -> None:
    p = sub.add_parser("agent", help="a node agent: joins a controller (--launcher join) and starts this node's ranks",
                       description="Join the controller of `clustercheck run --launcher join` and start this node's "
                                   f"ranks when it asks. Identity from the Indexed Job contract: {gang.INDEX_ENV} "
                                   f"(which node of the run), {gang.NODE_ENV} (the node's name; default: the "
                                   f"hostname), {gang.CONTROLLER_ENV}=HOST:PORT; the shared secret from "
                                   f"{gang.TOKEN_ENV} or {gang.TOKEN_FILE_ENV}.",
                       # the agent's own codes, in place of the table of the other subcommands (cli.py adds it
                       # to a parser whose epilog says none), which has no 70 and codes an agent never exits with
                       epilog=f"exit codes (an agent's own): 0 the run ended; 3 the controller is gone; 4 usage or "
                              f"bad input; {BUG} an internal error (a bug in clustercheck, never the node's doing); "
                              "128+N ended by signal N (SIGTERM, a pod deleted: 143).")
    p.add_argument("--local-ranks", type=int, metavar="K",
                   help="ranks this node runs (on a CPU node; default: the controller's choice, one per GPU)")
    p.add_argument("--controller", metavar="HOST:PORT", help=f"default: ${gang.CONTROLLER_ENV}")
    p.add_argument("--index", metavar="N", help=f"default: ${gang.INDEX_ENV}")
    p.add_argument("--node", metavar="NAME", help=f"default: ${gang.NODE_ENV}, else the hostname")
    p.add_argument("--join-timeout", type=argtypes.seconds("--join-timeout", 86400), default=gang.JOIN_TIMEOUT,
                   metavar="SECONDS",
                   help=f"how long to try to reach the controller (default {gang.JOIN_TIMEOUT:g})")
    p.add_argument("--slurm", action="store_true",
                   help="take the index and the node's name from srun's task environment: where SLURMD_NODENAME "
                        "stands in SLURM_JOB_NODELIST (how --launcher slurm starts agents)")
    p.add_argument("--token-stdin", action="store_true",
                   help="read the shared secret from the first line of stdin (how --launcher hosts starts agents)")


@dataclass
class Rank:
    rank: int
    proc: RankProcess
    log: Path
    shipped: int = 0


@dataclass
class Agent:
    me: gang.Identity
    token: str
    local_ranks: int | None
    store: Any = None
    key: str = ""
    nonce: str = ""
    hello_nonce: str = ""
    handled: int = 0
    pools: dict[int, list[Rank]] = field(default_factory=dict)
    chunks: dict[int, int] = field(default_factory=dict)
    workdir: Path = field(default_factory=agentdir.make)
    gone: str = ""  # why the controller is taken as gone ("" while it answers)
    stop: int = 0  # the signal that asks this agent to end

    def say(self, text: str) -> None:
        print(f"clustercheck agent {self.me.index} ({self.me.node}): {text}", file=sys.stderr, flush=True)

    # -- joining ----------------------------------------------------------------------------------
    def connect(self, timeout: float) -> Any:
        """A store client of the controller's, retried until `timeout`; None when a signal stops the wait."""
        import torch.distributed as dist

        host, port = self.me.controller
        deadline, said = time.monotonic() + timeout, False
        while True:
            try:  # the store client only once a plain connection opens: it retries a refused one past any deadline
                gang.knock(host, port, deadline)
                return interruptible(lambda: dist.TCPStore(host, port, is_master=False, timeout=timedelta(seconds=5)))
            except (RuntimeError, OSError) as exc:  # refused, DistNetworkError, DistStoreError: not up yet
                if self.stop:
                    return None
                if time.monotonic() >= deadline:
                    raise UserError(f"could not reach the controller at {host}:{port} within {timeout:g} s "
                                    f"({str(exc).splitlines()[0][:200]})") from None
                if not said:
                    self.say(f"waiting for the controller at {host}:{port}")
                    said = True
                time.sleep(max(0.0, min(1.0, deadline - time.monotonic())))

    def join(self, timeout: float) -> int | None:
        """Join; None when joined, else the exit code."""
        self.store = self.connect(timeout)
        if self.store is None:
            return 128 + self.stop
        deadline = time.monotonic() + timeout
        while not self.store.check([gang.HELLO]):
            if self.stop:
                return 128 + self.stop
            if time.monotonic() >= deadline:
                raise UserError(f"the store at {self.me.controller[0]}:{self.me.controller[1]} has no clustercheck "
                                "controller's hello")
            time.sleep(0.2)
        try:
            hello = wire.unseal(gang.hello_key(self.token), self.store.get(gang.HELLO))
        except wire.Forged:
            self.store.set(gang.mismatch_key(self.me.index), "1")
            raise UserError(f"the controller's hello failed verification: this agent's {gang.TOKEN_ENV} differs "
                            "from the controller's") from None
        expected = int(hello["nodes"])
        if self.me.index >= expected:
            raise UserError(f"{gang.INDEX_ENV}={self.me.index}, but the controller waits for {expected} agent(s) "
                            f"(indices 0-{expected - 1})")
        if self.store.check([gang.CLOSED]):
            self.say("the run started without this agent (the controller's --join-timeout passed); leaving")
            return GONE
        if self.store.add(gang.claim_key(self.me.index), 1) != 1:
            raise UserError(f"another agent already joined as index {self.me.index}: each of the run's agents "
                            f"needs its own {gang.INDEX_ENV}")
        self.nonce = secrets.token_hex(gang.NONCE // 2)
        self.key = gang.agent_key(self.token, str(hello["nonce"]), self.nonce)
        self.hello_nonce = str(hello["nonce"])
        info = {"index": self.me.index, "node": self.me.node, "local_ranks": self.local_ranks,
                "host": socket.gethostname(), "pid": os.getpid(), "version": __version__}
        self.store.set(gang.join_key(self.me.index), self.nonce + wire.seal(self.key, info))
        self.store.add(gang.JOINS, 1)
        self.say(f"joined the controller at {self.me.controller[0]}:{self.me.controller[1]}")
        return None

    # -- serving ----------------------------------------------------------------------------------
    def serve(self) -> int:
        threading.Thread(target=self._beat, daemon=True).start()
        next_ship = last_over = 0.0
        quiet_since: float | None = None
        while True:
            if self.stop:  # a pod's SIGTERM (deleted, evicted, preempted): said after each rank's output
                self.end_all(f"stopped by {signal.Signals(self.stop).name}, so it killed this rank")
                return 128 + self.stop
            if self.gone:
                ranks = sum(map(len, self.pools.values()))
                n = self.end_all()  # a rank whose store connection broke may have left on its own first
                ended = f", {ranks - n} had ended on their own" if ranks > n else ""
                self.say(f"the controller is gone ({self.gone}): stopped {n} rank(s){ended}")
                return GONE
            try:
                code = self._commands()
                if code is not None:
                    return code
                self._reap()
                if time.monotonic() >= next_ship:
                    next_ship = time.monotonic() + 0.5
                    self._ship()
                if time.monotonic() - last_over >= 1.0:
                    last_over = time.monotonic()
                    if self.store.check([gang.OVER]) and not self._pending():
                        self.end_all()
                        return LEFT
                quiet_since = None
            except RuntimeError as exc:  # DistNetworkError: the store went away; DistStoreError: no answer
                text = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
                quiet_since = quiet_since or time.monotonic()
                if type(exc).__name__ == "DistNetworkError" or time.monotonic() - quiet_since > gang.SILENCE:
                    self.gone = text
                continue
            time.sleep(0.05)

    def _pending(self) -> bool:
        return self.store.add(gang.cmd_seq(self.me.index), 0) > self.handled

    def _commands(self) -> int | None:
        posted = self.store.add(gang.cmd_seq(self.me.index), 0)
        while self.handled < posted:
            n = self.handled + 1
            if not self.store.check([gang.cmd_key(self.me.index, n)]):
                return None  # numbered but not yet written: next round
            self.handled = n
            try:
                msg = wire.unseal(self.key, self.store.get(gang.cmd_key(self.me.index, n)))
            except wire.Forged as exc:
                self.say(f"refusing command {n}: {exc}")
                continue
            if msg.get("seq") != n:
                self.say(f"refusing command {n}: it was sealed as command {msg.get('seq')!r} (a replay)")
                continue
            if msg["op"] == "spawn":
                self.spawn(msg)
            elif msg["op"] == "kill":
                self.kill(int(msg["pool"]))
            elif msg["op"] == "bye":
                self.end_all()
                self.store.add(gang.LEFT, 1)
                self.say("the run is over: leaving")
                return LEFT
        return None

    def warm(self) -> None:
        """Import what the ranks import, then fork this agent's zygote from here, before joining (and
        before any thread starts): the agent needs torch for its store client anyway, and the zygote
        needs no import of its own (run/zygote_serve.py). A pool whose environment differs gets a
        zygote of its own when it is asked for, started afresh (run/zygote.py)."""
        if identity(self._env()) is not None:  # CLUSTERCHECK_ZYGOTE=0: no import here either
            preimport()
            shared_zygote(self._env(), self.workdir / "zygote.log", fork=True)

    def _env(self) -> dict[str, str]:
        """The agent's environment as its ranks get it: without the shared secret."""
        return {k: v for k, v in os.environ.items() if k not in (gang.TOKEN_ENV, gang.TOKEN_FILE_ENV, wire.TOKEN_ENV)}

    def spawn(self, msg: dict[str, Any]) -> None:
        pool, world, backend = int(msg["pool"]), int(msg["world"]), str(msg["backend"])
        host, port = self.me.controller
        key = gang.pool_key(self.token, self.hello_nonce, pool)
        env = self._env()
        travel = {**msg["env"], "CC_LOG_DIR": str(self.workdir)}  # the controller's directory is not here
        wanted = [(int(rank), ["--rank", str(rank), "--local-rank", str(local), "--node", self.me.node,
                                "--world-size", str(world), "--store", f"{host}:{port}", "--backend", backend],
                   self.workdir / f"pool{pool}-rank{rank}.log") for local, rank in enumerate(msg["ranks"])]
        # forked from this agent's zygote (run/zygote.py) for the environment the ranks import with, the
        # agent's and the controller's together; fresh processes where it is off or cannot be asked
        seen = {**env, **travel}
        zygote = shared_zygote(seen, self.workdir / "zygote.log")
        forked = zygote.start_all([(args, seen, log) for _, args, log in wanted], key) if zygote else None
        if forked is not None:
            started = [Rank(rank, proc, log) for (rank, _, log), proc in zip(wanted, forked)]
        else:
            started = [Rank(rank, _fresh(args, env, log, key, travel), log) for rank, args, log in wanted]
        self.pools[pool] = started
        self.store.set(gang.spawned_key(pool, self.me.index),
                       wire.seal(self.key, {"pids": {str(r.rank): r.proc.pid for r in started}}))

    def kill(self, pool: int) -> None:
        for r in self.pools.get(pool, []):
            if r.proc.poll() is None:  # a zygote's: by its pidfd, or before it is forked; a fresh one by its reaper,
                r.proc.kill()  # which SIGKILLs its group, then what it left (a SIGKILL to the reaper would not)

    def end_all(self, why: str = "") -> int:
        """Stop every rank still running (a pool's own exit was asked for by the controller already); `why`
        follows each one's output, since its SIGKILL alone says nothing of who killed it."""
        live = [r for ranks in self.pools.values() for r in ranks if r.proc.poll() is None]
        for pool in list(self.pools):
            self.kill(pool)
        for r in live:
            r.proc.wait()
        if not self.gone:
            try:
                for pool, r in [(p, r) for p, ranks in self.pools.items() for r in ranks if r in live and why]:
                    self._ship_rank(pool, r)  # its own output first, then ours, then (_reap) its exit
                    self._post_text(pool, r.rank, f"\n[clustercheck agent on {self.me.node}: {why}]\n")
                self._reap()
            except RuntimeError:
                pass
        return len(live)

    def _reap(self) -> None:
        """Report each rank that ended: its last output first, then its exit status."""
        for pool, ranks in list(self.pools.items()):
            for r in list(ranks):
                code = r.proc.poll()
                if code is None:
                    continue
                self._ship_rank(pool, r)
                self.store.set(gang.exit_key(pool, r.rank), wire.seal(self.key, {"code": code}))
                self.store.add(gang.exits_key(pool), 1)
                ranks.remove(r)
            if not ranks:
                del self.pools[pool]

    def _ship(self) -> None:
        for pool, ranks in self.pools.items():
            for r in ranks:
                self._ship_rank(pool, r)

    def _ship_rank(self, pool: int, r: Rank) -> None:
        try:
            with r.log.open("rb") as fh:
                fh.seek(r.shipped)
                data = fh.read(max(0, SHIP_LIMIT - r.shipped))
        except OSError:
            return
        for i in range(0, len(data), CHUNK):
            piece = data[i:i + CHUNK]
            n = self.chunks[pool] = self.chunks.get(pool, 0) + 1
            self.store.set(gang.log_chunk(pool, self.me.index, n),
                           wire.seal(self.key, {"rank": r.rank, "text": piece.decode(errors="replace")}))
            self.store.add(gang.log_count(pool, self.me.index), 1)
            self.store.add(gang.logs_key(pool), 1)
        r.shipped += len(data)
        if data and r.shipped >= SHIP_LIMIT:
            note = f"\n[clustercheck agent: output beyond {SHIP_LIMIT >> 20} MiB stays in {r.log} on {self.me.node}]\n"
            self._post_text(pool, r.rank, note)

    def _post_text(self, pool: int, rank: int, text: str) -> None:
        n = self.chunks[pool] = self.chunks.get(pool, 0) + 1
        self.store.set(gang.log_chunk(pool, self.me.index, n), wire.seal(self.key, {"rank": rank, "text": text}))
        self.store.add(gang.log_count(pool, self.me.index), 1)
        self.store.add(gang.logs_key(pool), 1)

    def _beat(self) -> None:
        """Heartbeats on a connection of their own, each sealed with this agent's key and numbered (a forged
        or replayed beat cannot keep a dead agent present); the controller gone, or silent for SILENCE s,
        is said."""
        import torch.distributed as dist

        host, port = self.me.controller
        quiet_since = time.monotonic()
        store = None
        count = 0
        while not self.gone and not self.stop:
            try:
                if store is None:
                    store = dist.TCPStore(host, port, is_master=False, timeout=timedelta(seconds=gang.BEAT * 3))
                count += 1
                store.set(gang.beat_key(self.me.index), wire.seal(self.key, {"index": self.me.index, "beat": count}))
                quiet_since = time.monotonic()
            except RuntimeError as exc:
                store = None
                if "refused" in str(exc).lower() or "reset" in str(exc).lower() or \
                        time.monotonic() - quiet_since > gang.SILENCE:
                    self.gone = str(exc).splitlines()[0][:200] or type(exc).__name__
                    return
            time.sleep(gang.BEAT)


def _fresh(args: list[str], env: dict[str, str], log: Path, key: str, travel: dict[str, str]) -> Reaped:
    """A rank started afresh under a reaper of its own (run/reaper.py), the key and the controller's variables on its stdin."""
    with log.open("wb") as out:
        proc = subprocess.Popen(reaper_command([sys.executable, *WORKER, *args]), env=env, stdin=subprocess.PIPE,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    assert proc.stdin is not None
    try:
        proc.stdin.write(key.encode() + b"\n" + env_line(travel))
        proc.stdin.close()
    except BrokenPipeError:
        pass  # it died at once; _reap reports it
    return Reaped(proc)


def main(args: argparse.Namespace) -> int:
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")  # c10d's client would log every retry
    if args.local_ranks is not None and not 1 <= args.local_ranks <= 1024:
        raise UserError(f"--local-ranks must be between 1 and 1024, got {args.local_ranks}")
    if args.slurm:
        args.index, args.node = gang.slurm_place(os.environ)
    me = gang.identity(args.index, args.node, args.controller, socket.gethostname())
    token = gang.read_token({gang.TOKEN_ENV: sys.stdin.readline()} if args.token_stdin else None)
    agent = Agent(me, token, args.local_ranks)

    def stop(signum: int, frame: Any) -> None:
        agent.stop = signum
        if agent.store is None:  # torch's import, or tries to reach the controller (seconds): none to finish
            raise SystemExit(128 + signum)  # now, through the finally below, not SIGKILLed by the launcher later

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, stop)
    try:
        agent.warm()
        code = agent.join(args.join_timeout)
        if code is None:
            code = agent.serve()
    finally:
        end_zygote()  # every rank has ended by now; a zygote still importing need not finish
        # maybe the only trace; after a goodbye the controller has every rank's output
        agentdir.leave(agent.workdir, bool(agent.pools or agent.gone or agent.stop), agent.say)
    return code
