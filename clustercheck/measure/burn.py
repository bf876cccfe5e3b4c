"""The burn: GEMM on every rank's device at once for `duration` seconds while a background watch samples
the hardware (clustercheck.counters.watch), and every result checked against a known answer.

Known answer: the operands are multiples of 1/8 in [-4, 4] (6 significant bits, exact in bf16, fp16 and
fp32), so every product is exact and so is every partial sum in fp32 while |sum| < 2^18 (m <= 16384); the
exact result, computed once in float64 on the same device and rounded once to the output dtype, is then
what a correct GEMM returns bit for bit. Reduced-precision reductions (split-K partials kept in bf16/fp16)
are turned off for the burn so that holds on GPUs. Any element that differs counts as wrong: silent data
corruption fails the check whatever the throughput."""

from __future__ import annotations

import os
import time
from typing import Any

import torch

from clustercheck.counters import watch as w
from clustercheck.measure import RankContext, fault_here
from clustercheck.measure.collectives import _barrier

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
DEFAULT_M = {"cuda": 8192, "cpu": 1024}  # gpu-fryer's 8192 x 8192 on GPUs; a CPU chunk stays under a second


def operands(m: int, dtype: torch.dtype, device: torch.device, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator(device=device).manual_seed(seed)
    a, b = (torch.randint(-32, 33, (m, m), generator=gen, device=device, dtype=torch.int32) for _ in range(2))
    return (a.to(dtype) / 8).to(dtype), (b.to(dtype) / 8).to(dtype)


def known_answer(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The exact product (float64 holds it exactly), rounded once to the operands' dtype."""
    return (a.double() @ b.double()).to(a.dtype)


class _ExactReductions:
    """Turn off cuBLAS reduced-precision split-K reductions for the burn; restore them after."""

    def __enter__(self) -> None:
        m = torch.backends.cuda.matmul
        self.saved = (m.allow_bf16_reduced_precision_reduction, m.allow_fp16_reduced_precision_reduction)
        m.allow_bf16_reduced_precision_reduction = False
        m.allow_fp16_reduced_precision_reduction = False

    def __exit__(self, *exc: object) -> None:
        m = torch.backends.cuda.matmul
        m.allow_bf16_reduced_precision_reduction, m.allow_fp16_reduced_precision_reduction = self.saved


def _watch(ctx: RankContext, interval: float) -> tuple[w.Watch | None, str]:
    if interval <= 0:
        return None, ""
    try:
        read = w.gpu_reader(ctx.bus_id) if ctx.device.type == "cuda" else \
            w.cpu_reader(frozenset(os.sched_getaffinity(0)))
    except Exception as exc:  # NVML cannot start or find this GPU: the burn is not watched, and says so
        return None, f"watch could not start: {type(exc).__name__}: {exc}"
    return w.Watch(interval, read).start(), ""


def burn(ctx: RankContext, p: dict[str, Any]) -> dict[str, Any]:
    cuda = ctx.device.type == "cuda"
    name = p["dtype"] if p["dtype"] != "auto" else ("bfloat16" if cuda else "float32")
    dtype, m = DTYPES[name], p["m"] or DEFAULT_M[ctx.device.type]
    a, b = operands(m, dtype, ctx.device, p["seed"] + ctx.rank)
    with _ExactReductions():
        ref = known_answer(a, b)
        c = torch.empty_like(ref)
        for _ in range(p["warmup"]):
            torch.matmul(a, b, out=c)
        ctx.sync()
        _barrier(ctx)  # every device of the group starts its load together
        watch, watch_error = _watch(ctx, p["interval"])
        chunks: list[float] = []
        wrong, corrupt = 0, fault_here(ctx, p, "corrupt")
        start = time.perf_counter()
        while not chunks or time.perf_counter() - start < p["duration"]:
            t0 = time.perf_counter()
            for _ in range(p["chunk"]):
                torch.matmul(a, b, out=c)
            ctx.sync()
            chunks.append(time.perf_counter() - t0)
            if corrupt and len(chunks) == 1:
                c.view(-1)[c.numel() // 3] += 1  # test-only: one silently corrupted element on this rank
            wrong += int((c != ref).sum())  # the check on the chunk's last result, outside its timing
        wall = time.perf_counter() - start
        if watch is not None:
            watch.stop()
    _barrier(ctx)
    flops = 2 * m ** 3 * p["chunk"]
    rates = [flops / s / 1e12 for s in chunks]
    seen = w.summary(watch.samples, watch.errors, watch.cpu_s) if watch is not None else None
    return {"subject": ctx.gpu if cuda else f"rank{ctx.rank}", "bus_id": ctx.bus_id, "host": ctx.host,
            "dtype": name, "m": m, "gemms": len(chunks) * p["chunk"], "checked": len(chunks), "wrong": wrong,
            "seconds": wall, "tflops": flops * len(chunks) / sum(chunks) / 1e12, "tflops_min": min(rates),
            "tflops_max": max(rates), "watch": seen, "watch_error": watch_error,
            "interval": p["interval"]}
