"""The zygote: one process that imports torch once and forks this machine's ranks from there.

A rank started afresh spends seconds importing torch (1.1-1.6 s on a 2-vCPU VM; 2.9 s on an H100 host,
where eight at once took 5.05 s: docs/validation/2026-11-26-h100-startup.md), and every pool of a run
pays it again: the facts pool, a check with another launch environment, a tuning pool beside a timed
one, a fresh pool after a failure. The zygote imports torch and the rank's code once, stays
single-threaded in Python and never touches CUDA, and forks a rank per request; the child takes the
request's environment, directory, arguments and files and runs `clustercheck.run.worker` as
`python -m` would. Forking after `import torch` and before CUDA starts is what torch's DataLoader
workers do on Linux.

A fork is the fresh process it stands for only where whatever was read at import is the same. So a
zygote serves a rank only when the rank's environment equals the one the zygote imported with, except
for what is read after the fork (`identity`): clustercheck's own CC_* (the rank's code reads them),
GLOO_SOCKET_IFNAME (gloo, at the group's start), NCCL_* (NCCL, at its first call), PYTEST_CURRENT_TEST
(the check the controller is in) and a whole-number OMP_NUM_THREADS (the child applies it with
torch.set_num_threads). Any other difference, such as a check's own `env:` naming another variable (a
variable a user names may be read by anything at import), gets a zygote of its own that imports with
it; the one it replaces ends with the last rank it started. CLUSTERCHECK_ZYGOTE=0 turns the zygote off.
It also forks each local pool's store (`Zygote.serve_store`): torch's TCPStore server on the socket the
controller made, so that the controller, which reads it through run/store.py, never imports torch.
The zygote process itself is run/zygote_serve.py: a controller starts it afresh; a node agent, which
imports torch for its own store client, forks its first zygote from itself after that import.

NCCL ranks fork too. The zygote must never start CUDA (a child of a process that did cannot use it),
and checks so before serving. On one H100, forked NCCL ranks passed tests/gpu and measured what fresh
ones do; 8 forked ranks had CUDA contexts in 1.5 s, 8 fresh in 5.1 s (docs/validation/2026-11-26-h100-zygote.md).

Who watches whom: the controller holds one end of a socket pair and the zygote the other. However the
controller ends, the kernel closes its end and the zygote leaves; each rank has the zygote as parent
and is SIGTERMed when it ends (worker.py's parent-death signal), as it was when its parent was the
controller. What a rank started in a session of its own (a tool: measure/native.py) and left behind when
killed re-parents to the zygote, a child subreaper, which kills it when it reaps the rank (and, at its end,
SIGTERMs its ranks first): zygote_serve.py. The zygote reports each rank's pid with a pidfd (so that a
kill can never reach a reused pid) and later its exit status, which the controller reads as
`subprocess.Popen`'s returncode.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from clustercheck.run import zygote_serve

ENV = "CLUSTERCHECK_ZYGOTE"
# read after the fork: gloo's interface when the rank starts its group; pytest's item of the moment
# (the controller is pytest: each check's pools would otherwise each want a zygote of their own).
# NCCL_* too (identity): NCCL reads each on first use, in its own calls (github.com/NVIDIA/nccl
# src/include/param.h, NCCL_PARAM); fresh ranks set NCCL_DEBUG* after importing torch (measure/nccl_log.py)
_AFTER_FORK = ("GLOO_SOCKET_IFNAME", "PYTEST_CURRENT_TEST")
_START = 180.0  # seconds: the pool's own START_TIMEOUT


def identity(env: Mapping[str, str]) -> tuple[tuple[str, str], ...] | None:
    """What a zygote must have been started with to stand for a fresh rank with `env`: the environment
    less the variables read after the fork; None where the zygote is off."""
    if env.get(ENV, "") == "0":
        return None
    return tuple(sorted((k, v) for k, v in env.items() if not (
        k.startswith(("CC_", "NCCL_")) or k in _AFTER_FORK or k == ENV
        or k == "OMP_NUM_THREADS" and v.isdigit() and int(v) > 0)))


# -- the controller's side -------------------------------------------------------------------------


class ZygoteRank:
    """A rank the zygote forked, as the pool watches it (`launcher.RankProcess`)."""

    def __init__(self, zygote: Zygote, ident: int) -> None:
        self._zygote = zygote
        self.ident = ident
        self._pid: int | None = None
        self._pidfd: int | None = None
        self._kill = False
        self._reaped = False  # the zygote said it ended (a rank killed before its fork reads as ended before)
        self.returncode: int | None = None
        self.ended = ""  # why the rank ended, where its exit status does not say (the zygote died)

    @property
    def pid(self) -> int:
        """The rank's pid, once forked; 0 for a rank the zygote ended before it could fork it, or has not
        forked within a pool's start timeout."""
        with self._zygote.changed:
            self._zygote.changed.wait_for(lambda: self._pid is not None or self.returncode is not None, _START)
            return self._pid or 0

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        with self._zygote.changed:
            if not self._zygote.changed.wait_for(lambda: self.returncode is not None, timeout):
                raise subprocess.TimeoutExpired(f"rank {self.ident}", timeout or 0.0)
            assert self.returncode is not None
            return self.returncode

    def kill(self) -> None:
        """SIGKILL the rank, without waiting (safe from a signal handler): a rank not yet forked is killed
        the moment its pid arrives."""
        with self._zygote.changed:  # an RLock: safe from a handler that interrupted a holder on this thread
            self._kill = True
            if self._pidfd is not None and not self._reaped:  # the pidfd stays open while we hold the lock
                try:
                    signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)
                except OSError:
                    pass  # ended already
            elif self._pid is None and self.returncode is None:  # not forked yet (the zygote still imports):
                self.returncode = -signal.SIGKILL  # it is over now, and is killed the moment it is forked
                self._zygote.changed.notify_all()

    def _started(self, pid: int, pidfd: int) -> None:
        self._pid, self._pidfd = pid, pidfd
        if self._kill:
            self.kill()

    def _exited(self, code: int, why: str = "") -> None:
        self.returncode, self.ended, self._reaped = code, why, True
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None


