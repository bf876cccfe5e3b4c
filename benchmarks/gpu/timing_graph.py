"""GPU validation: eager against CUDA-graph timing of one-rank all_gather (NCCL's one-rank path is a
device copy), alternated (eager, graph, graph, eager) per size so that drift weighs on both; then the same
device copy with no NCCL at all (torch copy_, eager and captured) to tell NCCL's graph path from CUDA's.

    python benchmarks/gpu/timing_graph.py"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

MiB = 1 << 20
SIZES = [256 * MiB, 1024 * MiB, 2048 * MiB]


def via_pool() -> None:
    from clustercheck.run.pool import PoolKey
    from clustercheck.run.pools import PoolManager
    from clustercheck.kinds.collectives import reduce_collective

    with tempfile.TemporaryDirectory() as tmp:
        pools = PoolManager(Path(tmp))
        try:
            pool = pools.get(PoolKey("nccl", 1))
            for size in SIZES:
                out = {"size_MiB": size // MiB}
                for k, graph in enumerate((0, 10, 10, 0)):
                    params = {"sizes": [size], "dtype": "float32", "warmup": 5, "iters": 20, "check_iters": 0,
                              "judge_at": size, "placements": ["out"], "per_iteration": False, "cuda_graph": graph}
                    (row,) = reduce_collective("all_gather", pool.run("all_gather", params, 600), ["gpu"], size).rows
                    out[f"{'graph' if graph else 'eager'}{k}_algbw"] = round(row["algbw"], 1)
                print(json.dumps(out), flush=True)
        finally:
            pools.close(kill=True)


def raw_copy(sizes: list[int] = SIZES) -> dict[int, dict[str, float]]:
    """size -> GB/s (bytes counted once) of torch copy_ eager and captured, in the order eager, graph,
    graph, eager; printed as JSON lines too."""
    import torch

    results = {}
    for size in sizes:
        src = torch.empty(size // 4, device="cuda").fill_(1.0)
        dst = torch.empty_like(src)
        for _ in range(5):
            dst.copy_(src)
        torch.cuda.synchronize()
        out = {"size_MiB": size // MiB}
        for k, graphed in enumerate((False, True, True, False)):
            if graphed:
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g, capture_error_mode="thread_local"):
                    for _ in range(20):
                        dst.copy_(src)
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                for _ in range(10):
                    g.replay()
                torch.cuda.synchronize()
                per_op = (time.perf_counter() - t0) / 200
            else:
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                for _ in range(20):
                    dst.copy_(src)
                torch.cuda.synchronize()
                per_op = (time.perf_counter() - t0) / 20
            out[f"{'graph' if graphed else 'eager'}{k}_GBps_once"] = round(size / per_op / 1e9, 1)
        print(json.dumps({"raw torch copy_": out}), flush=True)
        results[size] = out
        del src, dst
        torch.cuda.empty_cache()
    return results


if __name__ == "__main__":
    via_pool()
    raw_copy()
    sys.exit(0)
