"""Collectives timed the nccl-tests way (src/common.cu): warm-up, barrier, a CPU clock around
`iters` back-to-back launches closed by a device sync, time / iters; then `check_iters` runs on
fresh data whose reduction is exact in any order, counting wrong elements (#wrong)."""

from __future__ import annotations

import time
from typing import Any

import torch
import torch.distributed as dist

from clustercheck.measure import RankContext

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
_CHUNK = 1 << 24  # elements per chunk when building or checking data, to bound temporary memory


def _barrier(ctx: RankContext) -> None:
    if ctx.backend == "nccl":
        dist.barrier(device_ids=[ctx.local_rank])
    else:
        dist.barrier()


def _fill_exact(buf: torch.Tensor, ctx: RankContext, seed: int) -> None:
    """Element i is owned by rank (i + seed) % n and holds 1 + (31 i + seed) % 3 there, 0 elsewhere:
    every reduced element is exactly 1, 2 or 3 in any dtype and any summation order, and a lost,
    doubled or misplaced contribution changes it."""
    n = ctx.world_size
    for start in range(0, buf.numel(), _CHUNK):
        idx = torch.arange(start, min(start + _CHUNK, buf.numel()), device=buf.device, dtype=torch.int64)
        mine = (idx + seed) % n == ctx.rank
        vals = 1 + (idx * 31 + seed) % 3
        buf[start:start + idx.numel()] = torch.where(mine, vals, torch.zeros_like(vals)).to(buf.dtype)


def _count_wrong_sum(buf: torch.Tensor, seed: int) -> int:
    wrong = 0
    for start in range(0, buf.numel(), _CHUNK):
        idx = torch.arange(start, min(start + _CHUNK, buf.numel()), device=buf.device, dtype=torch.int64)
        expected = (1 + (idx * 31 + seed) % 3).to(buf.dtype)
        wrong += int((buf[start:start + idx.numel()] != expected).sum().item())
    return wrong


def all_reduce(ctx: RankContext, p: dict[str, Any]) -> dict[str, Any]:
    dtype = DTYPES[p["dtype"]]
    elt = torch.tensor([], dtype=dtype).element_size()
    rows = []
    for size in p["sizes"]:
        count = size // elt
        buf = torch.rand(count, device=ctx.device).to(dtype)
        for _ in range(p["warmup"]):
            dist.all_reduce(buf)
        ctx.sync()
        _barrier(ctx)
        start = time.perf_counter()
        for _ in range(p["iters"]):
            dist.all_reduce(buf)
        ctx.sync()
        seconds = (time.perf_counter() - start) / p["iters"]
        wrong = 0
        for c in range(p["check_iters"]):
            seed = (p.get("seed", 0) * 7919 + size * 31 + c + 1) % 1_000_003
            _fill_exact(buf, ctx, seed)
            dist.all_reduce(buf)
            wrong += _count_wrong_sum(buf, seed)
        rows.append({"size": count * elt, "count": count, "seconds": seconds, "wrong": wrong})
        del buf
    return {"rows": rows, "dtype": p["dtype"]}
