"""The controller's cost of each localization round at 8,192 ranks, through a real c10d TCPStore.

    python benchmarks/localize_dispatch.py [--ranks 8192] [--runs 5] [--procs 4]

Each run is one whole localization (8,192 nodes, one rank each, 1% bad and 2 dead, 5% noise; the
planner's own rounds, 3 or 4), dispatched as the pool does (clustercheck/pool.py, worker.py, wire.py):
the controller seals and posts `task/<seq>` with the round's groups of global ranks; every rank in a
group posts its sealed `result/<seq>/<rank>` and counts itself in `answers/<seq>` up to the task's
`answering` (ranks in no group post nothing); the rank completing the count sets `complete/<seq>`; the
controller polls `complete/<seq>` backing off from 1 ms to 50 ms, reads the busy ranks' results in one
multi_get, checks each seal, and the planner records the round and plans the next. Simulated ranks
are --procs processes, each answering for its share of ranks over its own store connection (results
sealed before the clock starts: on a cluster each rank seals its own).

Per round number it prints the median and max over runs, in ms, of: post, answers (until complete: the
simulated ranks' traffic, on the same cores here), collect (multi_get + unseal), planner (record +
next_round), round (their sum, wall) and controller CPU (this process's CPU time over the round, the
store server's threads included: the controller's own cost, whatever the ranks' share of the cores).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import sys
import time
from collections import defaultdict
from datetime import timedelta
from pathlib import Path

import torch.distributed as dist

from clustercheck.run import wire

sys.path.insert(0, str(Path(__file__).resolve().parent))
import localize_sim as sim  # noqa: E402

from clustercheck.localize import Planner  # noqa: E402

RESULT = {"ok": True, "result": {"rows": [{"size": 1 << 26, "bytes": 1 << 26, "seconds": 0.000812, "wrong": False}],
                                 "host": "n00000"}}


def ranks_main(port: int, key: str, mine: list[int]) -> None:
    store = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timedelta(seconds=300))
    sealed = {r: wire.seal(key, RESULT) for r in mine}
    store.add("ready", 1)
    seq = 0
    while True:
        seq += 1
        task = wire.unseal(key, store.get(wire.task_key(seq)))  # blocks until the controller posts
        if task["op"] == "exit":
            return
        busy = set(mine) if task["answering"] == task["world"] else {r for g in task["groups"] for r in g}
        for r in mine:  # what worker.main does for each rank
            if r in busy:
                store.set(wire.result_key(seq, r), sealed[r])
                if store.add(wire.answers_key(seq), 1) == task["answering"]:
                    store.set(wire.complete_key(seq), "1")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", type=int, default=8192)
    p.add_argument("--runs", type=int, default=5, help="whole localizations (each 3-4 rounds)")
    p.add_argument("--procs", type=int, default=4, help="processes simulating the ranks")
    p.add_argument("--every-rank", action="store_true",
                   help="every rank answers every task, idle or not (the protocol before idle ranks were skipped)")
    a = p.parse_args()
    n = a.ranks
    server = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=300))
    key = wire.new_key()
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=ranks_main, args=(server.port, key, list(range(i, n, a.procs))))
             for i in range(a.procs)]
    for proc in procs:
        proc.start()
    while int(server.add("ready", 0)) < a.procs:  # every rank process started and connected
        time.sleep(0.05)
    phases: dict[int, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    groups_in: dict[int, list[int]] = defaultdict(list)
    seq = 0
    for run in range(a.runs):
        nodes, topo, faults = sim.setup(dict(nodes=n, leaf_size=32, bad_nodes=n // 100, dead_nodes=2, bad_links=0,
                                             bad_switches=0, transients=0, noise=0.05, outliers=0.0,
                                             link_pool="neighbours"), run)
        rank_of = {nd: i for i, nd in enumerate(nodes)}
        planner = Planner(nodes, topo, threshold=sim.THRESHOLD)
        t0, c0 = time.perf_counter(), time.process_time()
        groups = planner.next_round()
        t_plan = time.perf_counter() - t0
        while groups:
            rnd = groups[0].round
            seq += 1
            rank_groups = [[rank_of[m] for m in g.members] for g in groups]
            busy = list(range(n)) if a.every_rank else sorted({r for g in rank_groups for r in g})
            task = {"op": "collective", "params": {"name": "all_reduce", "sizes": [1 << 26]},
                    "groups": rank_groups, "runner": "clustercheck.measure.collectives:rank_collective",
                    "answering": len(busy), "world": n}
            t0 = time.perf_counter()
            server.set(wire.task_key(seq), wire.seal(key, task))
            t1 = time.perf_counter()
            delay = 0.001
            while not server.check([wire.complete_key(seq)]):
                time.sleep(delay)
                delay = min(delay * 2, 0.05)
            t2 = time.perf_counter()
            keys = [wire.result_key(seq, r) for r in busy]
            results = [wire.unseal(key, v) for v in server.multi_get(keys)]
            t3 = time.perf_counter()
            assert len(results) == len(busy) and all(r["ok"] for r in results)
            for k in (wire.task_key(seq), wire.answers_key(seq), wire.complete_key(seq)):
                server.delete_key(k)
            t4 = time.perf_counter()
            planner.record({g.id: sim.measure(faults, topo, g.members, rnd) for g in groups})
            groups = planner.next_round()
            t5 = time.perf_counter()
            c5 = time.process_time()
            t_plan += t5 - t4
            row = phases[rnd]
            for name, value in (("post", t1 - t0), ("answers", t2 - t1), ("collect", t3 - t2), ("planner", t_plan),
                                ("round", t3 - t0 + t_plan), ("controller CPU", c5 - c0)):
                row[name].append(value * 1e3)
            groups_in[rnd].append(len(rank_groups))
            t_plan, c0 = 0.0, time.process_time()
            # the ranks delete their previous results as they read the next task (worker.py); here the
            # controller does it, off the clock, so the store holds what it would on a cluster
            for k in keys:
                server.delete_key(k)
    seq += 1
    server.set(wire.task_key(seq), wire.seal(key, {"op": "exit"}))
    for proc in procs:
        proc.join()
    print(f"{n} ranks, {a.procs} processes answering, {a.runs} localizations"
          + (", every rank answering every task" if a.every_rank else ""))
    print(f"{'round':<6}{'runs':>5}{'groups':>8}  " + "".join(f"{name:>17}" for name in phases[1]))
    print(f"{'':<6}{'':>5}{'':>8}  " + "".join(f"{'median/max ms':>17}" for _ in phases[1]))
    for rnd in sorted(phases):
        cells = "".join(f"{statistics.median(v):>10.0f}/{max(v):<6.0f}" for v in phases[rnd].values())
        print(f"{rnd:<6}{len(groups_in[rnd]):>5}{statistics.median(groups_in[rnd]):>8.0f}  {cells}")
    worst = max(max(row["round"]) for row in phases.values())
    print(f"worst round (wall): {worst:.0f} ms; worst controller CPU: "
          f"{max(max(row['controller CPU']) for row in phases.values()):.0f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
