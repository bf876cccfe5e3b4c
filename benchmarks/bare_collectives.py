"""A bare torch.distributed loop, nccl-tests method, for all_reduce, all_gather and broadcast at 4 and
64 MiB (out of place where torch has it), iterations as in ITERS. `torchrun --nproc-per-node 2 benchmarks/bare_collectives.py`;
rank 0 prints one JSON line per collective and size with busbw in GB/s."""

import json
import os
import time

import torch
import torch.distributed as dist

WARMUP = 5
# iterations per collective and size: about 1.5-2 s of timed work each on the 2-vCPU reference VM, so
# that a VM's scheduling jitter averages out (benchmarks/three-collectives.yaml uses the same)
ITERS = {"all_reduce": {4 << 20: 400, 64 << 20: 40}, "all_gather": {4 << 20: 500, 64 << 20: 20},
         "broadcast": {4 << 20: 1200, 64 << 20: 100}}


def main() -> None:
    dist.init_process_group("gloo")
    rank, n = dist.get_rank(), dist.get_world_size()
    for coll in ("all_reduce", "all_gather", "broadcast"):
        for size, iters in ITERS[coll].items():
            count = size // 4
            if coll == "all_gather":
                per_rank = (count // n) & ~3  # nccl-tests: per-rank count rounded down to 16 bytes
                send, recv = torch.rand(per_rank), torch.empty(per_rank * n)
                op, nbytes, factor = (lambda: dist.all_gather_into_tensor(recv, send)), per_rank * n * 4, (n - 1) / n
            elif coll == "all_reduce":
                buf = torch.rand(count)
                op, nbytes, factor = (lambda: dist.all_reduce(buf)), count * 4, 2 * (n - 1) / n
            else:
                buf = torch.rand(count)
                op, nbytes, factor = (lambda: dist.broadcast(buf, 0)), count * 4, 1.0
            for _ in range(WARMUP):
                op()
            dist.barrier()
            start = time.perf_counter()
            for _ in range(iters):
                op()
            t = torch.tensor([(time.perf_counter() - start) / iters], dtype=torch.float64)
            dist.all_reduce(t)
            algbw = nbytes / (t.item() / n) / 1e9
            if rank == 0:
                print(json.dumps({"collective": coll, "size": size, "busbw": algbw * factor}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    main()
