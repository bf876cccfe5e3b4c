"""The same all_reduce measurements as ten-allreduce.yaml in one bare torchrun script (no clustercheck).

    torchrun --nproc-per-node 2 benchmarks/bare_allreduce.py

nccl-tests method: warm-up, barrier, CPU clock around `iters` launches, time per op averaged across
ranks, bandwidth from the mean time; then one run on fresh exactly-summable data, counting wrong
elements. Rank 0 prints one JSON line per check.
"""

import json
import os
import time

import torch
import torch.distributed as dist

CHECKS, SIZES, WARMUP, ITERS = 10, [1 << 20, 4 << 20, 16 << 20], 3, 10


def main() -> None:
    dist.init_process_group("gloo")
    rank, n = dist.get_rank(), dist.get_world_size()
    for check in range(CHECKS):
        rows = {}
        for size in SIZES:
            buf = torch.rand(size // 4)
            for _ in range(WARMUP):
                dist.all_reduce(buf)
            dist.barrier()
            start = time.perf_counter()
            for _ in range(ITERS):
                dist.all_reduce(buf)
            t = torch.tensor([(time.perf_counter() - start) / ITERS], dtype=torch.float64)
            dist.all_reduce(t)
            mean = t.item() / n
            # exact-sum check data, one period of n*1021 elements tiled (as clustercheck does)
            j = torch.arange(n * 1021)
            value = (1 + ((j * 2654435761 + check * 40503) % 1_000_003) % 3).float()
            tile = torch.where((j + check) % n == rank, value, torch.zeros_like(value))
            reps = -(-buf.numel() // tile.numel())
            buf.copy_(tile.repeat(reps)[: buf.numel()])
            dist.all_reduce(buf)
            wrong = int((buf != value.repeat(reps)[: buf.numel()]).sum())
            algbw = size / mean / 1e9
            rows[size] = {"time_us": mean * 1e6, "algbw": algbw, "busbw": algbw * 2 * (n - 1) / n, "wrong": wrong}
        if rank == 0:
            print(json.dumps({"check": check, "rows": rows}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    main()
