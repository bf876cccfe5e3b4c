"""Rank-side measurements. Each task kind maps to a function run by every rank of a pool."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable

import torch


@dataclass(frozen=True)
class RankContext:
    """Where a rank stands. Inside a subgroup (a node, a node pair), `rank` and `world_size` are the
    group's; `global_of` maps a group rank back to the global rank torch's p2p and root arguments take."""

    rank: int
    world_size: int
    local_rank: int
    backend: str
    device: torch.device
    host: str
    group: Any = None
    nccl_log: Any = None  # NcclLog on NCCL ranks: what NCCL wrote to this rank's debug file
    bus_id: str = ""  # the PCI address of this rank's GPU (binding.bus_id); "" on CPU ranks
    progress: Any = None  # posts a short text the controller's live line shows (store key PROGRESS_KEY)

    def report(self, text: str) -> None:
        """Where a long task stands ("64MiB, size 5 of 9"), for the person watching; group rank 0 only."""
        if self.rank == 0 and self.progress is not None:
            try:
                self.progress(text)
            except Exception:  # never let the live line cost a measurement
                pass

    def global_of(self, group_rank: int) -> int:
        import torch.distributed as dist

        return group_rank if self.group is None else dist.get_global_rank(self.group, group_rank)

    def describe(self, facts: bool = False) -> dict[str, Any]:
        """Who this rank is; with `facts`, the node's first rank adds its node's platform facts (NVML,
        sysfs, and the GPUs torch sees), which the controller detects the platform from."""
        import os

        info: dict[str, Any] = {"rank": self.rank, "local_rank": self.local_rank, "host": self.host, "pid": os.getpid(),
                                "device": str(self.device), "backend": self.backend,
                                "torch": torch.__version__}
        if self.device.type == "cuda":
            from clustercheck.fabric.nccl_lib import version
            from clustercheck.measure.binding import locality, nvml_index

            where = locality(self.bus_id) if self.bus_id else None
            info.update(bus_id=self.bus_id, nvml_index=nvml_index(self.bus_id) if self.bus_id else None,
                        numa_node=where.numa_node if where else None)
            info["gpu"] = torch.cuda.get_device_name(self.device)
            info["cuda_reserved"] = torch.cuda.memory_reserved(self.device)  # what the caching allocator holds
            built = ".".join(map(str, torch.cuda.nccl.version()))
            info["nccl"] = version(built)  # the library that runs, which need not be torch's (fabric/nccl_lib.py)
            if info["nccl"] != built:
                info["nccl_torch_built"] = built
            info["cuda"] = torch.version.cuda
            hip = getattr(torch.version, "hip", None)  # a ROCm build: "nccl" above is RCCL's version
            if hip:
                info["hip"] = hip
        if facts and self.local_rank == 0:
            from clustercheck.judging.platform import read_facts

            info["facts"] = read_facts(torch_gpus=torch.cuda.device_count()).as_dict()
        return info

    @property
    def gpu(self) -> str:
        """This rank's GPU as a subject: `GPU<local rank>`, stable across runs; rows add its bus id."""
        return f"GPU{self.local_rank}"

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)


def cuda_bus_id(index: int) -> str:
    """The PCI address of CUDA device `index`; "" where torch's device properties lack CUDA's PCI ids
    (pci_domain_id/pci_bus_id/pci_device_id, present in torch 2.13, absent from its type stubs)."""
    from clustercheck.measure.binding import bus_id

    props = torch.cuda.get_device_properties(index)
    ids = [getattr(props, f"pci_{part}_id", None) for part in ("domain", "bus", "device")]
    domain, bus, device = ids
    if not (isinstance(domain, int) and isinstance(bus, int) and isinstance(device, int)):
        return ""
    return bus_id(domain, bus, device)


DELAY_SECONDS = 2.0


def fault_here(ctx: RankContext, params: dict[str, Any], kind: str) -> bool:
    """True when the controller asked this rank to fake `kind` (only with --cc-inject-fault)."""
    fault = params.get("fault")
    return fault is not None and fault["kind"] == kind and fault["rank"] == ctx.global_of(ctx.rank)  # a global rank


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
    fault = params.get("fault")
    if fault and fault["kind"] == "delay":  # every rank: a slow measurement that needs no CPU
        time.sleep(DELAY_SECONDS)


def probe(ctx: RankContext, params: dict[str, Any]) -> dict[str, Any]:
    """Run a system probe on the node's first rank; the others have nothing to add."""
    if ctx.local_rank != 0:
        return {}
    from clustercheck.probes import get, run_live

    outcome = run_live(get(params["probe"]), params["expect"])
    return {"outcome": outcome.outcome, "reason": outcome.reason, "host": ctx.host,
            "verdicts": [{"subject": v.subject, "what": v.what, "passed": v.passed, "judged": v.judged,
                          "detail": v.detail,
                          "measured": None if v.measured is None else str(v.measured),
                          "expected": None if v.expected is None else str(v.expected)} for v in outcome.verdicts]}


_GROUPS: dict[tuple[tuple[int, ...], ...], Any] = {}


def _in_group(ctx: RankContext, groups: list[list[int]] | None) -> RankContext | None:
    """This rank's context inside its group of `groups` (every rank creates every group, in the same
    order, as torch requires), its rank the group's as torch numbers it; None when this rank sits this
    task out."""
    import dataclasses

    import torch.distributed as dist

    if groups is None:
        return ctx
    key = tuple(tuple(g) for g in groups)
    if key not in _GROUPS:
        _GROUPS[key] = [dist.new_group(list(g)) for g in key]
    for ranks, group in zip(key, _GROUPS[key]):
        if ctx.rank in ranks:  # torch's place for it: new_group sorts the ranks it is given ([2, 0] is [0, 2])
            return dataclasses.replace(ctx, rank=dist.get_group_rank(group, ctx.rank), world_size=len(ranks),
                                       group=group)
    return None


_RUNNER = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*")


def runner_of(path: str) -> Callable[[RankContext, dict[str, Any]], dict[str, Any]]:
    """The rank-side function a measure kind names as "module:function" (checks.Kind.runner). Tasks
    come sealed with the pool's key, so only this run's controller can name one."""
    import importlib

    if not _RUNNER.fullmatch(path):
        raise ValueError(f"bad runner {path!r}: expected module:function")
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


def run_task(ctx: RankContext, task: dict[str, Any]) -> dict[str, Any]:
    op = task.get("op")
    params = task.get("params", {})
    sub = _in_group(ctx, task.get("groups"))
    if sub is None:
        return {"idle": True}
    ctx = sub
    if op == "ping":
        _inject(ctx, params)  # --cc-inject-fault facts:KIND: the pool that reads the nodes' facts
        return ctx.describe(facts=bool(params.get("facts")))
    path = task.get("runner")
    if not path:  # a task named by a built-in measure kind alone (tests, benchmarks)
        from clustercheck.kinds import KINDS

        if not isinstance(op, str) or op not in KINDS:
            raise ValueError(f"unknown task {op!r}")
        path, params = KINDS[op].runner, {**KINDS[op].extra, **params}
    runner = runner_of(path)
    _inject(ctx, params)
    return runner(ctx, params)
