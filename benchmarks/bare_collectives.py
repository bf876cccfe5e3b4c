"""A bare torch.distributed loop, nccl-tests method, for all_reduce, all_gather and broadcast on gloo:
warm-up, barrier, a clock around `iters` back-to-back operations, time averaged across ranks, busbw
from it (all_gather out of place, per-rank count rounded down to 16 bytes as nccl-tests does).

    torchrun --nproc-per-node 2 benchmarks/bare_collectives.py            # the six of ITERS, once
    ... bare_collectives.py --serve                                        # measurements on request

With --serve every rank reads requests `<collective> <bytes> <iters>` from stdin, one per line, and
rank 0 answers each with one JSON line on stdout; `exit` ends it. collectives_vs_bare.py starts it
this way, so that its measurements can be interleaved with clustercheck's one by one."""

import json
import os
import sys
import time
from itertools import takewhile

import torch
import torch.distributed as dist

WARMUP = 5
# iterations per collective and size: about 0.5 s of timed work each on the 2-vCPU reference VM
ITERS = {"all_reduce": {4 << 20: 100, 64 << 20: 10}, "all_gather": {4 << 20: 150, 64 << 20: 6},
         "broadcast": {4 << 20: 350, 64 << 20: 25}}


def measure(coll: str, size: int, iters: int) -> float:
    """busbw (GB/s) of `iters` operations of `size` bytes (fp32), the same on every rank."""
    n = dist.get_world_size()
    count = size // 4
    if coll == "all_gather":
        per_rank = (count // n) & ~3
        send, recv = torch.rand(per_rank), torch.empty(per_rank * n)
        op, nbytes, factor = (lambda: dist.all_gather_into_tensor(recv, send)), per_rank * n * 4, (n - 1) / n
    elif coll == "all_reduce":
        buf = torch.rand(count)
        op, nbytes, factor = (lambda: dist.all_reduce(buf)), count * 4, 2 * (n - 1) / n
    elif coll == "broadcast":
        buf = torch.rand(count)
        op, nbytes, factor = (lambda: dist.broadcast(buf, 0)), count * 4, 1.0
    else:
        raise ValueError(f"unknown collective {coll!r}")
    for _ in range(WARMUP):
        op()
    dist.barrier()
    start = time.perf_counter()
    for _ in range(iters):
        op()
    t = torch.tensor([(time.perf_counter() - start) / iters], dtype=torch.float64)
    dist.all_reduce(t)
    return nbytes / (t.item() / n) / 1e9 * factor


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    if "--serve" in sys.argv[1:]:
        lines = takewhile(lambda w: w != ["exit"], (line.split() for line in sys.stdin))
        requests = ((w[0], int(w[1]), int(w[2])) for w in lines if w)
    else:
        requests = ((c, s, i) for c, by_size in ITERS.items() for s, i in by_size.items())
    for coll, size, iters in requests:
        busbw = measure(coll, size, iters)
        if rank == 0:
            print(json.dumps({"collective": coll, "size": size, "iters": iters, "busbw": busbw}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    main()
