"""Which GPU a rank uses and where that GPU sits, from CUDA's view of the devices (no torch here).

NVML numbers every GPU of the machine and ignores CUDA_VISIBLE_DEVICES; CUDA numbers only the visible
ones. A rank therefore picks its device by CUDA's count, and names the physical GPU by its PCI bus id,
which both CUDA (`cudaDeviceProp.pciDomainID/pciBusID/pciDeviceID`) and NVML
(`nvmlDeviceGetHandleByPciBusId`) understand. The GPU's NUMA node and CPUs come from sysfs
(`/sys/bus/pci/devices/<bdf>/numa_node`, `local_cpulist`; Linux Documentation/ABI/testing/sysfs-bus-pci),
which needs no vendor library: it places AMD GPUs alike. On ROCm, torch.cuda is HIP (its device properties
carry the same PCI ids, from hipDeviceProp_t) and HIP honours CUDA_VISIBLE_DEVICES; NVML knows no AMD GPU, so
`nvml_index` and `nvml_cpus` answer None and nothing, and sysfs alone places the rank."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from clustercheck.errors import UserError

_BDF = re.compile(r"[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]")


def device_index(visible: str | None, local_rank: int, count: int) -> int:
    """The CUDA device a rank binds to. `visible`: its CUDA_VISIBLE_DEVICES (None: unset); `count`:
    torch.cuda.device_count() in the rank. UserError naming the variable and the count when the rank's
    GPU is not visible."""
    shown = "unset" if visible is None else repr(visible)
    if count <= 0:
        raise UserError(f"local rank {local_rank}: CUDA sees no GPU (CUDA_VISIBLE_DEVICES={shown})")
    if local_rank < count:
        return local_rank
    raise UserError(f"local rank {local_rank} needs CUDA device {local_rank}, but CUDA sees {count} GPU"
                    f"{'s' if count != 1 else ''} (CUDA_VISIBLE_DEVICES={shown}): run at most {count} ranks "
                    f"per node (--ranks {count}) or make the node's GPUs visible")


def bus_id(domain: int, bus: int, device: int, function: int = 0) -> str:
    """The PCI address as sysfs and `lspci -D` write it, e.g. 0000:1b:00.0 (torch/numa/binding.py
    builds it the same way from torch.cuda.get_device_properties; a GPU is function 0)."""
    return f"{domain:04x}:{bus:02x}:{device:02x}.{function}"


def parse_cpulist(text: str) -> frozenset[int]:
    """A kernel CPU list ("0-3,8-11", "5", ""), Documentation/admin-guide/cputopology.rst."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return frozenset(cpus)


@dataclass(frozen=True)
class Locality:
    """Where a PCI device sits: its NUMA node (None where the kernel says -1: one node, or unknown) and
    the CPUs closest to it (empty when sysfs names none)."""

    bus_id: str
    numa_node: int | None
    cpus: frozenset[int]


def locality(bdf: str, sys_root: Path = Path("/sys")) -> Locality | None:
    """The NUMA node and local CPUs of PCI device `bdf` from sysfs; None when there is no such device."""
    bdf = bdf.lower()
    if not _BDF.fullmatch(bdf):  # it names a directory: refuse anything that is not an address
        raise ValueError(f"not a PCI address: {bdf!r} (expected domain:bus:device.function, e.g. 0000:1b:00.0)")
    if len(bdf.split(":")[0]) == 8:  # NVML's form (00000000:1B:00.0); sysfs uses a 4-digit domain
        bdf = bdf[4:]
    where = sys_root / "bus" / "pci" / "devices" / bdf
    if not where.is_dir():
        return None
    node = _read(where / "numa_node")
    cpus = _read(where / "local_cpulist")
    numa = int(node) if node and node.lstrip("-").isdigit() else -1
    return Locality(bdf, numa if numa >= 0 else None, parse_cpulist(cpus or ""))


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def nvml_index(bdf: str) -> int | None:
    """NVML's index of the GPU at `bdf` (the index nvidia-smi and the probes show); None without NVML."""
    try:
        import pynvml

        pynvml.nvmlInit()
        return int(pynvml.nvmlDeviceGetIndex(pynvml.nvmlDeviceGetHandleByPciBusId(bdf)))
    except Exception:  # no pynvml, no driver, or NVML does not know the address
        return None


def nvml_cpus(bdf: str) -> frozenset[int]:
    """The CPUs NVML names as close to the GPU at `bdf` (where sysfs names none); empty without NVML."""
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByPciBusId(bdf)
        words = pynvml.nvmlDeviceGetCpuAffinity(handle, ((os.cpu_count() or 64) + 63) // 64)
    except Exception:
        return frozenset()
    return frozenset(w * 64 + b for w, word in enumerate(words) for b in range(64) if word >> b & 1)


def gpu_cpus(bdf: str, sys_root: Path = Path("/sys")) -> frozenset[int]:
    """The CPUs to run on for the GPU at `bdf`: sysfs's local CPUs, else NVML's; empty when neither says."""
    where = locality(bdf, sys_root)
    return where.cpus if where is not None and where.cpus else nvml_cpus(bdf)
