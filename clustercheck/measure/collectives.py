"""Collectives timed the nccl-tests way (src/common.cu): warm-up, barrier, a CPU clock around
`iters` back-to-back launches closed by a device sync, time / iters; then `check_iters` runs on
fresh data whose reduction is exact in any order, counting wrong elements (#wrong)."""

from __future__ import annotations

import time
from typing import Any

import torch
import torch.distributed as dist

from clustercheck.measure import RankContext, fault_here

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
_PERIOD = 1021  # prime; the check data repeats every n * _PERIOD elements


def _barrier(ctx: RankContext) -> None:
    if ctx.backend == "nccl":
        dist.barrier(device_ids=[ctx.local_rank])
    else:
        dist.barrier()


def _pattern(ctx: RankContext, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """One period of the check data: which rank owns each element, and the value it holds there.

    Element i is owned by rank (i + seed) % n and holds 1, 2 or 3 there (a hash of i and seed), 0 on
    every other rank: each reduced element is exactly 1, 2 or 3 in any dtype and summation order,
    and a lost, doubled or misplaced contribution changes it. Built once per period and tiled, so
    checking costs a compare, not per-element arithmetic."""
    j = torch.arange(ctx.world_size * _PERIOD, device=ctx.device, dtype=torch.int64)
    value = 1 + ((j * 2654435761 + seed * 40503) % 1_000_003) % 3
    return (j + seed) % ctx.world_size, value


def _tiles(buf: torch.Tensor, period: int) -> tuple[torch.Tensor, torch.Tensor]:
    full = buf.numel() // period
    return buf[: full * period].view(full, period), buf[full * period:]


def _fill_exact(buf: torch.Tensor, ctx: RankContext, seed: int) -> None:
    owner, value = _pattern(ctx, seed)
    tile = torch.where(owner == ctx.rank, value, torch.zeros_like(value)).to(buf.dtype)
    body, rest = _tiles(buf, tile.numel())
    body.copy_(tile.expand_as(body))
    rest.copy_(tile[: rest.numel()])


def _count_wrong_sum(buf: torch.Tensor, ctx: RankContext, seed: int) -> int:
    expected = _pattern(ctx, seed)[1].to(buf.dtype)
    body, rest = _tiles(buf, expected.numel())
    return int((body != expected).sum().item()) + int((rest != expected[: rest.numel()]).sum().item())


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
            if fault_here(ctx, p, "corrupt"):
                buf[buf.numel() // 2] += 1  # test-only: one wrong element on this rank
            wrong += _count_wrong_sum(buf, ctx, seed)
        rows.append({"size": count * elt, "count": count, "seconds": seconds, "wrong": wrong})
        del buf
    return {"rows": rows, "dtype": p["dtype"]}
