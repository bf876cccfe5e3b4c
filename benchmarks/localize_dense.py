"""The localization planner's inference when failures are dense: every test failing, or a fifth of the nodes bad.

    python benchmarks/localize_dense.py                         # every test fails at 256, 512 and 1,024 nodes
    python benchmarks/localize_dense.py --nodes 1024 --bad 0.2  # a fifth of the nodes bad (seed 0)
    python benchmarks/localize_dense.py --json

"Every test failed" is a floor above what the fabric gives, or a fabric-wide software fault; the ranks
wait while the controller explains each round (clustercheck.localize.infer), so its seconds are the
figure. The cluster is benchmarks/localize_sim.py's (leaf switches of 32 nodes under one spine); a group
reads 50 (under the floor of 80) when it holds a bad node, else 100. Prints, per size, the seconds each
round's planning took (it explains every earlier round: the first round's plan needs none), the
verdicts' seconds, and what was named, so that a change can be checked to name the same.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from localize_sim import THRESHOLD, cluster  # noqa: E402

from clustercheck.localize import Planner  # noqa: E402


def dense(n: int, bad: float, seed: int) -> dict[str, Any]:
    nodes, topo = cluster(n, 32)
    broken = set(nodes) if bad >= 1 else set(random.Random(seed).sample(nodes, int(n * bad)))
    planner = Planner(nodes, topo, threshold=THRESHOLD)
    plan: list[float] = []
    t0 = time.perf_counter()
    while True:
        t = time.perf_counter()
        groups = planner.next_round()
        plan.append(round(time.perf_counter() - t, 2))
        if not groups:
            break
        planner.record({g.id: 50.0 if broken & set(g.members) else 100.0 for g in groups})
    t = time.perf_counter()
    v = planner.verdicts()
    verdicts = round(time.perf_counter() - t, 2)
    return {"nodes": n, "bad": bad, "rounds": v.rounds, "tests": v.tests, "plan_seconds": plan,
            "verdicts_seconds": verdicts, "total_seconds": round(time.perf_counter() - t0, 1),
            "every_test_failed": v.every_test_failed, "findings": len(v.findings),
            "suspects": sum(len(g) for g in v.suspects), "named_nodes": len({n for f in v.findings for n in f.nodes})}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, action="append", help="cluster sizes (default: 256, 512 and 1024)")
    p.add_argument("--bad", type=float, default=1.0,
                   help="fraction of the nodes that are bad (default 1: every test fails)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="one JSON object per size")
    a = p.parse_args(argv)
    for n in a.nodes or [256, 512, 1024]:
        d = dense(n, a.bad, a.seed)
        if a.json:
            print(json.dumps(d), flush=True)
            continue
        rounds = ", ".join(f"{s} s" for s in d["plan_seconds"])
        print(f"{n:>5} nodes, {a.bad:.0%} bad: {d['rounds']} rounds, {d['tests']} tests; planning per round {rounds}; "
              f"verdicts {d['verdicts_seconds']} s; total {d['total_seconds']} s; every test failed "
              f"{d['every_test_failed']}; {d['findings']} findings, {d['suspects']} suspects", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
