"""Will a suite's buffers fit? Each measure kind's peak buffer bytes, counted as its rank-side code
allocates them (measure/collectives.py, measure/copies.py), and the refusal the session raises before
any rank starts when a check cannot fit the GPUs' memory (NCCL) or the node's host memory (gloo, and
host-side buffers). No torch here.

Counted: the buffers a task allocates and holds at its peak, and the bounded comparison mask of the
correctness check. Not counted: the CUDA context, NCCL's or gloo's own buffers and the allocator's
rounding, which come on top; so a check refused here cannot run, and one accepted may still be tight."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from clustercheck.errors import UserError
from clustercheck.formulas import PLACEMENTS, layout
from clustercheck.params import DTYPES

# A correctness check (collectives._wrong) compares a chunk at a time: a bool mask of the chunk, and the
# int64 copy of it that sum() makes before reducing (measured on an H100: 144 MiB over a 256 MiB buffer
# with 16 Mi-element chunks, docs/validation/2026-11-25-h100-sxm.md): 9 bytes an element, 16 MiB at most.
CHECK_BYTES_PER_ELEMENT = 9
CHECK_CHUNK = 16 << 20  # bytes of those temporaries at most
CHECK_ELEMENTS = CHECK_CHUNK // CHECK_BYTES_PER_ELEMENT  # elements compared at once


def check_temporaries(count: int) -> int:
    """Bytes the correctness check of a `count`-element buffer holds beside it."""
    return min(count, CHECK_ELEMENTS) * CHECK_BYTES_PER_ELEMENT


def _gib(nbytes: int) -> str:
    return f"{nbytes / (1 << 30):.1f} GiB"


# A kind's need: (bytes per rank in the memory it measures, host bytes per node, the size that sets it),
# from its parameters, the ranks per node and whether the ranks are on GPUs. checks.Kind.memory holds one.
Need = Callable[[Mapping[str, Any], int, bool], "tuple[int, int, int]"]


def _device(per_rank: int, size: int, n: int, gpu: bool) -> tuple[int, int, int]:
    """Buffers on the rank's device: on a GPU, no host memory; on a CPU rank, host memory for every rank."""
    return per_rank, 0 if gpu else per_rank * n, size


def collective(measure: str, in_place_send: bool = False) -> Need:
    """One Bench at a time, as collectives.collective builds them: out of place a send and a receive
    buffer, in place one buffer (the send buffer where the collective works in it: reduce_scatter's
    in-place send holds the receive slice), plus the bounded comparison mask of the correctness check."""
    def need(params: Mapping[str, Any], n: int, gpu: bool) -> tuple[int, int, int]:
        elt = DTYPES[params.get("dtype", "float32")]
        peak, at = 0, 0
        for size in params["sizes"]:
            lay = layout(measure, size, elt, n)
            for placement in params.get("placements", PLACEMENTS[measure]):
                if placement == "out":
                    count = lay.send_count + lay.recv_count
                elif in_place_send:
                    count = lay.send_count
                else:
                    count = lay.recv_count
                bytes_ = count * elt + check_temporaries(max(lay.send_count, lay.recv_count))
                if bytes_ > peak:
                    peak, at = bytes_, size
        return _device(peak, at, n, gpu)
    return need


def host_memory(params: Mapping[str, Any], n: int, gpu: bool) -> tuple[int, int, int]:
    size = params["size"]  # src and dst on the host, allocated by every rank at once
    return 2 * size, 2 * size * n, size


def host_device(params: Mapping[str, Any], n: int, gpu: bool) -> tuple[int, int, int]:
    size = params["size"]  # the device buffer, and its pinned twin on the host
    return size, size * n, size


def device_memory(params: Mapping[str, Any], n: int, gpu: bool) -> tuple[int, int, int]:
    return _device(2 * params["size"], params["size"], n, gpu)


def p2p(params: Mapping[str, Any], n: int, gpu: bool) -> tuple[int, int, int]:
    return _device(n * params["size"], params["size"], n, gpu)  # its source and one target per other rank


def gemm(params: Mapping[str, Any], n: int, gpu: bool) -> tuple[int, int, int]:
    dtype = params.get("dtype", "auto")  # a, b and c in their own dtype; auto is bf16 on GPUs, fp32 on CPUs
    size = params["m"] ** 2 * (DTYPES[dtype] if dtype != "auto" else (2 if gpu else 4))
    return _device(3 * size, size, n, gpu)