class Zygote:
    """The controller's handle on one zygote process."""

    def __init__(self, ident: tuple[tuple[str, str], ...], log: Path, fork: bool = False) -> None:
        self.identity = ident
        self.log = log
        self.changed = threading.Condition()
        self._ranks: dict[int, ZygoteRank] = {}
        self._next = 0
        self._sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            log.parent.mkdir(parents=True, exist_ok=True)
            with log.open("wb") as out:
                self.proc: subprocess.Popen[bytes] | zygote_serve.Forked
                if fork:  # this process imported torch and runs one thread (zygote_serve.fork)
                    self.proc = zygote_serve.fork(theirs, self._sock, out, dict(ident))
                else:  # a process group of its own in the controller's session, as the ranks had (launch._popen)
                    group: dict[str, Any] = ({"process_group": 0} if sys.version_info >= (3, 11)
                                             else {"preexec_fn": os.setpgrp})
                    self.proc = subprocess.Popen([sys.executable, "-m", "clustercheck.run.zygote_serve",
                                                  str(theirs.fileno())], env=dict(ident), stdin=subprocess.DEVNULL,
                                                 stdout=out, stderr=subprocess.STDOUT, pass_fds=(theirs.fileno(),),
                                                 **group)
            self.alive = True
            self.retired = False
            threading.Thread(target=self._listen, name="clustercheck-zygote", daemon=True).start()
        except BaseException:  # a signal too: a zygote nobody holds would outlive the run by its import
            if hasattr(self, "proc"):
                self.proc.kill()
            self._sock.close()
            raise
        finally:
            theirs.close()

    def start(self, argv: list[str], env: Mapping[str, str], log: Path, key: str) -> ZygoteRank:
        """Ask for one rank: `argv` after `-m clustercheck.run.worker`, its whole environment, its log
        (stdout and stderr) and the key on its stdin. OSError when the zygote cannot be asked."""
        read, write = os.pipe()
        try:  # "asked": one clock for the whole host; a pipe holds far more than a key: the write never blocks
            return self._request({"argv": argv, "env": dict(env), "cwd": os.getcwd(), "asked": time.monotonic()},
                                 read, log, then=lambda: os.write(write, key.encode() + b"\n"))
        finally:
            os.close(read)
            os.close(write)

    def serve_store(self, listener: socket.socket, host: str, port: int, timeout: float, env: Mapping[str, str],
                    log: Path) -> ZygoteRank:
        """Fork a process that serves a pool's store (torch's TCPStore server) on `listener`, which the
        caller may close once this returns; its output goes to `log`. Watched and ended as a rank is.
        OSError when the zygote cannot be asked."""
        return self._request({"env": dict(env), "store": {"host": host, "port": port, "timeout": timeout}},
                             listener.fileno(), log)

    def _request(self, fields: dict[str, Any], fd: int, log: Path,
                 then: Callable[[], object] = lambda: None) -> ZygoteRank:
        """Ask for one child: the request's `fields`, with `fd` and `log` (opened here) as its two files, then
        `then()`; OSError, the child forgotten, where the zygote cannot be asked."""
        with self.changed:
            if not self.alive or self.retired:
                raise OSError("the zygote has ended")
            self._next += 1
            child = self._ranks[self._next] = ZygoteRank(self, self._next)
        try:
            with log.open("wb") as out:
                message = json.dumps({"id": child.ident, **fields}).encode()
                socket.send_fds(self._sock, [message], [fd, out.fileno()])
            then()
        except OSError:
            with self.changed:
                del self._ranks[child.ident]
            raise
        return child

    def start_all(self, ranks: Sequence[tuple[list[str], Mapping[str, str], Path]], key: str) -> list[ZygoteRank] | None:
        """Ask for a pool's ranks, each (argv, environment, log), all or none: None, with any already asked
        for killed, where the zygote cannot be asked (the caller then starts them afresh)."""
        started: list[ZygoteRank] = []
        try:
            for argv, env, log in ranks:
                started.append(self.start(argv, env, log, key))
        except OSError:
            for rank in started:
                rank.kill()
            return None
        return started

    def close(self) -> None:
        """End the zygote (its ranks get their parent-death signal)."""
        self._hang_up()
        self._sock.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def retire(self) -> None:
        """Start no more ranks; end once the ranks it started have ended (they may be a live pool's)."""
        with self.changed:
            self.retired = True
            if not self._ranks:
                self._hang_up()

    def _hang_up(self) -> None:
        try:  # the zygote reads the end of its socket and leaves; shutdown (not close alone) also wakes
            self._sock.shutdown(socket.SHUT_RDWR)  # our listening thread out of its recv
        except OSError:
            pass

    def _listen(self) -> None:
        while True:
            try:
                message, fds, _, _ = socket.recv_fds(self._sock, zygote_serve.MAX_MESSAGE, 1)
            except OSError:
                message, fds = b"", []
            if not message:
                return self._gone()
            said = json.loads(message)
            with self.changed:
                rank = self._ranks.get(said["id"])
                if rank is None:
                    for fd in fds:
                        os.close(fd)
                elif "pid" in said:
                    rank._started(said["pid"], fds[0])
                else:
                    rank._exited(said["exit"])
                    del self._ranks[said["id"]]
                    if self.retired and not self._ranks:
                        self._hang_up()
                self.changed.notify_all()

    def _gone(self) -> None:
        """The zygote ended: its ranks were SIGTERMed by their parent-death signal (or never forked)."""
        code = self.proc.wait()
        with self.changed:
            self.alive = False
            ranks, self._ranks = list(self._ranks.values()), {}
        for rank in ranks:
            if rank._pidfd is not None:  # wait until it is gone, so that nobody reads it as alive meanwhile
                zygote_serve.wait_readable(rank._pidfd, 30.0)
            with self.changed:
                rank._exited(-signal.SIGTERM if rank._pid else code or 1,
                             f"ended with the zygote that started it ({_exit_words(code)}; its log: {self.log})")
                self.changed.notify_all()


