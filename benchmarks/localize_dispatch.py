"""The controller's cost of one localization round at 8,192 ranks, through a real c10d TCPStore.

    python benchmarks/localize_dispatch.py [--ranks 8192] [--rounds 5] [--procs 4]

As the pool does (clustercheck/pool.py, wire.py): the controller seals and posts `task/<seq>` with the
round's groups (lists of global ranks), every rank posts its sealed `result/<seq>/<rank>` and counts
itself in `answers/<seq>`, the rank completing the count sets `complete/<seq>`; the controller polls
`complete/<seq>` backing off from 1 ms to 50 ms, reads every result in one multi_get and checks each
seal. Simulated ranks are --procs processes, each answering for its share of ranks over its own store
connection (their results are sealed before the clock starts: on a cluster each rank seals its own).
Also timed: the planner's record() and next_round() for the 8,192-node round. Prints each phase's
median over --rounds rounds, in milliseconds.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import sys
import time
from datetime import timedelta
from pathlib import Path

import torch.distributed as dist

from clustercheck import wire

sys.path.insert(0, str(Path(__file__).resolve().parent))
import localize_sim as sim  # noqa: E402

from clustercheck.localize import Planner  # noqa: E402


def ranks_main(port: int, key: str, mine: list[int], world: int, rounds: int) -> None:
    store = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timedelta(seconds=120))
    store.add("ready", 1)
    for seq in range(1, rounds + 1):
        sealed = {r: wire.seal(key, {"ok": True, "result": {"busbw": 97.5, "time_us": [812.0, 809.5, 815.25]}})
                  for r in mine}
        wire.unseal(key, store.get(wire.task_key(seq)))  # blocks until the controller posts
        for r in mine:  # what worker._answer does for each rank
            store.set(wire.result_key(seq, r), sealed[r])
            if store.add(wire.answers_key(seq), 1) == world:
                store.set(wire.complete_key(seq), "1")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", type=int, default=8192)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--procs", type=int, default=4, help="processes simulating the ranks")
    a = p.parse_args()
    n = a.ranks
    server = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=120))
    key = wire.new_key()
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=ranks_main, args=(server.port, key, list(range(i, n, a.procs)), n, a.rounds))
             for i in range(a.procs)]
    for proc in procs:
        proc.start()
    # one rank per node; the groups of a second round on 8,192 nodes with 80 bad (the planner's own)
    nodes, topo, faults = sim.setup(dict(nodes=n, leaf_size=32, bad_nodes=n // 100, dead_nodes=2, bad_links=0,
                                         bad_switches=0, transients=0, noise=0.05, outliers=0.0,
                                         link_pool="neighbours"), 0)
    rank_of = {nd: i for i, nd in enumerate(nodes)}
    phases: dict[str, list[float]] = {k: [] for k in ("post", "answers", "collect", "planner", "round")}
    while int(server.add("ready", 0)) < a.procs:  # every rank process started and connected
        time.sleep(0.05)
    for seq in range(1, a.rounds + 1):
        planner = Planner(nodes, topo, threshold=sim.THRESHOLD)
        first = planner.next_round()
        planner.record({g.id: sim.measure(faults, topo, g.members, 1) for g in first})
        t0 = time.perf_counter()
        groups = planner.next_round()
        t_plan = time.perf_counter() - t0
        task = {"op": "collective", "params": {"name": "all_reduce", "sizes": [1 << 26]},
                "groups": [[rank_of[m] for m in g.members] for g in groups]}
        t0 = time.perf_counter()
        server.set(wire.task_key(seq), wire.seal(key, task))
        t1 = time.perf_counter()
        delay = 0.001
        while not server.check([wire.complete_key(seq)]):
            time.sleep(delay)
            delay = min(delay * 2, 0.05)
        t2 = time.perf_counter()
        keys = [wire.result_key(seq, r) for r in range(n)]
        results = [wire.unseal(key, v) for v in server.multi_get(keys)]
        t3 = time.perf_counter()
        assert len(results) == n and all(r["ok"] for r in results)
        for k in (wire.task_key(seq), wire.answers_key(seq), wire.complete_key(seq)):
            server.delete_key(k)
        for k in keys:
            server.delete_key(k)
        t4 = time.perf_counter()
        planner.record({g.id: sim.measure(faults, topo, g.members, 2) for g in groups})
        planner.next_round()
        t_plan += time.perf_counter() - t4
        for name, value in (("post", t1 - t0), ("answers", t2 - t1), ("collect", t3 - t2), ("planner", t_plan),
                            ("round", t3 - t0 + t_plan)):
            phases[name].append(value * 1e3)
    for proc in procs:
        proc.join()
    print(f"{n} ranks, {a.procs} processes answering, {len(groups)} groups in the round, {a.rounds} rounds")
    print(f"{'phase':<10}{'median ms':>10}{'max ms':>10}")
    for name, values in phases.items():
        print(f"{name:<10}{statistics.median(values):>10.1f}{max(values):>10.1f}")
    print("post: seal and set the task; answers: until complete/<seq> (the simulated ranks' store traffic); "
          "collect: multi_get and unseal every result; planner: record() + next_round(); round: the sum")
    return 0


if __name__ == "__main__":
    sys.exit(main())
