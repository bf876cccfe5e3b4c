"""The zygote process (run/zygote.py is the controller's handle on it): it imports what every rank
imports once, then forks a rank (or a local pool's store: `_become_store`) per request until the
controller's end of its socket closes.

It starts in one of two ways:
- `python -m clustercheck.run.zygote_serve FD`, from a controller (pytest's process, which imports no
  torch) or from any process that already runs threads (forking one is unsafe);
- forked (`fork`) from a node agent that has just imported torch itself and runs one thread. The agent
  needs torch for its store client anyway, and the fork spares the zygote an import of its own: about
  1.5 CPU-s on a 2-vCPU VM, 4-5 s on an H100 node (docs/benchmarks.md). The child is then what a fresh
  zygote would be: its own process group, no stdin, the log as stdout and stderr, default signal
  handlers, `python -m`'s sys.path[0]; the environment of each rank is the request's, as before.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from typing import Any, BinaryIO, Iterator, NoReturn, Sequence

from clustercheck.run import reaper

MAX_MESSAGE = 1 << 20


def preimport() -> None:
    """Import what every rank imports (worker.py): once, in the zygote or in the agent it forks from."""
    import torch  # noqa: F401
    import torch.distributed  # noqa: F401

    import clustercheck.measure  # noqa: F401
    import clustercheck.measure.binding  # noqa: F401
    import clustercheck.measure.nccl_log  # noqa: F401
    import clustercheck.run.worker  # noqa: F401


def serve(fd: int) -> int:
    """Import once, then fork a rank per request until the controller's end of the socket closes."""
    sock = socket.socket(fileno=fd)
    reaper.set_name(b"cc-zygote")  # what ps and top show (a forked zygote's command line is its agent's)
    with _leave_if_hung_up(sock):
        preimport()
    import torch

    if torch.cuda.is_initialized():  # a child of a process with CUDA started cannot use CUDA: say so, fork none
        print("clustercheck zygote: CUDA was initialised while importing the ranks' code; "
              "ranks cannot be forked from here (CLUSTERCHECK_ZYGOTE=0 starts them afresh)", flush=True)
        return 1
    start_dir = os.getcwd()
    adopt = reaper.adopt()
    sel = selectors.DefaultSelector()
    sel.register(sock, selectors.EVENT_READ, None)
    ours: dict[int, int] = {}  # the children forked on request (ranks, stores), pid: pidfd
    left: set[int] = set()  # orphans signalled (or seen ended) but not reaped yet: look again soon
    try:
        while True:
            for key, _ in sel.select(_AGAIN if left else None):
                if key.data is None:
                    try:
                        message, fds, _, _ = socket.recv_fds(sock, MAX_MESSAGE, 2)
                    except OSError:
                        return 0
                    if not message:
                        return 0  # the controller has ended or closed us
                    asked = json.loads(message)
                    parent = os.getpid()
                    pid = os.fork()
                    if pid == 0:
                        if "store" in asked:
                            _become_store(asked, fds, sel, parent)
                        _become_rank(asked, fds, start_dir, sel, parent)
                    for fd in fds:
                        os.close(fd)
                    pidfd = os.pidfd_open(pid)
                    ours[pid] = pidfd
                    sel.register(pidfd, selectors.EVENT_READ, (asked["id"], pid))
                    if not _tell(sock, {"id": asked["id"], "pid": pid}, [pidfd]):
                        return 0
                else:
                    ident, pid = key.data
                    sel.unregister(key.fd)
                    os.close(key.fd)
                    del ours[pid]
                    _, status = os.waitpid(pid, 0)
                    if adopt:  # what the rank started in sessions of their own is ours now: it ends with the rank
                        left = _kill_orphans(set(ours), left)
                    if not _tell(sock, {"id": ident, "exit": os.waitstatus_to_exitcode(status)}):
                        return 0
            if left:
                left = _kill_orphans(set(ours), left)
    finally:
        if adopt:
            _end_children(ours, left)


