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


def _pin_to_gpu_numa(ctx: RankContext) -> set[int] | None:
    """Run on the CPUs close to this rank's GPU (sysfs's local_cpulist for its PCI address, else NVML's
    affinity for that address), so pinned buffers land in its NUMA node. Returns the affinity to put
    back afterwards (later CPU-side checks in this pool must not inherit one node's cores), or None
    when nothing was changed: no bus id, or neither source names CPUs (measure where we are, as
    nvbandwidth does without -d)."""
    from clustercheck.measure.binding import gpu_cpus

    cpus = gpu_cpus(ctx.bus_id) if ctx.bus_id else frozenset()
    if not cpus:
        return None
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpus & before or cpus)
    return before


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


def _summary(rates: list[float], bus_id: str = "") -> dict[str, Any]:
    """A metric's spread; with the PCI address of the subject's GPU(s), which rows carry as `bus_id`."""
    out: dict[str, Any] = {"median": statistics.median(rates), "min": min(rates), "max": max(rates)}
    if bus_id:
        out["bus_id"] = bus_id
    return out


def host_device(ctx: RankContext, p: dict[str, Any]) -> dict[str, Any]:
    before = _pin_to_gpu_numa(ctx)
    try:
        n = p["size"] // 4
        host = torch.empty(n, dtype=torch.float32, pin_memory=True)
        dev = torch.empty(n, dtype=torch.float32, device=ctx.device)

        def work() -> dict[str, Any]:
            h2d = _gpu_rate(lambda: dev.copy_(host, non_blocking=True), p["size"], p["loops"], p["samples"])
            d2h = _gpu_rate(lambda: host.copy_(dev, non_blocking=True), p["size"], p["loops"], p["samples"])
            return {"h2d": _summary(h2d, ctx.bus_id), "d2h": _summary(d2h, ctx.bus_id)}

        return {"subjects": {ctx.gpu: _one_at_a_time(ctx, work)}}
    finally:
        if before is not None:
            os.sched_setaffinity(0, before)


def device_memory(ctx: RankContext, p: dict[str, Any]) -> dict[str, Any]:
    n = p["size"] // 4
    src = torch.empty(n, dtype=torch.float32, device=ctx.device)
    dst = torch.empty_like(src)
    # a copy reads and writes every byte: count both, so the figure compares with the HBM spec (read+write)
    rates = _gpu_rate(lambda: dst.copy_(src), 2 * p["size"], p["loops"], p["samples"])
    return {"subjects": {ctx.gpu: {"bandwidth": _summary(rates, ctx.bus_id)}}}


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
    # random operands drawn in their own dtype: no full-size fp32 temporaries (memory.memory_need counts 3)
    a = torch.empty(m, m, device=ctx.device, dtype=dtype).normal_()
    b = torch.empty(m, m, device=ctx.device, dtype=dtype).normal_()
    c = torch.empty(m, m, device=ctx.device, dtype=dtype)
    flops = 2 * m ** 3
    rate = _gpu_rate if cuda else _cpu_rate
    tflops = [r * 1e9 / 1e12 for r in rate(lambda: torch.matmul(a, b, out=c), flops, p["loops"], p["samples"])]
    name = ctx.gpu if cuda else f"rank{ctx.rank}"
    return {"subjects": {name: {"tflops": _summary(tflops, ctx.bus_id)}}, "dtype": str(dtype).removeprefix("torch.")}


def p2p(ctx: RankContext, p: dict[str, Any]) -> dict[str, Any]:
    """Every ordered GPU pair: rank i copies into a buffer on GPU j (torch runs a device-to-device copy
    on the source's stream: nvbandwidth's device_to_device_memcpy_write_ce); pairs one at a time.
    Bidirectional: both ranks of a pair copy toward each other at once, and the sum is reported.
    Each rank needs every GPU of its node visible: local rank j's GPU is CUDA device j (binding)."""
    from clustercheck.measure import cuda_bus_id

    visible = torch.cuda.device_count()
    if visible < ctx.world_size:
        raise RuntimeError(f"p2p copies between all {ctx.world_size} GPUs of the node, but this rank sees "
                           f"{visible} (CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')}); "
                           "run it without per-task GPU binding")
    n = p["size"] // 4
    src = torch.empty(n, dtype=torch.float32, device=ctx.device)
    peers = {j: torch.empty(n, dtype=torch.float32, device=torch.device("cuda", j))
             for j in range(ctx.world_size) if j != ctx.local_rank}
    bus = {j: cuda_bus_id(j) for j in range(ctx.world_size)}
    row: dict[str, Any] = {}
    for i in range(ctx.world_size):
        for j in range(ctx.world_size):
            if i == j:
                continue
            _barrier(ctx)
            if ctx.local_rank == i:
                dst = peers[j]
                rates = _gpu_rate(lambda: dst.copy_(src, non_blocking=True), p["size"], p["loops"], p["samples"])
                row[f"GPU{i}->GPU{j}"] = {"unidirectional": _summary(rates, f"{bus[i]}->{bus[j]}"),
                                          "peer_access": torch.cuda.can_device_access_peer(i, j)}
    if p["bidirectional"]:
        for i in range(ctx.world_size):
            for j in range(i + 1, ctx.world_size):
                _barrier(ctx)
                if ctx.local_rank in (i, j):
                    other = j if ctx.local_rank == i else i
                    dst = peers[other]
                    rates = _gpu_rate(lambda: dst.copy_(src, non_blocking=True), p["size"], p["loops"], p["samples"])
                    row[f"GPU{ctx.local_rank}->GPU{other}:bidir"] = {
                        "share": _summary(rates, f"{bus[ctx.local_rank]}->{bus[other]}")}
    _barrier(ctx)
    return {"subjects": row}
