"""The CPU seconds of a command and of every process it started, however they were parented.

`/usr/bin/time` counts only the children a process waited for: a controller that leaves without reaping
its zygote (cli.entry ends without tearing torch down) hides the zygote's and the ranks' CPU from it. This
wrapper makes itself the child subreaper (prctl PR_SET_CHILD_SUBREAPER), so that every orphaned
descendant is reparented to it, waits for all of them, and prints the rusage of them all.

    python benchmarks/cpu_total.py [--runs N] -- clustercheck run cpu-smoke -q

prints one line per run: wall seconds (until the command's own exit), user and sys CPU seconds of every
process it started, and how many processes the wrapper itself reaped (the command and its orphans); then
the medians.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import resource
import statistics
import subprocess
import sys
import time

PR_SET_CHILD_SUBREAPER = 36


def one(argv: list[str]) -> tuple[float, float, float, int]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    proc.wait()
    wall = time.monotonic() - t0
    reaped = 1
    while True:  # the descendants it left behind, reparented to us, as they end
        try:
            os.wait()
            reaped += 1
        except ChildProcessError:
            break
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, after.ru_utime - before.ru_utime, after.ru_stime - before.ru_stime, reaped


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("command", nargs=argparse.REMAINDER)
    a = p.parse_args()
    argv = a.command[1:] if a.command[:1] == ["--"] else a.command
    if not argv:
        p.error("name a command after --")
    if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1) != 0:
        print("cpu_total: this kernel refused PR_SET_CHILD_SUBREAPER", file=sys.stderr)
        return 1
    rows = []
    for run in range(a.runs):
        rows.append(one(argv))
        wall, user, sys_, n = rows[-1]
        print(f"run {run + 1}: wall {wall:.2f} s, user {user:.2f} s, sys {sys_:.2f} s, cpu {user + sys_:.2f} s, "
              f"{n} reaped here", flush=True)
    print(f"median: wall {statistics.median(r[0] for r in rows):.2f} s, "
          f"cpu {statistics.median(r[1] + r[2] for r in rows):.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
