"""Orphans: a tool a rank started outlives it.

A rank starts its tools (all_reduce_perf, nvbandwidth, ib_write_bw, nvidia-smi) in sessions of their own so
that a timeout kills all they started (measure/native.py, probes/tool.py); it kills them itself only while
it runs. A rank killed outright (the pool's SIGKILL, its parent-death signal, the OOM killer), or a tool that
double-forked, leaves them running, re-parented to init, loading the GPUs and NICs for up to their
tool_timeout beside the next checks and the next run. A child subreaper (Linux 3.4) receives them instead
and kills them. PR_SET_PDEATHSIG in the tool's preexec_fn would fire with the death of the rank's *thread*
that started it and is unsafe in a process that runs threads; the subreaper needs neither.

Two processes are subreapers, and nothing else of clustercheck's:
- the zygote (run/zygote_serve.py), the parent of forked ranks: `adopt`, then `kill_orphans` when it reaps
  a rank and when it ends;
- a rank started afresh (CLUSTERCHECK_ZYGOTE=0, or no zygote to ask) has a reaper of its own as its parent,
  `python -m clustercheck.run.reaper PARENT ARGV...` (`command`), started by the controller (launch._popen)
  or a node agent (agent._fresh) in the rank's place: it starts the rank, waits for it, kills whatever the
  rank left, and exits as the rank did. Its pool holds it as `Reaped`, whose kill() asks the reaper.
The controller and the agent are not subreapers themselves: the controller is pytest's process, runs
threads and starts what is not a rank's (the zygote, ssh or srun for agents, whose ControlPersist master
is meant to outlive its ssh; a test's browser), and a waitpid on a child it did not start could take the
exit status a Popen in another thread waits for (its returncode then reads 0). A reaper per fresh rank
knows that every child but its rank is an orphan of that rank's.
"""

from __future__ import annotations

import ctypes
import os
import resource
import signal
import subprocess
import sys
import time
from typing import Callable, NoReturn

_PR_SET_PDEATHSIG, _PR_SET_NAME, _PR_SET_CHILD_SUBREAPER = 1, 15, 36
GRACE = 5.0  # seconds to go on killing what a rank left, after it ended (a process in the kernel dies on leaving it)


def _libc() -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL("libc.so.6", use_errno=True)
    except OSError:
        return None


LIBC = _libc()  # glibc: prctl and malloc_trim (worker.py); None elsewhere


def die_with_parent(sig: int = signal.SIGTERM) -> None:
    """Ask Linux to send `sig` to this process when the *thread* that started it ends (no strays)."""
    if LIBC is not None:
        LIBC.prctl(_PR_SET_PDEATHSIG, sig)


def set_name(comm: bytes) -> None:
    """What ps and top show as this process's name (/proc/self/comm, 15 bytes)."""
    if LIBC is not None:
        LIBC.prctl(_PR_SET_NAME, comm[:15])


def adopt() -> bool:
    """Make this process the reaper of its descendants' orphans; whether it is (Linux only)."""
    if not sys.platform.startswith("linux") or LIBC is None:
        return False
    return int(LIBC.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)) == 0