def nccl_tests(params: Mapping[str, Any], n: int, gpu: bool) -> tuple[int, int, int]:
    """The tool's own send and receive buffers at max_bytes on each GPU (none of ours on a CPU run)."""
    size = params["max_bytes"]
    return (2 * size, 0, size) if gpu else (0, 0, size)


def _needs(measure: str, params: Mapping[str, Any], n: int, backend: str) -> tuple[int, int, int]:
    from clustercheck.checks import KINDS

    kind = KINDS.get(measure)
    if kind is None or kind.memory is None:  # probes and kinds that allocate nothing of their own
        return 0, 0, 0
    return kind.memory(params, n, backend == "nccl")


def memory_need(measure: str, params: Mapping[str, Any], nranks_per_node: int, backend: str = "nccl") -> int:
    """Peak bytes one rank's task holds in the memory it measures: its GPU under NCCL (p2p: what lands
    on one GPU, its own source and one target buffer from each other rank), host memory on a CPU
    rank. 0 for kinds with no buffers of their own (probes, kinds that declare no need)."""
    return _needs(measure, params, nranks_per_node, backend)[0]


def host_need(measure: str, params: Mapping[str, Any], nranks_per_node: int, backend: str = "nccl") -> int:
    """Peak host bytes of the whole node for this check: every rank's buffers under gloo; under NCCL the
    host-side ones only (host_device's pinned buffer, host_memory's pair)."""
    return _needs(measure, params, nranks_per_node, backend)[1]


def check_fits(checks: Iterable[Any], nranks_per_node: int, backend: str, device_bytes: int | None,
               host_bytes: int | None, device_where: str = "this node", host_where: str = "this node") -> None:
    """Refuse (UserError naming the check, its file:line, the size, the need and what is available)
    the first check whose buffers cannot fit: per GPU against `device_bytes` (NCCL), per node against
    `host_bytes` (the least of the run's nodes, read on each: `*_where` names the node that has it).
    None: that memory is unknown and not judged. GPU-only kinds are not judged on a gloo
    run, which skips them. `checks`: suite.CheckSpec (id, measure, params, file, line)."""
    from clustercheck.checks import KINDS

    for check in checks:
        kind = KINDS.get(check.measure)
        if backend != "nccl" and kind is not None and kind.gpu_only:
            continue
        per_rank, host, size = _needs(check.measure, check.params, nranks_per_node, backend)
        if backend == "nccl" and device_bytes is not None and per_rank > device_bytes:
            _refuse(check, size, f"{_gib(per_rank)} of memory on each GPU", f"a GPU of {device_where} has {_gib(device_bytes)} free",
                    "use smaller sizes")
        if host_bytes is not None and host > host_bytes:
            each = host // nranks_per_node
            _refuse(check, size, f"{_gib(host)} of host memory ({_gib(each)} per rank x {nranks_per_node} "
                                 f"ranks per node, {backend})", f"{host_where} has {_gib(host_bytes)} available",
                    "use smaller sizes or fewer ranks (--ranks)")


def _refuse(check: Any, size: int, need: str, available: str, advice: str) -> None:
    from clustercheck.units import format_size

    raise UserError(f"check {check.id}: {check.measure} of {format_size(size)} needs {need}, but {available}; "
                    f"{advice}", file=check.file, line=check.line)


def host_available(meminfo: Path = Path("/proc/meminfo")) -> int | None:
    """Host memory a run can use now: MemAvailable (Linux's estimate of what can be allocated without
    swapping, Documentation/filesystems/proc.rst), else all physical memory; None when unknown."""
    try:
        for line in meminfo.read_text().splitlines():
            name, _, value = line.partition(":")
            if name == "MemAvailable":
                return int(value.split()[0]) * 1024  # kB
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return None


def device_available() -> int | None:
    """The least free memory of this machine's GPUs (NVML), None without NVML or GPUs. Read where the
    ranks run: a controller without GPUs has nothing to say about the nodes'."""
    try:
        import pynvml

        pynvml.nvmlInit()
        free = [int(pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(i)).free)
                for i in range(pynvml.nvmlDeviceGetCount())]
    except Exception:
        return None
    return min(free) if free else None
