"""The bare script that issue 32's GPU start-up goals are measured against: what `gpu-smoke` measures on one
GPU, with no harness. One process, torch imported, the GPU counted through NVML, then host<->device copies,
device memory and the bf16 GEMM, each measured exactly as clustercheck's ranks measure it
(clustercheck/measure/copies.py: 4 warm-up ops, a spin kernel holding the stream while `loops` ops are
enqueued, CUDA events around them, `samples` samples, the median printed). `--only gemm` measures the GEMM
alone (the one-check comparison: `clustercheck run gpu-smoke -k gemm`). `rate` repeats copies.py's `_gpu_rate`
on purpose rather than importing it: the reference must not share the code it is the reference for.

    python3 benchmarks/gpu/bare_smoke.py [--only gemm|host-device|device-memory]
"""

from __future__ import annotations

import argparse
import statistics
import time

T0 = time.perf_counter()

import torch  # noqa: E402  (timed from the interpreter's start, as a user's script would be)

MiB = 1 << 20
HOLD_CYCLES = 2_000_000


def rate(op, nbytes: int, loops: int, samples: int, warmup: int = 4) -> float:
    for _ in range(warmup):
        op()
    torch.cuda.synchronize()
    rates = []
    for _ in range(samples):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(HOLD_CYCLES)
        start.record()
        for _ in range(loops):
            op()
        end.record()
        torch.cuda.synchronize()
        rates.append(nbytes * loops / (start.elapsed_time(end) / 1e3) / 1e9)
    return statistics.median(rates)


def versions() -> str:
    import pynvml

    pynvml.nvmlInit()
    try:
        return f"{pynvml.nvmlDeviceGetCount()} GPU(s), driver {pynvml.nvmlSystemGetDriverVersion()}"
    finally:
        pynvml.nvmlShutdown()


def host_device() -> str:
    size = 256 * MiB
    host = torch.empty(size // 4, dtype=torch.float32, pin_memory=True)
    dev = torch.empty(size // 4, dtype=torch.float32, device="cuda")
    h2d = rate(lambda: dev.copy_(host, non_blocking=True), size, 16, 3)
    d2h = rate(lambda: host.copy_(dev, non_blocking=True), size, 16, 3)
    return f"h2d {h2d:.2f} GB/s, d2h {d2h:.2f} GB/s"


def device_memory() -> str:
    size = 1024 * MiB
    src = torch.empty(size // 4, dtype=torch.float32, device="cuda")
    dst = torch.empty_like(src)
    out = f"device memory {rate(lambda: dst.copy_(src), 2 * size, 16, 3):.1f} GB/s"
    del src, dst
    return out


def gemm() -> str:
    m = 8192
    a = torch.empty(m, m, device="cuda", dtype=torch.bfloat16).normal_()
    b = torch.empty(m, m, device="cuda", dtype=torch.bfloat16).normal_()
    c = torch.empty(m, m, device="cuda", dtype=torch.bfloat16)
    return f"gemm bf16 {rate(lambda: torch.matmul(a, b, out=c), 2 * m ** 3, 20, 3) / 1e3:.1f} TFLOP/s"


MEASURES = {"host-device": host_device, "device-memory": device_memory, "gemm": gemm}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", choices=sorted(MEASURES))
    args = ap.parse_args()
    torch.cuda.set_device(0)
    lines = [versions()] if args.only is None else []
    for name, measure in MEASURES.items():
        if args.only in (None, name):
            lines.append(measure())
    print("; ".join(lines) + f"; {time.perf_counter() - T0:.2f} s from the interpreter's start")


if __name__ == "__main__":
    main()
