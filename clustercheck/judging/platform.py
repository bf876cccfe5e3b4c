"""Which platform is this? Facts read from the hardware (NVML, sysfs), matched against each threshold
profile's `detect:` block. The platform is named by PCI device id and its variant by the NVLinks a GPU
*has*, never by how many GPUs or links are up: a node with a GPU lost or a link down is still that
platform, and the versions and nvlink probes judge it failed (docs/design.md, "Platform facts")."""

from __future__ import annotations

import dataclasses
import os
import platform as _platform
import socket
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, Mapping

import hostlist

from clustercheck import nvml
from clustercheck.errors import UserError
from clustercheck.nvml import Gpu, NvmlFault
from clustercheck.judging.gpuless import DriverBroken, driver_fault
from clustercheck.fabric.pcibus import _pci_functions as _pci_functions, pci_read
from clustercheck.fabric.pcibus import pci_accelerators as pci_accelerators
from clustercheck.judging.profiles import SearchPath, as_search
from clustercheck.judging.thresholds import Profile


@dataclass(frozen=True)
class Facts:
    host: str
    gpu_count: int                       # GPUs NVML lists (nvmlDeviceGetCount), reachable or not; on ROCm
                                         # (no NVML) the GPUs HIP lists through torch
    gpu_names: tuple[str, ...] = ()
    pci_device_ids: tuple[int, ...] = ()
    nvlinks_per_gpu: int | None = None   # links a GPU has, up or down (the most any GPU here has)
    driver: str | None = None
    cuda_driver: str | None = None
    nvml_status: str = ""
    cpu_count: int = 0
    os: str = ""
    versions: dict[str, str] = field(default_factory=dict)
    # Accelerators seen on the PCI bus (sysfs), whatever their driver: an AMD or Intel Gaudi box, or NVIDIA
    # GPUs without a working driver, must not look like a CPU-only machine to detection.
    pci_accelerators: tuple[int, ...] = ()
    pci_gpus: tuple[str, ...] = ()       # bus ids of NVIDIA GPUs on the PCI bus: names a GPU NVML lost
    pci_problem: str = ""                # why the PCI bus could not be read ("": read): none seen is then no proof
    gpus: tuple[Gpu, ...] = ()
    nvml_faults: tuple[NvmlFault, ...] = ()
    torch_gpus: int | None = None        # devices torch sees: read on the ranks, and wherever torch is ROCm's
    hip: str | None = None               # torch.version.hip where torch is a ROCm build: RCCL behind "nccl"
    host_memory: int | None = None       # bytes a run can allocate now (MemAvailable)
    gpu_memory_free: int | None = None   # the least free bytes of this node's GPUs (NVML); None without
    identity: dict[str, Any] = field(default_factory=dict)  # serials, UUIDs, GUIDs for evidence (judging/identity.py)
    # RDMA ports, the GPU nearest each NIC and NVMe drive with the PCIe path to it, GPUDirect RDMA
    # (fabric/rdma.py NetFacts.as_dict); a sysfs tree that cannot be read or contradicts itself is a problem here
    network: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["pci_device_ids"] = [f"0x{i:04x}" for i in self.pci_device_ids]
        d["pci_accelerators"] = [f"0x{i:04x}" for i in self.pci_accelerators]
        for gpu in d["gpus"]:
            gpu["device_id"] = None if gpu["device_id"] is None else f"0x{gpu['device_id']:04x}"
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Facts:
        """The inverse of `as_dict` (facts a rank read on its node)."""
        def ids(values: Any) -> tuple[int, ...]:
            return tuple(int(v, 16) if isinstance(v, str) else int(v) for v in values or ())

        gpus = tuple(Gpu(**{**g, "device_id": ids([g["device_id"]])[0] if g.get("device_id") else None})
                     for g in d.get("gpus") or ())
        return cls(**{**d, "gpu_names": tuple(d.get("gpu_names") or ()), "pci_device_ids": ids(d.get("pci_device_ids")),
                      "pci_accelerators": ids(d.get("pci_accelerators")), "pci_gpus": tuple(d.get("pci_gpus") or ()),
                      "gpus": gpus, "nvml_faults": tuple(NvmlFault(**f) for f in d.get("nvml_faults") or ()),
                      "versions": dict(d.get("versions") or {})})

    @property
    def accelerator_count(self) -> int:
        """GPUs by NVML, on the PCI bus or seen by torch, whichever says most."""
        return max(self.gpu_count, len(self.pci_accelerators), self.torch_gpus or 0)

    @property
    def usable_gpus(self) -> int:
        """GPUs a rank can bind: torch's count where a rank read it, else NVML's."""
        return self.gpu_count if self.torch_gpus is None else self.torch_gpus

    @property
    def device_ids(self) -> tuple[int, ...]:
        return self.pci_device_ids or tuple(sorted(set(self.pci_accelerators)))


