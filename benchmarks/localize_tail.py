"""The localization planner's tail: rounds, exactness and healthy nodes named over many seeds.

    python benchmarks/localize_tail.py                      # 1,024 nodes, seeds 0-199; 8,192 nodes, seeds 0-19
    python benchmarks/localize_tail.py --nodes 1024 --seeds 200 --json

The cluster and faults are benchmarks/localize_sim.py's (leaf switches of 32 nodes under one spine,
slow and dead nodes, slow links between neighbours, slow uplinks, 5% Gaussian noise): 10 bad nodes, 2
links and 1 uplink at 1,024 nodes; 80 bad nodes, 8 links and 2 uplinks at 8,192. Prints, per size, how
many seeds took each number of rounds, how many were exact (every bad node, link and uplink named, and
nothing else), how many healthy nodes were named in all, and the seeds that were not exact or took the
most rounds, so that a change to the planner can be judged on its tail, not its mean.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from localize_sim import blamed_healthy, exact, run_planner, setup  # noqa: E402

ROWS = {1024: dict(bad_nodes=10, bad_links=2, bad_switches=1), 8192: dict(bad_nodes=80, bad_links=8, bad_switches=2)}


def distribution(nodes: int, seeds: int, noise: float) -> dict[str, Any]:
    cfg = dict(nodes=nodes, leaf_size=32, noise=noise, transients=0, outliers=0.0, link_pool="neighbours",
               **ROWS.get(nodes, dict(bad_nodes=max(1, nodes // 100), bad_links=2, bad_switches=1)))
    cfg["dead_nodes"] = min(2, cfg["bad_nodes"])
    rounds: collections.Counter[int] = collections.Counter()
    inexact, healthy, slowest = [], 0, []
    t0 = time.perf_counter()
    for seed in range(seeds):
        out = run_planner(*setup(cfg, seed))
        rounds[out["rounds"]] += 1
        healthy += blamed_healthy(out)
        if not exact(out):
            inexact.append(seed)
        slowest.append((out["rounds"], seed))
    top = max(rounds)
    return {"nodes": nodes, "seeds": seeds, "noise": noise, "rounds": dict(sorted(rounds.items())),
            "exact": seeds - len(inexact), "healthy_named": healthy, "not_exact": inexact,
            f"seeds_with_{top}_rounds": [s for r, s in slowest if r == top][:20],
            "seconds": round(time.perf_counter() - t0, 1)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, action="append", help="cluster sizes (default: 1024 and 8192)")
    p.add_argument("--seeds", type=int, help="seeds 0..N-1 (default: 200 at 1,024 nodes, 20 at 8,192)")
    p.add_argument("--noise", type=float, default=0.05)
    p.add_argument("--json", action="store_true", help="one JSON object per size")
    a = p.parse_args(argv)
    for n in a.nodes or [1024, 8192]:
        d = distribution(n, a.seeds or (200 if n <= 1024 else 20), a.noise)
        if a.json:
            print(json.dumps(d), flush=True)
            continue
        spread = ", ".join(f"{r} rounds: {c}" for r, c in d["rounds"].items())
        print(f"{n:>5} nodes, seeds 0-{d['seeds'] - 1}: {spread}; exact {d['exact']}/{d['seeds']}; healthy nodes "
              f"named {d['healthy_named']}; not exact: {d['not_exact'] or 'none'} ({d['seconds']} s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
