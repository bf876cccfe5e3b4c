"""How long a rank pool takes to start, with the local ranks forked from the zygote and started afresh.

    python benchmarks/pool_start.py [--pools 6] [--ranks 2] [--hosts N]

Starts `--pools` pools one after another in one controller, each of another launch environment (as a
run starts a pool per `env:`, a tuning pool beside a timed one, or a fresh pool after a failure), and
prints each pool's start (`WorkerPool.start_seconds`: from its socket to its last rank ready) and the
CPU seconds the whole family of processes used, first with the zygote (run/zygote.py), then without
(CLUSTERCHECK_ZYGOTE=0), each in a process of its own. The zygote's own import is in its first pool.

With `--hosts N` the pools run under `--launcher hosts` on N hosts that are this machine (the template
`env CC_HOST={host} {python}`), `--ranks` per host: one agent per host, whose zygote forks each pool's
ranks, against the same agents starting every rank afresh (how the hosts launcher started every rank
through its template before it had agents). The agents' start is in the whole process's figures, not in
the first pool's.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def child(pools: int, ranks: int, hosts: int) -> None:
    from clustercheck.run.pool import PoolKey
    from clustercheck.run.pools import PoolManager

    launcher = None
    if hosts:
        from clustercheck.run.hosts import HostsLauncher

        launcher = HostsLauncher([f"h{i}" for i in range(hosts)], "env CC_HOST={host} {python}", "127.0.0.1")
        launcher.begin()
    with tempfile.TemporaryDirectory() as tmp:
        manager = PoolManager(Path(tmp), launcher=launcher)
        starts = []
        try:
            for n in range(pools):
                pool = manager.get(PoolKey("gloo", ranks * max(1, hosts), (("CC_BENCH_POOL", str(n)),)))
                starts.append(pool.start_seconds)
                manager.discard(pool.key)  # ended and reaped: its CPU is in this process's children
        finally:
            manager.close(kill=True)
            if launcher is not None:
                launcher.close()  # the agents leave, each having reaped its zygote and ranks
        from clustercheck.run import zygote

        zygote.end_shared()  # reaped too, with the ranks it reaped
    print(json.dumps({"starts": starts}))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pools", type=int, default=6)
    parser.add_argument("--ranks", type=int, default=2, help="ranks (per host with --hosts)")
    parser.add_argument("--hosts", type=int, default=0, help="run under --launcher hosts with N hosts here")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.pools, args.ranks, args.hosts)
        return 0
    where = f" on {args.hosts} hosts (--launcher hosts, agents here)" if args.hosts else ""
    print(f"{args.pools} pools of {args.ranks} gloo ranks{' per host' if args.hosts else ''}{where}, one after "
          "another, one controller")
    for label, value in (("zygote", "1"), ("fresh", "0")):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        wall = time.perf_counter()
        out = subprocess.run([sys.executable, __file__, "--child", "--pools", str(args.pools), "--ranks",
                              str(args.ranks), "--hosts", str(args.hosts)], env={**os.environ, "CLUSTERCHECK_ZYGOTE": value},
                             check=True, capture_output=True, text=True).stdout
        wall = time.perf_counter() - wall
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        starts = json.loads(out.splitlines()[-1])["starts"]
        print(f"{label:7s} first pool {starts[0]:.2f} s, later pools median {statistics.median(starts[1:]):.2f} s "
              f"(max {max(starts[1:]):.2f}), whole process {wall:.2f} s wall, {cpu:.2f} CPU-s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