def _versions() -> dict[str, str]:
    out = {"python": _platform.python_version()}
    for dist in ("clustercheck", "torch", "pytest", "nvidia-ml-py"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    return out


_AMD = 0x1002


def _rocm_torch(torch_gpus: int | None, functions: list[tuple[str, int, int]]) -> tuple[int | None, str | None]:
    """(GPUs HIP sees, torch.version.hip) where torch is a ROCm build, else (torch_gpus, None). NVML cannot
    see AMD GPUs, so on ROCm torch is the only library that counts them (torch.cuda is HIP there, and
    its "nccl" backend is RCCL). torch is imported only where it may be ROCm's: an AMD accelerator on the
    PCI bus, a ROCm wheel (version "+rocm..."), or torch already loaded; NVIDIA and CPU machines pay nothing."""
    import sys
    from importlib import metadata

    try:
        wheel = metadata.version("torch")
    except metadata.PackageNotFoundError:
        return torch_gpus, None
    if not ("torch" in sys.modules or "rocm" in wheel or any(vendor == _AMD for _, vendor, _ in functions)):
        return torch_gpus, None
    import torch

    hip = getattr(torch.version, "hip", None)
    if not hip:
        return torch_gpus, None
    return (torch.cuda.device_count() if torch_gpus is None else torch_gpus), str(hip)


def read_facts(torch_gpus: int | None = None, pci_root: Path = Path("/sys/bus/pci/devices")) -> Facts:
    """This machine's facts. Never raises for the hardware's sake: a GPU NVML cannot reach is an
    `nvml_faults` entry, NVML missing altogether is `nvml_status`. Where NVML lists no GPU and torch is a
    ROCm build, HIP's count (through torch) is the GPU count and `hip` names the build."""
    functions, problem = pci_read(pci_root)
    base = dataclasses.replace(_read_nvml(torch_gpus, functions), pci_problem=problem)
    if base.gpu_count:
        return base
    counted, hip = _rocm_torch(torch_gpus, functions)
    if hip is None:
        return base
    return dataclasses.replace(base, gpu_count=counted or 0, torch_gpus=counted, hip=hip)


def _read_nvml(torch_gpus: int | None, functions: list[tuple[str, int, int]]) -> Facts:
    from clustercheck.judging.identity import read_identity

    base = Facts(host=socket.gethostname(), gpu_count=0, cpu_count=os.cpu_count() or 0,
                 os=f"{_platform.system()} {_platform.release()}", versions=_versions(),
                 pci_accelerators=tuple(device for _, _, device in functions),
                 pci_gpus=tuple(bus for bus, vendor, _ in functions if vendor == 0x10DE), torch_gpus=torch_gpus,
                 host_memory=host_available(), identity=read_identity(), network=_network())
    try:
        import pynvml
    except ImportError:
        return dataclasses.replace(base, nvml_status="NVML unavailable: pynvml is not installed")
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # no driver, no library, no GPU: NVML sees nothing (PCI and torch may)
        return dataclasses.replace(base, nvml_status=f"NVML unavailable: {nvml.error_name(pynvml, exc)}")
    try:
        got = nvml.read(pynvml)
    finally:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass  # what was read stands
    links = [g.nvlinks for g in got.gpus if g.nvlinks is not None]
    return dataclasses.replace(
        base, gpu_count=got.count, gpu_names=tuple(g.name for g in got.gpus),
        pci_device_ids=tuple(sorted({g.device_id for g in got.gpus if g.device_id is not None})),
        nvlinks_per_gpu=max(links) if links else None, driver=got.driver, cuda_driver=got.cuda_driver,
        gpus=got.gpus, nvml_faults=got.faults, gpu_memory_free=device_available(),
        nvml_status="ok" if not got.faults else f"{len(got.faults)} NVML call(s) failed")


def _network() -> dict[str, Any]:
    """The node's network facts (fabric/rdma.py); a reader that breaks is a problem on the node, not a crash."""
    from clustercheck.fabric import rdma

    try:
        return rdma.read().as_dict()
    except Exception as exc:  # the reader never raises for the hardware's sake; this is its own bug
        said = f"the network facts could not be read: {type(exc).__name__}: {exc}"
        return {"problems": [rdma.Problem(None, said, unread=True, nic=False).as_dict()]}  # as NetFacts.as_dict


def matches(profile: Profile, facts: Facts) -> bool:
    """The platform by PCI device id and its variant by the NVLinks a GPU has. The profile's gpu_count is
    the most GPUs a node of it holds: fewer is that platform with GPUs missing (the versions probe fails
    it), so only a profile without device ids (cpu) needs the exact count."""
    detect = profile.detect
    if not detect:
        return False
    count, want_count = facts.accelerator_count, detect.get("gpu_count")
    ids = detect.get("pci_device_ids")
    if isinstance(ids, tuple):
        if not facts.device_ids or not set(facts.device_ids) <= set(ids):
            return False
        if isinstance(want_count, int) and not 0 < count <= want_count:
            return False
    elif want_count is not None and count != want_count:
        return False
    elif want_count == 0 and _driver_fault(facts):  # no GPU seen is no proof where NVML says a driver fails
        return False
    links = detect.get("nvlinks_per_gpu")
    if links is None:
        return True
    if isinstance(links, int) and links > 0 and count == 0:  # NVLinks need a GPU to hang off
        return False
    if facts.nvlinks_per_gpu is None:
        # links unknown (NVML down): a device id names the platform, and the probes fail the node; without
        # one nothing does, and unknown is no match (fail closed: never the profile whose limits are looser)
        return isinstance(ids, tuple)
    if isinstance(ids, tuple) and isinstance(links, int) and facts.nvlinks_per_gpu < links:
        # an SXM part's NVLinks are built into its board: fewer (NVLink disabled, links NVML reports absent)
        # is that board with links gone, as fewer GPUs is, and its nvlink probe fails each GPU; never a
        # "-nvl0" platform judged at PCIe speed
        from clustercheck.judging.derive import integral_nvlink

        return integral_nvlink(ids) > 0
    return facts.nvlinks_per_gpu == links


class AmbiguousPlatform(UserError):
    """Several profiles match a node equally well."""


def _first_directory(found: list[Profile], search: SearchPath) -> list[Profile]:
    """The matches from the earliest directory on the search path that has any: a profile the user
    gives (--thresholds, $CLUSTERCHECK_THRESHOLDS) for this machine wins over a shipped one that also
    matches, as a same-named one hides ours."""
    tiers = search.tiers()
    first = min((tiers.get(p.name, len(search.dirs)) for p in found), default=0)
    return [p for p in found if tiers.get(p.name, len(search.dirs)) == first]


def _closest(found: list[Profile], facts: Facts) -> list[Profile]:
    """Of several matches, the ones whose gpu_count is nearest above this node's count (an HGX 4-GPU
    profile beside the 8-GPU one of the same GPU)."""
    counts = [p.detect.get("gpu_count") for p in found]
    if len(found) < 2 or not all(isinstance(c, int) for c in counts):
        return found
    best = min(c for c in counts if isinstance(c, int))
    return [p for p, c in zip(found, counts) if c == best]


def detect(where: SearchPath | Path, facts: Facts, profiles: list[Profile] | None = None,
           node: str = "this machine") -> Profile:
    """The single hand-written profile whose detect block matches; else the profile derived from the spec
    table for this GPU model and count (a node with 4 L40S, say); a clear error when none or several do.
    A model with a hand-written profile is judged by it: fewer GPUs than it holds is a broken node (7 of
    8), so a genuinely smaller board is named with --platform (e.g. h100-sxm-4x, a derived profile)."""
    search = as_search(where)
    found = [p for p in (profiles if profiles is not None else search.profiles()) if matches(p, facts)]
    found = _closest(_first_directory(found, search), facts)
    if not found:
        derived = _derived(facts)
        if derived is not None:
            return derived
        fault = _driver_fault(facts) if not facts.accelerator_count else None
        if fault:
            pci = f" ({facts.pci_problem})" if facts.pci_problem else ""
            raise DriverBroken(f"{node} is no CPU-only machine: no GPU seen{pci}, but NVML answers as only a present, "
                               f"failing NVIDIA driver does: {fault}; fix the driver (nvidia-smi, dmesg): nothing "
                               f"was measured and the node is not cleared")
        raise UserError(f"no threshold profile in {search.describe()} matches {node} ({describe(facts).strip()}); "
                        f"pick one with --platform")
    if len(found) > 1:
        raise AmbiguousPlatform(f"several profiles match {node} ({', '.join(p.name for p in found)}); "
                                f"pick one with --platform")
    return found[0]


def _driver_fault(facts: Facts) -> str | None:
    return driver_fault(facts.nvml_status, facts.gpu_count, tuple(f.text() for f in facts.nvml_faults))


def _derived(facts: Facts) -> Profile | None:
    from clustercheck.judging.derive import derived_profile, integral_nvlink

    ids = set(facts.device_ids)
    if len(ids) != 1 or not facts.accelerator_count:
        return None
    links = facts.nvlinks_per_gpu
    if links is not None and links < integral_nvlink(tuple(ids)):
        links = None  # fewer than its board has: the usual board's profile, whose nvlink probe fails it (matches)
    return derived_profile(ids.pop(), facts.accelerator_count, links)


def detect_nodes(where: SearchPath | Path, nodes: Mapping[str, Facts]) -> Profile:
    """The one profile every node matches. One line naming the nodes when some match none or when
    they match different platforms: a mixed allocation is not one run's platform."""
    search = as_search(where)
    profiles = search.profiles()
    by_profile: dict[str, list[str]] = {}
    chosen: dict[str, Profile] = {}
    unmatched: dict[str, list[str]] = {}
    for node, facts in nodes.items():
        try:
            profile = detect(search, facts, profiles, node=node)
        except AmbiguousPlatform:
            raise
        except UserError:
            unmatched.setdefault(describe(facts).strip(), []).append(node)
            continue
        by_profile.setdefault(profile.name, []).append(node)
        chosen[profile.name] = profile
    if unmatched:
        listed = "; ".join(f"{hostlist.collect_hostlist(n)} ({why})" for why, n in unmatched.items())
        raise UserError(f"no threshold profile in {search.describe()} matches node(s) {listed}; pick one with --platform")
    if len(by_profile) > 1:
        listed = "; ".join(f"{name} on {hostlist.collect_hostlist(n)}" for name, n in by_profile.items())
        raise UserError(f"the nodes disagree on the platform: {listed}; run each platform on its own "
                        f"(--hosts or a Slurm partition of one kind) or name one with --platform")
    (profile,) = chosen.values()
    return profile


def layout(backend: str, ranks: int | None, nodes: Mapping[str, Facts]) -> tuple[str, int]:
    """The backend and ranks per node for `--backend` (auto, nccl, gloo) and `--ranks`. NCCL wherever the
    nodes' ranks see GPUs (never gloo for a GPU cluster read from a GPU-less head node); one rank per
    GPU, as many as the node with the fewest has."""
    usable = {node: f.usable_gpus for node, f in nodes.items()}
    if backend == "auto":
        backend = "nccl" if any(usable.values()) else "gloo"
    if ranks:
        return backend, ranks
    if backend != "nccl" or not any(usable.values()):
        return backend, 2
    blind = [n for n, count in usable.items() if count == 0]
    if blind:
        raise UserError(f"CUDA sees no GPU on node(s) {hostlist.collect_hostlist(blind)} while the others "
                        f"see {max(usable.values())}: NCCL ranks cannot start there; fix the node or leave it out")
    return backend, min(usable.values())


def short_nodes(nodes: Mapping[str, Facts], per_node: int) -> dict[str, tuple[int, int]]:
    """node -> (GPUs its ranks see, the most any node of the run has) for the nodes that set the
    ranks per node below what the others could run: a node with a GPU missing. The others' extra GPUs
    go unmeasured because of it, so it must fail (and be excluded), never pass in silence."""
    usable = {node: f.usable_gpus for node, f in nodes.items()}
    most = max(usable.values(), default=0)
    if most <= per_node:
        return {}
    return {node: (count, most) for node, count in usable.items() if count < most}


def describe(facts: Facts) -> str:
    """The facts detection uses, in one line (printed and recorded with the chosen profile)."""
    names = ", ".join(sorted(set(facts.gpu_names)))
    faults = f", {len(facts.nvml_faults)} NVML error(s)" if facts.nvml_faults else ""
    status = f", {facts.nvml_status}" if facts.nvml_status.startswith("NVML unavailable") and facts.pci_gpus else ""
    status += f", {facts.pci_problem}" if facts.pci_problem else ""
    return (f"{facts.accelerator_count} GPU(s){' ' + names if names else ''}, "
            f"pci ids {[f'0x{i:04x}' for i in facts.device_ids]}, nvlinks/GPU {facts.nvlinks_per_gpu}{faults}{status}")


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
