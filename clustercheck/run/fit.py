"""Will a suite's buffers fit? Each measure kind says what its buffers need (`Kind.memory`, counted as its
rank-side code allocates them); here the session's refusal, before any rank starts, of a check that
cannot fit the GPUs' memory (NCCL) or the node's host memory (gloo, and host-side buffers).

Counted: the buffers a task allocates and holds at its peak, and the bounded comparison mask of the
correctness check. Not counted: the CUDA context, NCCL's or gloo's own buffers and the allocator's
rounding, which come on top; so a check refused here cannot run, and one accepted may still be tight."""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from clustercheck.errors import UserError
from clustercheck.kinds import KINDS
from clustercheck.kinds.base import CheckSpec
from clustercheck.units import format_size


def _gib(nbytes: int) -> str:
    return f"{nbytes / (1 << 30):.1f} GiB"


def needs(measure: str, params: Mapping[str, Any], n: int, backend: str) -> tuple[int, int, int]:
    """(peak bytes one rank holds in the memory it measures, peak host bytes of the whole node, the size
    that sets them) for a check of `measure` with `params` and `n` ranks per node: on a GPU under NCCL
    (p2p: what lands on one GPU), in host memory for every rank under gloo; 0 for kinds with no buffers
    of their own (probes, kinds that declare no need)."""
    kind = KINDS.get(measure)
    if kind is None or kind.memory is None:
        return 0, 0, 0
    return kind.memory(params, n, backend == "nccl")


def check_fits(checks: Iterable[CheckSpec], nranks_per_node: int, backend: str, device_bytes: int | None,
               host_bytes: int | None, device_where: str = "this node", host_where: str = "this node") -> None:
    """Refuse (UserError naming the check, its file:line, the size, the need and what is available)
    the first check whose buffers cannot fit: per GPU against `device_bytes` (NCCL), per node against
    `host_bytes` (the least of the run's nodes, read on each: `*_where` names the node that has it).
    None: that memory is unknown and not judged. GPU-only kinds are not judged on a gloo
    run, which skips them."""
    for check in checks:
        kind = KINDS.get(check.measure)
        if backend != "nccl" and kind is not None and kind.gpu_only:
            continue
        per_rank, host, size = needs(check.measure, check.params, nranks_per_node, backend)
        if backend == "nccl" and device_bytes is not None and per_rank > device_bytes:
            _refuse(check, size, f"{_gib(per_rank)} of memory on each GPU", f"a GPU of {device_where} has {_gib(device_bytes)} free",
                    "use smaller sizes")
        if host_bytes is not None and host > host_bytes:
            each = host // nranks_per_node
            _refuse(check, size, f"{_gib(host)} of host memory ({_gib(each)} per rank x {nranks_per_node} "
                                 f"ranks per node, {backend})", f"{host_where} has {_gib(host_bytes)} available",
                    "use smaller sizes or fewer ranks (--ranks)")


def _refuse(check: CheckSpec, size: int, need: str, available: str, advice: str) -> None:
    raise UserError(f"check {check.id}: {check.measure} of {format_size(size)} needs {need}, but {available}; "
                    f"{advice}", file=check.file, line=check.line)


def least(nodes: Mapping[str, Any], field: str) -> tuple[int | None, str]:
    """The least of a memory fact over the nodes (their Facts) that know it, and the node that has it: memory
    is read where the ranks run (the controller may be a login node with other memory and no GPU)."""
    known = {node: getattr(f, field) for node, f in nodes.items() if getattr(f, field) is not None}
    if not known:
        return None, ""
    node = min(known, key=known.__getitem__)
    return known[node], f"node {node}"