def children() -> dict[int, int]:
    """This process's children, pid: process group (zombies too: they are reaped here)."""
    me, found = os.getpid(), {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()  # the name before it may hold spaces and ')'
        except (OSError, IndexError):  # ended meanwhile
            continue
        if int(fields[1]) == me:
            found[int(name)] = int(fields[2])
    return found


def kill_orphans(ours: set[int], told: set[int], say: Callable[[str], None]) -> set[int]:
    """SIGKILL the process group of every child that is not one of `ours` (an orphan a rank left; `say`s so
    unless in `told`), reap those that ended; the orphans still there (a kill takes its time; a killed
    group's members re-parent here as their parents die), for the caller to look at again."""
    mine = os.getpgrp()
    left = set()
    for pid, group in children().items():
        if pid in ours:
            continue
        try:
            if os.waitpid(pid, os.WNOHANG)[0]:
                continue  # reaped
        except ChildProcessError:
            continue
        # a child is reaped by nobody else: its pid, and its group while it is in it, are not reused meanwhile
        if pid not in told:
            say(f"killing process group {group}, left behind by a rank that ended: {shown(pid)}")
        if group not in ours and group != mine:  # a live rank's group (its pid) is the rank's own: not that
            try:
                os.killpg(group, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        left.add(pid)
    return left


def sweep(told: set[int], say: Callable[[str], None], grace: float = GRACE) -> None:
    """Kill every child of this process (all orphans by now) until none is left, or `grace` has passed."""
    deadline = time.monotonic() + grace
    told = set(told)
    while True:
        left = kill_orphans(set(), told, say)
        told |= left
        if not left or time.monotonic() > deadline:
            return
        time.sleep(0.05)


def shown(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f"pid {pid}: " + f.read(200).replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return f"pid {pid}"


# -- a fresh rank's own reaper ---------------------------------------------------------------------


def command(argv: list[str]) -> list[str]:
    """The command line that starts `argv` (a fresh rank: `python -m clustercheck.run.worker ...`) under a
    reaper of its own, the child of this process."""
    return [sys.executable, "-m", "clustercheck.run.reaper", str(os.getpid()), *argv]


class Reaped:
    """A rank started by `command`, as the pool watches it (`launcher.RankProcess`): the reaper's Popen, but
    kill() SIGTERMs the reaper, which SIGKILLs the rank's process group and then what the rank left, and
    exits as the rank did: killed by SIGKILL, unless it had ended already (a SIGKILL to the reaper itself
    would leave the rank's tools to init). Safe from a signal handler, as Popen.kill is. `pid` is the reaper's: the rank is its one child."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def returncode(self) -> int | None:
        return self.proc.returncode

    def poll(self) -> int | None:
        return self.proc.poll()

    def wait(self, timeout: float | None = None) -> int:
        return self.proc.wait(timeout)

    def kill(self) -> None:
        try:
            self.proc.send_signal(signal.SIGTERM)
        except ProcessLookupError:
            pass


def serve(parent: int, argv: list[str]) -> int:
    """Start `argv` (the rank) in a process group of its own, wait for it, reaping the orphans that end
    meanwhile (never killing one while the rank runs: a tool may have started a daemon it still talks to);
    on SIGTERM (Reaped.kill, or this process's parent-death signal) SIGKILL the rank's group; once the
    rank is reaped, kill what it left (`sweep`). Returns the rank's exit code, negative for a signal."""
    die_with_parent()
    if os.getppid() != parent:  # the parent ended before the signal was asked for: nobody watches us
        return 1
    set_name(b"cc-reaper")
    adopt()
    wanted = {signal.SIGTERM, signal.SIGCHLD}
    # the signals are taken synchronously (sigwaitinfo), never by a handler: the rank's pid is signalled
    # only while it is unreaped, so a kill can never reach a reused pid
    signal.pthread_sigmask(signal.SIG_BLOCK, wanted)
    rank = os.posix_spawn(argv[0], argv, os.environ, setpgroup=0, setsigmask=(),
                          setsigdef=(signal.SIGPIPE, signal.SIGXFSZ))  # as subprocess restores them
    status, killed = None, False
    while status is None:
        got = signal.sigwaitinfo(wanted)
        if got.si_signo == signal.SIGTERM and not killed:
            killed = True
            try:
                os.killpg(rank, signal.SIGKILL)
            except ProcessLookupError:
                pass
        while status is None:  # every child that ended: the rank, or an orphan
            try:
                pid, st = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            if pid == rank:
                status = st
    # silent: the rank's log is this process's output, and its last line is the rank's own words (pool.py)
    sweep(set(), lambda line: None)
    assert status is not None  # the loop ends with the rank reaped: it is this process's child till then
    return os.waitstatus_to_exitcode(status)


def _exit_as(code: int) -> NoReturn:
    """End as the rank did: its exit code, or killed by its signal (no core file of ours)."""
    if code < 0:
        sig = -code
        resource.setrlimit(resource.RLIMIT_CORE, (0, resource.getrlimit(resource.RLIMIT_CORE)[1]))
        if sig not in (signal.SIGKILL, signal.SIGSTOP):
            signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {sig})
        os.kill(os.getpid(), sig)
        code = 128 + sig
    os._exit(code)


if __name__ == "__main__":
    _exit_as(serve(int(sys.argv[1]), sys.argv[2:]))
