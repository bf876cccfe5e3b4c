"""Collectives timed the nccl-tests way (src/common.cu): warm-up, barrier, a CPU clock around `iters`
back-to-back launches closed by a device sync, time / iters. Optionally a second pass times each
iteration (CUDA events on GPUs, so the headline number stays the nccl-tests one), and a CUDA-graph
mode replays the captured launches (nccl-tests -G). Then `check_iters` runs on fresh data whose
result is exact in any dtype and order, counting wrong elements (#wrong)."""

from __future__ import annotations

import time
from typing import Any, Callable, Iterator

import torch
import torch.distributed as dist

from clustercheck.formulas import Layout, layout
from clustercheck.measure import RankContext, fault_here
from clustercheck.formulas import CHECK_ELEMENTS
from clustercheck.units import format_size

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
_PERIOD = 1021  # prime; check data repeats every _PERIOD (or n x _PERIOD) elements
# torch 2.13 renamed the tensor forms; keep working from 2.3 on
_all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_reduce_scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


def _barrier(ctx: RankContext) -> None:
    """Every rank of the task's group here before any goes on. A group of one waits for nobody: with NCCL
    the first barrier would build the communicator (torch creates it lazily, at the first collective), which
    nothing on one GPU needs; the copies and the burn would pay for it inside their first check."""
    if ctx.world_size == 1:  # the group's size inside a subgroup (RankContext)
        return
    if ctx.backend == "nccl":
        dist.barrier(group=ctx.group, device_ids=[ctx.device.index])  # CUDA's index, not the local rank
    else:
        dist.barrier(group=ctx.group)


# -- exactly checkable data ------------------------------------------------------------------------
def _values(ctx: RankContext, seed: int, salt: int, period: int = _PERIOD) -> torch.Tensor:
    """One period of values in {1, 2, 3}: exact in every dtype, a hash of position, seed and salt."""
    j = torch.arange(period, device=ctx.device, dtype=torch.int64)
    return 1 + ((j * 2654435761 + seed * 40503 + salt * 9973) % 1_000_003) % 3