@contextlib.contextmanager
def _leave_if_hung_up(sock: socket.socket) -> Iterator[None]:
    """While the zygote imports (seconds; tens on a loaded machine), leave at once if the controller hangs up
    or ends: the socket is read only after the import, and a controller signalled while the run starts
    exits without waiting for us. POLLRDHUP reads nothing, so requests queued meanwhile stay for serve().
    The watcher is joined before the first fork (forking beside a live thread is unsafe)."""
    done = threading.Event()

    def watch() -> None:
        poll = select.poll()
        poll.register(sock.fileno(), select.POLLRDHUP)
        while not done.is_set():
            if poll.poll(100):  # POLLRDHUP, or POLLHUP/POLLERR (always reported)
                os._exit(0)

    watcher = threading.Thread(target=watch, name="cc-zygote-hangup", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        done.set()
        watcher.join()


# -- orphans: a tool a rank started outlives it (run/reaper.py) ---------------------------------------
#
# The zygote is a child subreaper: it kills every process group of its children that is not one it forked
# (a live rank, a store) when it reaps one, and when it ends.

_AGAIN = 0.2  # seconds: how soon to look again at orphans that were signalled but not yet reaped
_GRACE = 5.0  # seconds the zygote's ranks have, at its end, between the SIGTERM and a SIGKILL (close() waits 10)


def _kill_orphans(ours: set[int], told: set[int]) -> set[int]:
    return reaper.kill_orphans(ours, told, _said)


def _end_children(ours: dict[int, int], told: set[int]) -> None:
    """At the zygote's end: SIGTERM its ranks and stores (the parent-death signal they would get), SIGKILL
    those that outlive _GRACE, then kill the orphans they leave (those in `told` already said in the log),
    until this process has no child (or _GRACE more has passed: a process in the kernel, a GPU driver's
    call, dies when it leaves it)."""
    for pidfd in ours.values():
        try:
            signal.pidfd_send_signal(pidfd, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + _GRACE
    for pid, pidfd in ours.items():
        if not wait_readable(pidfd, max(0.0, deadline - time.monotonic())):
            try:
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)
            except ProcessLookupError:
                pass
            wait_readable(pidfd, _GRACE)
        os.waitpid(pid, os.WNOHANG)
        os.close(pidfd)
    reaper.sweep(told, _said, _GRACE)


def _said(line: str) -> None:
    print(f"clustercheck zygote: {line}", flush=True)


def _tell(sock: socket.socket, said: dict[str, Any], fds: Sequence[int] = ()) -> bool:
    try:
        socket.send_fds(sock, [json.dumps(said).encode()], fds)
        return True
    except OSError:
        return False


def _become_rank(asked: dict[str, Any], fds: list[int], start_dir: str, sel: selectors.BaseSelector,
                 parent: int) -> NoReturn:
    """In the forked child: become the process `python -m clustercheck.run.worker ARGV` would have been,
    with the request's environment, directory, stdin (the key) and log, then run it; never returns."""
    try:
        from clustercheck.run import worker

        worker.ZYGOTE_WAIT = max(0.0, time.monotonic() - asked["asked"]) if "asked" in asked else None
        _leave_zygote(sel, parent, os.path.basename(sys.executable).encode())  # the name a fresh rank has
        stdin, log = fds
        os.dup2(stdin, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(stdin)
        os.close(log)
        sys.stdin = open(0, closefd=False)  # noqa: SIM115 (the process's own streams)
        sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", buffering=1, closefd=False, errors="backslashreplace")  # noqa: SIM115
        os.chdir(asked["cwd"])
        if sys.path and sys.path[0] == start_dir:  # `python -m` puts the directory it starts in first
            sys.path[0] = asked["cwd"]
        os.environ.clear()
        os.environ.update(asked["env"])
        threads = asked["env"].get("OMP_NUM_THREADS", "")
        if threads.isdigit() and int(threads) > 0:  # OpenMP read the zygote's at import
            import torch

            torch.set_num_threads(int(threads))
        sys.argv = [worker.__file__, *asked["argv"]]
        worker._run()  # ends the process, with the rank's own exit code
    except BaseException:  # noqa: BLE001 - said in the rank's log, which the pool quotes
        traceback.print_exc()
        sys.stderr.flush()
    os._exit(1)


def _become_store(asked: dict[str, Any], fds: list[int], sel: selectors.BaseSelector, parent: int) -> NoReturn:
    """In the forked child: serve a pool's store, torch's own TCPStore server on the listening socket the
    controller made, until killed (the pool ends it after its ranks) or the zygote ends (the parent-death
    signal); never returns. The controller reads and writes it through run/store.py, so it imports no
    torch; the ranks' clients talk to the same C++ server they would have found in the controller."""
    try:
        _leave_zygote(sel, parent, b"cc-store")
        listen, log = fds
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
        os.environ.clear()
        os.environ.update(asked["env"])
        from datetime import timedelta

        import torch.distributed as dist

        where = asked["store"]
        store = dist.TCPStore(where["host"], where["port"], is_master=True, wait_for_workers=False,  # noqa: F841
                              timeout=timedelta(seconds=where["timeout"]), master_listen_fd=listen)
        while True:  # the server is a thread of this process, alive while `store` is
            signal.pause()
    except BaseException:  # noqa: BLE001 - said in the store's log, which the controller quotes
        traceback.print_exc()
        sys.stderr.flush()
    os._exit(1)


def _leave_zygote(sel: selectors.BaseSelector, parent: int, comm: bytes) -> None:
    """In a forked child, first: die with the zygote, close what was the zygote's (its socket and its other
    children's pidfds), take a process group of its own (as launch._popen gives a fresh rank) and `comm`
    as its name (not the zygote's)."""
    reaper.die_with_parent()
    if os.getppid() != parent:  # the zygote ended before the signal was asked for: nobody watches us
        os._exit(1)
    for key in list(sel.get_map().values()):
        os.close(key.fd)
    os.setpgid(0, 0)
    reaper.set_name(comm)


# -- started by forking an agent that imported torch ----------------------------------------------


class Forked:
    """A zygote forked from this process, as `subprocess.Popen` is watched: wait, kill, returncode."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._pidfd = os.pidfd_open(pid)  # a kill can never reach a reused pid
        self._lock = threading.Lock()

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None and not wait_readable(self._pidfd, timeout):  # the pidfd stays open: one per agent
            raise subprocess.TimeoutExpired(f"zygote {self.pid}", timeout or 0)
        with self._lock:  # the controller's thread and its listener may both wait
            if self.returncode is None:
                _, status = os.waitpid(self.pid, 0)
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def kill(self) -> None:
        if self.returncode is None:
            try:
                signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)
            except ProcessLookupError:  # reaped meanwhile by a wait in another thread, as Popen.kill allows
                pass


def wait_readable(fd: int, timeout: float | None) -> bool:
    """Whether `fd` (a pidfd: the process ended) became readable within `timeout` seconds."""
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        return bool(sel.select(timeout))


def fork(theirs: socket.socket, ours: socket.socket, out: BinaryIO, env: dict[str, str]) -> Forked:
    """Fork the zygote from this process, which has imported torch (`preimport`) and runs one thread:
    the child serves `theirs`, writes to `out` and reads nothing, in a process group of its own, with
    `env` as its environment (the agent's secret is not in it), as `python -m
    clustercheck.run.zygote_serve` would."""
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid:
        return Forked(pid)
    code = 1
    try:
        ours.close()
        os.setpgid(0, 0)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        os.dup2(out.fileno(), 1)
        os.dup2(out.fileno(), 2)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # not the agent's handlers
        signal.signal(signal.SIGINT, signal.default_int_handler)
        sys.path[0] = os.getcwd()  # where `python -m` starts; _become_rank gives each rank its own
        os.environ.clear()
        os.environ.update(env)
        code = serve(theirs.detach())
    except KeyboardInterrupt:
        code = 130
    except BaseException:  # noqa: BLE001 - said in the zygote's log, which the pool quotes
        traceback.print_exc()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    try:
        code = serve(int(sys.argv[1]))
    except KeyboardInterrupt:
        code = 130
    sys.stdout.flush()
    os._exit(code)  # without tearing torch down: the controller has gone or closed us
