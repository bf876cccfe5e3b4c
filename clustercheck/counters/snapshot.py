"""One node's snapshot: every reader at once. Taken on each node's first rank before and after a check
(`take(previous=before)` reads the kernel log from the earlier snapshot's cursor); `delta` and `judge`
run on the controller."""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from clustercheck.counters import kernel_log, nvml_counters, sysfs
from clustercheck.counters.facts import Counter, Gauge, Reading, ReadError, Snapshot


@dataclass(frozen=True)
class Sources:
    """Where the readers read; tests point them at copied trees and captured files."""

    pci: Path = sysfs.PCI
    ib: Path = sysfs.IB
    thermal: Path = sysfs.THERMAL
    cpus: Path = sysfs.CPUS
    cpuinfo: Path = sysfs.CPUINFO
    drm: Path = sysfs.DRM
    kmsg: Path = kernel_log.KMSG
    dmesg: tuple[str, ...] = ("dmesg", "-r")
    nvml: bool = True  # read GPU counters through pynvml


def take(previous: Snapshot | None = None, sources: Sources = Sources(), host: str | None = None) -> Snapshot:
    readers: list[Callable[[], Reading]] = [
        lambda: sysfs.aer(sources.pci), lambda: sysfs.ib(sources.ib), lambda: sysfs.thermal(sources.thermal),
        lambda: sysfs.cpu_mhz(sources.cpus, sources.cpuinfo), lambda: sysfs.cpu_throttle(sources.cpus),
        lambda: sysfs.amdgpu(sources.drm)]
    if sources.nvml:
        readers.append(nvml_counters.read)
    counters: list[Counter] = []
    gauges: list[Gauge] = []
    errors: list[ReadError] = []
    notes: list[str] = []
    for read in readers:
        r = read()
        counters += r.counters
        gauges += r.gauges
        errors += r.errors
        notes += r.notes
    if any(c.name == nvml_counters.PRESENT or c.name.startswith("amdgpu.") for c in counters):
        # one vendor's GPUs read: the other's "no GPU counters" is not a GPU of this node left unread
        notes = [n for n in notes if not n.startswith(sysfs.NO_GPU)]
    lines, cursor, log_errors = kernel_log.window(previous.cursor if previous else None, sources.kmsg, sources.dmesg)
    return Snapshot(host or socket.gethostname(), time.monotonic(), tuple(counters), tuple(gauges),
                    tuple(errors) + log_errors, tuple(notes), cursor, lines)


def rank_snapshot(ctx: Any, params: dict[str, Any]) -> dict[str, Any]:
    """Rank side (a `module:function` runner): the node's first rank takes the snapshot, reading the
    kernel log after `params["previous"][host]` (its node's last snapshot, as_dict; absent for the
    first); the others answer {}."""
    if ctx.local_rank != 0:
        return {}
    previous = (params.get("previous") or {}).get(ctx.host)
    snap = take(Snapshot.from_dict(previous) if previous else None, host=ctx.host)
    return {"snapshot": snap.as_dict()}