def _owned(ctx: RankContext, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """For reductions: element j is owned by rank (j + seed) % n, which holds its value; the others
    hold 0. Each reduced element is exactly its value, and a lost, doubled or misplaced contribution
    changes it. Returns (this rank's period, the expected period)."""
    n = ctx.world_size
    value = _values(ctx, seed, 0, n * _PERIOD)
    owner = (torch.arange(n * _PERIOD, device=ctx.device) + seed) % n
    return torch.where(owner == ctx.rank, value, torch.zeros_like(value)), value


def _fill(buf: torch.Tensor, period: torch.Tensor, offset: int = 0) -> None:
    """buf[i] = period[(offset + i) % len(period)], without per-element arithmetic."""
    tile = torch.roll(period, -(offset % period.numel())).to(buf.dtype)
    full = buf.numel() // tile.numel()
    buf[: full * tile.numel()].view(full, tile.numel()).copy_(tile.expand(full, tile.numel()))
    buf[full * tile.numel():].copy_(tile[: buf.numel() - full * tile.numel()])


def _wrong(buf: torch.Tensor, period: torch.Tensor, offset: int = 0) -> int:
    """Elements of `buf` that differ from the repeated period. Compared in chunks, so the temporaries (the
    bool mask and the int64 copy sum() makes of it, memory.CHECK_CHUNK bytes at most) never grow with the
    buffer; the count stays on the device until the end (one synchronisation, not one per chunk)."""
    tile = torch.roll(period, -(offset % period.numel())).to(buf.dtype)
    full = buf.numel() // tile.numel()
    body = buf[: full * tile.numel()].view(full, tile.numel())
    rest = buf[full * tile.numel():]
    rows = max(1, CHECK_ELEMENTS // tile.numel())
    wrong = (rest != tile[: rest.numel()]).sum()
    for k in range(0, full, rows):
        wrong += (body[k:k + rows] != tile).sum()
    return int(wrong.item())


class Bench:
    """Buffers, the operation and its exact check for one collective, size and placement."""

    def __init__(self, ctx: RankContext, coll: str, lay: Layout, dtype: torch.dtype, inplace: bool) -> None:
        self.ctx, self.coll, self.lay, self.inplace = ctx, coll, lay, inplace
        n, r, dev = ctx.world_size, ctx.rank, ctx.device
        self.recv = torch.empty(lay.recv_count, dtype=dtype, device=dev)
        if inplace and coll == "all_gather":
            self.send = self.recv[r * lay.send_count:(r + 1) * lay.send_count]
        elif inplace and coll == "reduce_scatter":
            self.send = torch.empty(lay.send_count, dtype=dtype, device=dev)
            self.recv = self.send[r * lay.recv_count:(r + 1) * lay.recv_count]
        elif inplace:  # all_reduce, broadcast, reduce work on one buffer
            self.send = self.recv
        else:
            self.send = torch.empty(lay.send_count, dtype=dtype, device=dev)
        self.peer_next, self.peer_prev = (r + 1) % n, (r - 1) % n
        self.root = ctx.global_of(0)

    def op(self) -> None:
        c, g = self.coll, self.ctx.group
        if c == "all_reduce":
            dist.all_reduce(self.recv, group=g)
        elif c == "broadcast":
            dist.broadcast(self.recv, src=self.root, group=g)
        elif c == "reduce":
            dist.reduce(self.recv, dst=self.root, group=g)
        elif c == "all_gather":
            _all_gather(self.recv, self.send, group=g)
        elif c == "reduce_scatter":
            _reduce_scatter(self.recv, self.send, group=g)
        elif c == "alltoall":
            dist.all_to_all_single(self.recv, self.send, group=g)
        elif c == "sendrecv":
            to, frm = self.ctx.global_of(self.peer_next), self.ctx.global_of(self.peer_prev)
            ops = [dist.P2POp(dist.isend, self.send, to, group=g), dist.P2POp(dist.irecv, self.recv, frm, group=g)]
            for work in dist.batch_isend_irecv(ops):
                work.wait()
        else:
            raise ValueError(f"unknown collective {c!r}")

    def fill_random(self) -> None:
        self.send.uniform_()  # in place, in the buffer's dtype: no full-size fp32 temporary

    def fill_check(self, seed: int) -> None:
        ctx, c, r, n = self.ctx, self.coll, self.ctx.rank, self.ctx.world_size
        self.recv.zero_()
        if c in ("all_reduce", "reduce"):
            _fill(self.recv, _owned(ctx, seed)[0])
        elif c == "reduce_scatter":
            _fill(self.send, _owned(ctx, seed)[0])
        elif c == "broadcast" and r == 0:
            _fill(self.recv, _values(ctx, seed, 0))
        elif c in ("all_gather", "sendrecv"):
            _fill(self.send, _values(ctx, seed, r + 1))
        elif c == "alltoall":
            block = self.lay.param_count
            for dest in range(n):
                _fill(self.send[dest * block:(dest + 1) * block], _values(ctx, seed, r * n + dest + 1))

    def count_wrong(self, seed: int) -> int:
        ctx, c, r, n = self.ctx, self.coll, self.ctx.rank, self.ctx.world_size
        if c == "all_reduce" or c == "reduce" and r == 0:
            return _wrong(self.recv, _owned(ctx, seed)[1])
        if c == "reduce":
            return 0  # only the root's buffer is defined after a reduce
        if c == "reduce_scatter":
            return _wrong(self.recv, _owned(ctx, seed)[1], offset=r * self.lay.recv_count)
        if c == "broadcast":
            return _wrong(self.recv, _values(ctx, seed, 0))
        if c == "sendrecv":
            return _wrong(self.recv, _values(ctx, seed, self.peer_prev + 1))
        block = self.lay.param_count
        salts = {"all_gather": lambda s: s + 1, "alltoall": lambda s: s * n + r + 1}[c]
        return sum(_wrong(self.recv[s * block:(s + 1) * block], _values(ctx, seed, salts(s))) for s in range(n))


def _timed(ctx: RankContext, op: Callable[[], None], iters: int, graph_launches: int) -> tuple[float, list[float]]:
    """Seconds per op the nccl-tests way; per-iteration times (s) come along only on the CPU, where
    a timestamp costs nothing next to an op."""
    ctx.sync()
    _barrier(ctx)
    if graph_launches:
        graph = torch.cuda.CUDAGraph()
        # thread-local: NCCL's proxy thread may allocate while this thread captures (nccl-tests captures
        # with cudaStreamCaptureModeThreadLocal for that reason, common.cu)
        with torch.cuda.graph(graph, capture_error_mode="thread_local"):
            for _ in range(iters):
                op()
        ctx.sync()
        _barrier(ctx)
        start = time.perf_counter()
        for _ in range(graph_launches):
            graph.replay()
        ctx.sync()
        return (time.perf_counter() - start) / iters / graph_launches, []
    stamps = [time.perf_counter()]
    cpu = ctx.device.type == "cpu"
    for _ in range(iters):
        op()
        if cpu:
            stamps.append(time.perf_counter())
    ctx.sync()
    end = time.perf_counter()
    return (end - stamps[0]) / iters, [b - a for a, b in zip(stamps, stamps[1:])]


def _event_times(ctx: RankContext, op: Callable[[], None], iters: int) -> list[float]:
    """Per-iteration GPU times (s) from CUDA events, in a pass of its own (nccl-tests -I analogue)."""
    events = [torch.cuda.Event(enable_timing=True) for _ in range(iters + 1)]
    ctx.sync()
    _barrier(ctx)
    events[0].record()
    for k in range(iters):
        op()
        events[k + 1].record()
    ctx.sync()
    return [a.elapsed_time(b) / 1e3 for a, b in zip(events, events[1:])]


def _benches(ctx: RankContext, p: dict[str, Any]) -> Iterator[tuple[int, Layout, str, Bench]]:
    """(size asked for, its layout, placement, a fresh Bench) for every size and placement, out-of-place
    first as in nccl-tests. The caller drops each Bench before asking for the next (memory peak)."""
    coll, dtype = p["collective"], DTYPES[p["dtype"]]
    elt = torch.tensor([], dtype=dtype).element_size()
    for size in p["sizes"]:
        lay = layout(coll, size, elt, ctx.world_size)
        for placement in p["placements"]:
            yield size, lay, placement, Bench(ctx, coll, lay, dtype, inplace=placement == "in")


# Why a graph of RCCL collectives is refused, with where that is documented.
ROCM_GRAPH_REFUSAL = (
    "cuda_graph is refused on ROCm: capturing RCCL collectives in a HIP graph is not reliable (ROCm 7 "
    "rejects operations torch.distributed issues while a stream captures, 'operation not permitted when "
    "stream is capturing': ROCm/rccl #2022, ROCm/hip #3876; replaying captured CE collectives could hang: "
    "ROCm/rocm-systems #9334); run this check with cuda_graph: 0")


def refuse_graph_on_rocm(p: dict[str, Any]) -> None:
    """RuntimeError before anything is captured when a check asks for graph mode on a ROCm build of torch."""
    if p.get("cuda_graph") and getattr(torch.version, "hip", None):
        raise RuntimeError(ROCM_GRAPH_REFUSAL)


def collective(ctx: RankContext, p: dict[str, Any]) -> dict[str, Any]:
    refuse_graph_on_rocm(p)
    if p.get("tuning_pass"):
        return _tuning_pass(ctx, p)
    rows: list[dict[str, Any]] = []
    total = len(p.get("sizes") or ()) * len(p.get("placements") or ()) or "?"
    for size, lay, placement, bench in _benches(ctx, p):
        ctx.report(f"{format_size(size)} {placement}-place, {len(rows) + 1} of {total}")
        bench.fill_random()
        for _ in range(p["warmup"]):
            bench.op()
        seconds, per_iter = _timed(ctx, bench.op, p["iters"], p.get("cuda_graph", 0))
        # never beside a graph: an eager pass's spread is not the replays' (the suite turns it off; older params)
        if ctx.device.type == "cuda" and p.get("per_iteration", True) and not p.get("cuda_graph"):
            per_iter = _event_times(ctx, bench.op, p["iters"])
        counts = []
        for c in range(p["check_iters"]):
            seed = (p.get("seed", 0) * 7919 + size * 31 + c + 1) % 1_000_003
            bench.fill_check(seed)
            bench.op()
            if fault_here(ctx, p, "corrupt") and bench.recv.numel():
                bench.recv[bench.recv.numel() // 2] += 1  # test-only: one wrong element on this rank
            counts.append(bench.count_wrong(seed))
        # check_iters: 0 compared nothing: None (nccl-tests prints N/A), never a #wrong 0 that reads as clean
        rows.append({"size": lay.size, "count": lay.param_count, "bytes": lay.algbw_bytes, "placement": placement,
                     "seconds": seconds, "iter_seconds": per_iter, "wrong": sum(counts) if counts else None})
        del bench
    out: dict[str, Any] = {"rows": rows, "dtype": p["dtype"]}
    if ctx.nccl_log is not None:
        ctx.nccl_log.read(p["collective"])  # init lines (version, transports) written while this task connected
        out["nccl"] = ctx.nccl_log.summary()
    return out


def _tuning_pass(ctx: RankContext, p: dict[str, Any]) -> dict[str, Any]:
    """One untimed call per size and placement, in a pool whose NCCL logs its tuning choice per call:
    the algorithm/protocol label of each, read from the log right after the call that wrote it."""
    coll, log = p["collective"], ctx.nccl_log
    if log is not None:
        log.read(coll)  # whatever came before (init, earlier checks) is not this call's
    rows = []
    for _, lay, placement, bench in _benches(ctx, p):
        bench.op()
        ctx.sync()
        rows.append({"size": lay.size, "placement": placement, "algo": log.read(coll) if log else None})
        del bench
    if ctx.device.type == "cuda":
        torch.cuda.empty_cache()  # this pool idles beside the timed one: give its memory back
    return {"rows": rows, "nccl": log.summary() if log else None}
