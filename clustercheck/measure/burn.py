"""The burn: GEMM on every rank's device at once for `duration` seconds while a background watch samples
the hardware (clustercheck.counters.watch), and every result checked against a known answer.

Known answer (float32, bfloat16, float16): the operands are multiples of 1/8 in [-4, 4] (6 significant
bits, exact in bf16, fp16 and fp32), so every product is exact and so is every partial sum in fp32 while
|sum| < 2^18 (m <= 16384); the exact result, computed once in float64 on the same device and rounded once
to the output dtype, is then what a correct GEMM returns bit for bit. Reduced-precision reductions
(split-K partials kept in bf16/fp16) are turned off for the burn so that holds on GPUs. Any element that
differs counts as wrong: silent data corruption fails the check whatever the throughput.

fp8 (`float8_e4m3fn`, e4m3: 3 stored mantissa bits, so 4 significant bits with the implicit one): the
operands are the integers in [-16, 16]. Each is exact in e4m3: an integer below 16 has at most 4 binary
digits and 16 is a power of two (17 = 10001b needs 5 and is the first that rounds), all far inside
e4m3's range (max 448, smallest normal 2^-6). The GEMM is torch._scaled_mm with scales 1.0 (float32
scalars), fp32 accumulation (use_fast_accum=False, torch's default: cuBLAS's
CUBLASLT_MATMUL_DESC_FAST_ACCUM off, so the tensor cores' partial sums are periodically promoted to fp32)
and a float32 output. Every product is an integer with |p| <= 256, exact; every partial sum is an
integer with |sum| <= 256 m <= 2^22 (m <= 16384), and fp32 holds every integer below 2^24, so every
partial sum is exact in whatever order the GEMM adds. The exact product, the float64 product of the
dequantised operands rounded once to float32 (which changes nothing: it is an integer below 2^24), is
then what a correct fp8 GEMM returns bit for bit, every bit of every element checked. fp8 runs where
torch has a float8_e4m3fn _scaled_mm: CUDA GPUs of compute capability 8.9 or later (Ada, Hopper,
Blackwell), ROCm gfx950/gfx12 (gfx94x has float8_e4m3fnuz only), and CPUs in torch builds with a CPU
_scaled_mm (2.13 has one); anywhere else the rank raises, naming the device, before any load: an error
of the check, never a pass and never another dtype."""

from __future__ import annotations

import os
import time
from typing import Any, Callable

import torch

from clustercheck.counters import watch as w
from clustercheck.measure import RankContext, fault_here
from clustercheck.measure.collectives import _barrier

FP8 = torch.float8_e4m3fn
FP8_OUT = torch.float32  # the fp8 GEMM's output: the exact integer sums, every bit of them checked
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16, "float8_e4m3fn": FP8}
DEFAULT_M = {"cuda": 8192, "cpu": 1024}  # gpu-fryer's 8192 x 8192 on GPUs; a CPU chunk stays under a second


def operands(m: int, dtype: torch.dtype, device: torch.device, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """a and b, exact in `dtype` (module docstring). fp8: b is column-major, as torch._scaled_mm wants it."""
    gen = torch.Generator(device=device).manual_seed(seed)
    if dtype == FP8:
        a, b = (torch.randint(-16, 17, (m, m), generator=gen, device=device, dtype=torch.int32).float().to(FP8)
                for _ in range(2))
        return a, b.t().contiguous().t()
    a, b = (torch.randint(-32, 33, (m, m), generator=gen, device=device, dtype=torch.int32) for _ in range(2))
    return (a.to(dtype) / 8).to(dtype), (b.to(dtype) / 8).to(dtype)


def out_dtype(dtype: torch.dtype) -> torch.dtype:
    return FP8_OUT if dtype == FP8 else dtype


def known_answer(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The exact product (float64 holds it exactly), rounded once to the GEMM's output dtype."""
    return (a.double() @ b.double()).to(out_dtype(a.dtype))


def gemm(a: torch.Tensor, b: torch.Tensor) -> Callable[[torch.Tensor], object]:
    """out = a @ b: torch.matmul, or for fp8 torch._scaled_mm with unit scales, fp32 accumulation, float32 out."""
    if a.dtype != FP8:
        return lambda out: torch.matmul(a, b, out=out)
    one = torch.ones((), dtype=torch.float32, device=a.device)
    return lambda out: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=FP8_OUT, use_fast_accum=False,
                                        out=out)


def fp8_support(device: torch.device) -> None:
    """Raise, naming the device, where this torch cannot run a float8_e4m3fn GEMM on `device`."""
    if device.type == "cuda" and torch.version.hip:
        arch = torch.cuda.get_device_properties(device).gcnArchName
        if not any(g in arch for g in ("gfx95", "gfx12")):  # gfx94x (MI300X, MI325X) have float8_e4m3fnuz only
            raise RuntimeError(f"fp8 GEMM (float8_e4m3fn) on ROCm needs gfx950 or gfx12 "
                               f"(this: {torch.cuda.get_device_name(device)}, {arch})")
    elif device.type == "cuda":
        cc = torch.cuda.get_device_capability(device)
        if tuple(cc) < (8, 9):
            raise RuntimeError(f"fp8 GEMM needs a CUDA GPU of compute capability 8.9 or later "
                               f"(this: {torch.cuda.get_device_name(device)}, {cc[0]}.{cc[1]})")
    a = torch.ones((16, 16), device=device).to(FP8)
    try:  # this torch build, on this device (a CPU build before torch had a CPU _scaled_mm, say)
        gemm(a, a.t().contiguous().t())(torch.empty((16, 16), dtype=FP8_OUT, device=device))
    except Exception as exc:
        raise RuntimeError(f"fp8 GEMM (torch._scaled_mm, float8_e4m3fn) does not run on {device} with torch "
                           f"{torch.__version__}: {type(exc).__name__}: {exc}") from exc


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
    if dtype == FP8:
        fp8_support(ctx.device)  # before any load: an error of the check, never a pass, never another dtype
    a, b = operands(m, dtype, ctx.device, p["seed"] + ctx.rank)
    run = gemm(a, b)
    with _ExactReductions():
        ref = known_answer(a, b)
        c = torch.empty_like(ref)
        for _ in range(p["warmup"]):
            run(c)
        ctx.sync()
        _barrier(ctx)  # every device of the group starts its load together
        watch, watch_error = _watch(ctx, p["interval"])
        chunks: list[float] = []
        wrong, corrupt = 0, fault_here(ctx, p, "corrupt")
        start = time.perf_counter()
        while not chunks or time.perf_counter() - start < p["duration"]:
            t0 = time.perf_counter()
            for _ in range(p["chunk"]):
                run(c)
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