def _exit_words(code: int) -> str:
    return f"killed by {signal.Signals(-code).name}" if code < 0 and -code in signal.valid_signals() else f"exit {code}"


_shared: Zygote | None = None
_lock = threading.Lock()


def end_shared() -> None:
    """End this controller's zygote at once, even mid-import: the run it was started for never began."""
    global _shared
    with _lock:
        found, _shared = _shared, None
    if found is not None:
        found.proc.kill()
        found.close()


def retire_shared() -> None:
    """Hang up this controller's zygote as the controller's exit would: it starts no more ranks and ends once
    the ranks it started have. For a process that runs sessions and lives on (benchmarks/soak.py)."""
    global _shared
    with _lock:
        found, _shared = _shared, None
    if found is not None:
        found.retire()


def moved(old: Path, new: Path) -> None:
    """The directory of this process's zygote's log was renamed from `old` to `new` (the file went with
    it, still open): name it where it is now."""
    with _lock:
        if _shared is not None and _shared.log.parent == old:
            _shared.log = new / _shared.log.name


def shared(env: Mapping[str, str], log: Path, fork: bool = False) -> Zygote | None:
    """This controller's zygote for ranks with `env`, started on first use (its output to `log`), or a
    new one where the environment at import differs; None where the zygote is off or cannot be started
    (the ranks then start afresh). `fork`: the caller imported torch (zygote_serve.preimport) with `env`
    as its environment, less variables that nothing reads at import; the zygote is then forked from it
    where it runs one thread."""
    global _shared
    ident = identity(env)
    if ident is None:
        return None
    with _lock:
        if _shared is not None and (_shared.identity != ident or not _shared.alive):
            _shared.retire()  # its ranks may be a live pool's: it ends with the last of them
            _shared = None
        if _shared is None:
            try:
                _shared = Zygote(ident, log, fork and threading.active_count() == 1)
            except OSError:  # no process or socket to spare, an unwritable log: fresh ranks say what is wrong
                return None
        return _shared
