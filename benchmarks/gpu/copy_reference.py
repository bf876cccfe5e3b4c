"""GPU validation: an independent copy reference following nvbandwidth's method (memcpy.cpp), without
clustercheck's code, to set beside clustercheck's host_device and device_memory figures.

    python benchmarks/gpu/copy_reference.py [--size 256] [--loops 16] [--samples 3]

For each direction: pinned host memory (cudaHostAlloc), a one-thread kernel that spins on a mapped host
flag so that nothing starts before every copy is queued, a start event, `loops` cudaMemcpyAsync of
`size` MiB, an end event; the host releases the flag, waits, and takes loops x size / elapsed. The
median of `samples` such runs is printed, as nvbandwidth does. Device-to-device counts the bytes once,
as nvbandwidth's device_local_copy does (clustercheck's device_memory counts read + write: twice)."""

from __future__ import annotations

import argparse
import json
import statistics

import cupy as cp
import numpy as np

SPIN = cp.RawKernel(r"""
extern "C" __global__ void spin(volatile int *flag, unsigned long long limit) {
    unsigned long long start = clock64();
    while (*flag == 0 && clock64() - start < limit) { }
}""", "spin")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, default=256, help="MiB per copy")
    ap.add_argument("--loops", type=int, default=16)
    ap.add_argument("--samples", type=int, default=3)
    args = ap.parse_args()
    n = args.size << 20
    rt = cp.cuda.runtime
    flag_mem = cp.cuda.alloc_pinned_memory(4)  # UVA: a pinned host pointer is valid on the device
    host_flag = np.frombuffer(flag_mem, dtype=np.int32, count=1)
    host = cp.cuda.alloc_pinned_memory(n)
    np.frombuffer(host, dtype=np.uint8, count=n)[:] = 1
    dev_a, dev_b = cp.empty(n, dtype=cp.uint8), cp.empty(n, dtype=cp.uint8)
    dev_a.fill(2)
    stream = cp.cuda.Stream(non_blocking=True)
    kinds = {"h2d": (dev_a.data.ptr, host.ptr, rt.memcpyHostToDevice),
             "d2h": (host.ptr, dev_a.data.ptr, rt.memcpyDeviceToHost),
             "d2d": (dev_b.data.ptr, dev_a.data.ptr, rt.memcpyDeviceToDevice)}
    out = {}
    for name, (dst, src, kind) in kinds.items():
        for _ in range(2):  # warm-up
            rt.memcpyAsync(dst, src, n, kind, stream.ptr)
        stream.synchronize()
        rates = []
        for _ in range(args.samples):
            host_flag[0] = 0
            start, end = cp.cuda.Event(), cp.cuda.Event()
            SPIN((1,), (1,), (cp.uint64(flag_mem.ptr), cp.uint64(10 ** 10)), stream=stream)
            start.record(stream)
            for _ in range(args.loops):
                rt.memcpyAsync(dst, src, n, kind, stream.ptr)
            end.record(stream)
            host_flag[0] = 1
            end.synchronize()
            ms = cp.cuda.get_elapsed_time(start, end)
            rates.append(args.loops * n / (ms / 1e3) / 1e9)
        out[name] = {"GBps_median": statistics.median(rates), "samples": rates}
    out["method"] = (f"{args.loops} x {args.size} MiB cudaMemcpyAsync between events behind a host-released spin "
                     f"kernel, median of {args.samples}; d2d counts bytes once")
    out["device"] = rt.getDeviceProperties(0)["name"].decode()
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
