"""Rank-side measurements. Each task kind maps to a function run by every rank of a pool."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch


@dataclass(frozen=True)
class RankContext:
    rank: int
    world_size: int
    local_rank: int
    backend: str
    device: torch.device
    host: str

    def describe(self) -> dict[str, Any]:
        import os

        info: dict[str, Any] = {"rank": self.rank, "host": self.host, "pid": os.getpid(),
                                "device": str(self.device), "backend": self.backend,
                                "torch": torch.__version__}
        if self.device.type == "cuda":
            info["gpu"] = torch.cuda.get_device_name(self.device)
            info["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
            info["cuda"] = torch.version.cuda
        return info

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)


COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "alltoall", "broadcast", "reduce", "sendrecv")


def fault_here(ctx: RankContext, params: dict[str, Any], kind: str) -> bool:
    """True when the controller asked this rank to fake `kind` (only with --cc-inject-fault)."""
    fault = params.get("fault")
    return bool(fault) and fault["kind"] == kind and fault["rank"] == ctx.rank


def _inject(ctx: RankContext, params: dict[str, Any]) -> None:
    import os
    import signal
    import time

    if fault_here(ctx, params, "crash"):
        os.kill(os.getpid(), signal.SIGKILL)
    if fault_here(ctx, params, "hang"):
        print(f"rank {ctx.rank}: injected hang", flush=True)
        while True:
            time.sleep(3600)
    if fault_here(ctx, params, "raise"):
        raise RuntimeError("injected fault")


def _probe(ctx: RankContext, params: dict[str, Any]) -> dict[str, Any]:
    """Run a system probe on the node's first rank; the others have nothing to add."""
    if ctx.local_rank != 0:
        return {}
    from clustercheck.probes import get, run_live

    outcome = run_live(get(params["probe"]), params["expect"])
    return {"outcome": outcome.outcome, "reason": outcome.reason, "host": ctx.host,
            "verdicts": [{"subject": v.subject, "what": v.what, "passed": v.passed, "detail": v.detail,
                          "measured": None if v.measured is None else str(v.measured),
                          "expected": None if v.expected is None else str(v.expected)} for v in outcome.verdicts]}


def run_task(ctx: RankContext, task: dict[str, Any]) -> dict[str, Any]:
    from clustercheck.measure import collectives

    from clustercheck.measure import copies

    runners: dict[str, Callable[[RankContext, dict[str, Any]], dict[str, Any]]] = {
        "ping": lambda c, p: c.describe(),
        "host_device": copies.host_device, "device_memory": copies.device_memory,
        "host_memory": copies.host_memory, "gemm": copies.gemm, "p2p": copies.p2p,
        "probe": _probe,
    }
    op = task.get("op")
    params = task.get("params", {})
    if op in COLLECTIVES:
        runner, params = collectives.collective, {**params, "collective": op}
    elif op in runners:
        runner = runners[op]
    else:
        raise ValueError(f"unknown task {op!r}")
    _inject(ctx, params)
    return runner(ctx, params)
