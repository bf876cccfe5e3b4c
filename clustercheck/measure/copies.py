"""Copies and compute on each rank's own device, the nvbandwidth way where it applies: pinned host
memory on the GPU's NUMA CPUs, a spin kernel holding the stream while the copies are enqueued,
CUDA events around `loops` copies, the median of `samples`, GB = 1e9 bytes."""

from __future__ import annotations

import os
import statistics
import time
from typing import Any, Callable

import torch

from clustercheck.measure import RankContext
from clustercheck.measure.collectives import _barrier

_HOLD_CYCLES = 2_000_000  # ~1 ms of spinning: longer than enqueuing a few dozen copies


def _pin_to_gpu_numa(ctx: RankContext) -> None:
    """Run on the CPUs NVML says are close to this GPU, so pinned buffers land in its NUMA node."""
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(ctx.local_rank)
        words = pynvml.nvmlDeviceGetCpuAffinity(handle, ((os.cpu_count() or 64) + 63) // 64)
        cpus = {w * 64 + b for w, word in enumerate(words) for b in range(64) if word >> b & 1}
        if cpus:
            os.sched_setaffinity(0, cpus & os.sched_getaffinity(0) or cpus)
    except Exception:  # no NVML or no affinity information: measure where we are, as nvbandwidth -d
        pass


def _gpu_rate(op: Callable[[], object], nbytes: int, loops: int, samples: int, warmup: int = 4) -> list[float]:
    for _ in range(warmup):
        op()
    torch.cuda.synchronize()
    rates = []
    for _ in range(samples):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(_HOLD_CYCLES)  # the stream waits here, so enqueue overhead is not timed
        start.record()
        for _ in range(loops):
            op()
        end.record()
        torch.cuda.synchronize()
        rates.append(nbytes * loops / (start.elapsed_time(end) / 1e3) / 1e9)
    return rates


def _cpu_rate(op: Callable[[], object], nbytes: int, loops: int, samples: int, warmup: int = 1) -> list[float]:
    for _ in range(warmup):
        op()
    rates = []
    for _ in range(samples):
        start = time.perf_counter()
        for _ in range(loops):
            op()
        rates.append(nbytes * loops / (time.perf_counter() - start) / 1e9)
    return rates


def _one_at_a_time(ctx: RankContext, work: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Ranks take turns (as nvbandwidth measures one GPU at a time), so they do not share a link."""
    out: dict[str, Any] = {}
    for turn in range(ctx.world_size):
        _barrier(ctx)
        if turn == ctx.rank:
            out = work()
    _barrier(ctx)
    return out


def _summary(rates: list[float]) -> dict[str, float]:
    return {"median": statistics.median(rates), "min": min(rates), "max": max(rates)}


def host_device(ctx: RankContext, p: dict[str, Any]) -> dict[str, Any]:
    _pin_to_gpu_numa(ctx)
    n = p["size"] // 4
    host = torch.empty(n, dtype=torch.float32, pin_memory=True)
    dev = torch.empty(n, dtype=torch.float32, device=ctx.device)

    def work() -> dict[str, Any]:
        h2d = _gpu_rate(lambda: dev.copy_(host, non_blocking=True), p["size"], p["loops"], p["samples"])
        d2h = _gpu_rate(lambda: host.copy_(dev, non_blocking=True), p["size"], p["loops"], p["samples"])
        return {"h2d": _summary(h2d), "d2h": _summary(d2h)}

    return {"subjects": {f"GPU{ctx.local_rank}": _one_at_a_time(ctx, work)}}


def device_memory(ctx: RankContext, p: dict[str, Any]) -> dict[str, Any]:
    n = p["size"] // 4
    src = torch.empty(n, dtype=torch.float32, device=ctx.device)
    dst = torch.empty_like(src)
    # a copy reads and writes every byte: count both, so the figure compares with the HBM spec (read+write)
    rates = _gpu_rate(lambda: dst.copy_(src), 2 * p["size"], p["loops"], p["samples"])
    return {"subjects": {f"GPU{ctx.local_rank}": {"bandwidth": _summary(rates)}}}


def host_memory(ctx: RankContext, p: dict[str, Any]) -> dict[str, Any]:
    """Host memory copy bandwidth, one rank at a time (the CPU-side analogue of device memory)."""
    n = p["size"] // 4
    src = torch.ones(n, dtype=torch.float32)
    dst = torch.empty_like(src)

    def work() -> dict[str, Any]:
        return {"bandwidth": _summary(_cpu_rate(lambda: dst.copy_(src), p["size"], p["loops"], p["samples"]))}

    return {"subjects": {f"rank{ctx.rank}": _one_at_a_time(ctx, work)}}


def gemm(ctx: RankContext, p: dict[str, Any]) -> dict[str, Any]:
    """Matrix multiply throughput; also the load of a burn-in."""
    cuda = ctx.device.type == "cuda"
    dtype = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}[
        p["dtype"] if p["dtype"] != "auto" else ("bfloat16" if cuda else "float32")]
    m = p["m"]
    a = torch.randn(m, m, device=ctx.device).to(dtype)
    b = torch.randn(m, m, device=ctx.device).to(dtype)
    c = torch.empty(m, m, device=ctx.device, dtype=dtype)
    flops = 2 * m ** 3
    rate = _gpu_rate if cuda else _cpu_rate
    tflops = [r * 1e9 / 1e12 for r in rate(lambda: torch.matmul(a, b, out=c), flops, p["loops"], p["samples"])]
    name = f"GPU{ctx.local_rank}" if cuda else f"rank{ctx.rank}"
    return {"subjects": {name: {"tflops": _summary(tflops)}}, "dtype": str(dtype).removeprefix("torch.")}


def p2p(ctx: RankContext, p: dict[str, Any]) -> dict[str, Any]:
    """Every ordered GPU pair: rank i copies into a buffer on GPU j (torch runs a device-to-device copy
    on the source's stream: nvbandwidth's device_to_device_memcpy_write_ce); pairs one at a time.
    Bidirectional: both ranks of a pair copy toward each other at once, and the sum is reported."""
    n = p["size"] // 4
    src = torch.empty(n, dtype=torch.float32, device=ctx.device)
    peers = {j: torch.empty(n, dtype=torch.float32, device=torch.device("cuda", j))
             for j in range(ctx.world_size) if j != ctx.local_rank}
    row: dict[str, Any] = {}
    for i in range(ctx.world_size):
        for j in range(ctx.world_size):
            if i == j:
                continue
            _barrier(ctx)
            if ctx.local_rank == i:
                dst = peers[j]
                rates = _gpu_rate(lambda: dst.copy_(src, non_blocking=True), p["size"], p["loops"], p["samples"])
                row[f"GPU{i}->GPU{j}"] = {"unidirectional": _summary(rates),
                                          "peer_access": torch.cuda.can_device_access_peer(i, j)}
    if p["bidirectional"]:
        for i in range(ctx.world_size):
            for j in range(i + 1, ctx.world_size):
                _barrier(ctx)
                if ctx.local_rank in (i, j):
                    other = j if ctx.local_rank == i else i
                    dst = peers[other]
                    rates = _gpu_rate(lambda: dst.copy_(src, non_blocking=True), p["size"], p["loops"], p["samples"])
                    row[f"GPU{ctx.local_rank}->GPU{other}:bidir"] = {"share": _summary(rates)}
    _barrier(ctx)
    return {"subjects": row}
