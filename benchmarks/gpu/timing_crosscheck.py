"""GPU validation: one-rank timing cross-checks on real work, through the real pool.

    python benchmarks/gpu/timing_crosscheck.py

NCCL's one-rank all_gather out of place is a plain device copy (NCCL src/device/onerank.cu), so at 1 GiB
its algbw must be half of device_memory's read+write figure (within 5%), and the per-iteration CUDA-event
times must agree with the CPU clock's (within 2%). Graph replay: at 256 MiB it must agree with the event
times (within 2%; the CPU clock's window there also holds the first launch and the closing sync, 4-5% of
20 ops of 180 us, as in nccl-tests); at 1 GiB and above CUDA runs a captured device copy about 19% slower
than an eager one (the lent H100, driver 580.159.04, torch copy_ with no NCCL shows it alike), so there the
graph/eager ratio must equal torch's own within 2%. An 8-byte in-place all_reduce (NCCL does nothing on one
rank) gives the harness's own per-operation floor. Prints one JSON object per line, then a verdict."""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from clustercheck.run.pool import PoolKey
from clustercheck.run.pools import PoolManager
from clustercheck.kinds.collectives import reduce_collective
from clustercheck.kinds.subjects import reduce_subjects

MiB, GiB = 1 << 20, 1 << 30


def sweep(pool, coll: str, sizes: list[int], placement: str, graph: int = 0, dtype: str = "float32") -> list[dict]:
    params = {"sizes": sizes, "dtype": dtype, "warmup": 5, "iters": 20, "check_iters": 1, "judge_at": sizes[-1],
              "placements": [placement], "per_iteration": True, "cuda_graph": graph}
    m = reduce_collective(coll, pool.run(coll, params, 600), ["gpu"], sizes[-1])
    return m.rows


def main() -> int:
    from clustercheck.kinds import KINDS

    ok = True
    graph_ratio: dict[int, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        pools = PoolManager(Path(tmp))
        try:
            pool = pools.get(PoolKey("nccl", 1))
            dm = reduce_subjects(pool.run("device_memory", {"size": GiB, "loops": 16, "samples": 3}, 300),
                                 KINDS["device_memory"].metrics).subjects["GPU0"]["bandwidth"]
            print(json.dumps({"device_memory_rw_GBps": dm}))
            eager = sweep(pool, "all_gather", [256 * MiB, GiB], "out")
            graph = sweep(pool, "all_gather", [256 * MiB, GiB], "out", graph=10)
            for e, g in zip(eager, graph):
                ev = e.get("iter_us_median")
                row = {"op": "all_gather out", "size": e["size"], "eager_us": e["time_us"], "graph_us": g["time_us"],
                       "algbw_eager": e["algbw"], "algbw_graph": g["algbw"], "half_device_memory": dm / 2,
                       "algbw_over_half_dm": e["algbw"] / (dm / 2), "graph_over_eager": g["time_us"] / e["time_us"],
                       "iter_stats": {k: v for k, v in e.items() if k.startswith("iter") and k != "iter_us"}, "event_median_us": ev,
                       "wrong": e["wrong"] + g["wrong"]}
                if ev:
                    row["events_over_eager"] = ev / e["time_us"]
                print(json.dumps(row))
                ok &= row["wrong"] == 0
                if e["size"] == GiB:
                    ok &= abs(row["algbw_over_half_dm"] - 1) < 0.05 and abs(row["events_over_eager"] - 1) < 0.02
                    graph_ratio[GiB] = row["graph_over_eager"]
                else:
                    ok &= abs(g["time_us"] / ev - 1) < 0.02
            for graph_launches in (0, 10):
                (tiny,) = sweep(pool, "all_reduce", [8], "in", graph=graph_launches)
                print(json.dumps({"op": "all_reduce in 8B", "cuda_graph": graph_launches, "time_us": tiny["time_us"],
                                  "iter_stats": {k: v for k, v in tiny.items() if k.startswith("iter") and k != "iter_us"}}))
        finally:
            pools.close(kill=True)
    from timing_graph import raw_copy

    raw = raw_copy([GiB])[GiB]
    torch_ratio = (raw["eager0_GBps_once"] + raw["eager3_GBps_once"]) / (raw["graph1_GBps_once"] + raw["graph2_GBps_once"])
    print(json.dumps({"graph_over_eager_1GiB": {"all_gather": graph_ratio[GiB], "torch copy_": torch_ratio}}))
    ok &= abs(graph_ratio[GiB] / torch_ratio - 1) < 0.02
    print(f"timing cross-checks {'agree' if ok else 'DISAGREE'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
