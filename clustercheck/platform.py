"""Which platform is this? Facts read from the hardware (NVML), matched against each threshold
profile's `detect:` block: PCI device id, GPU count and active NVLinks, not the marketing name."""

from __future__ import annotations

import os
import platform as _platform
import socket
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from clustercheck.errors import UserError
from clustercheck.paths import display
from clustercheck.thresholds import Profile, load_profile


@dataclass(frozen=True)
class Facts:
    host: str
    gpu_count: int
    gpu_names: tuple[str, ...] = ()
    pci_device_ids: tuple[int, ...] = ()
    nvlinks_per_gpu: int | None = None
    driver: str | None = None
    cuda_driver: str | None = None
    nvml_status: str = ""
    cpu_count: int = 0
    os: str = ""
    versions: dict[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["pci_device_ids"] = [f"0x{i:04x}" for i in self.pci_device_ids]
        return d


def _versions() -> dict[str, str]:
    out = {"python": _platform.python_version()}
    for dist in ("clustercheck", "torch", "pytest", "nvidia-ml-py"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    return out


def read_facts() -> Facts:
    common = dict(host=socket.gethostname(), cpu_count=os.cpu_count() or 0,
                  os=f"{_platform.system()} {_platform.release()}", versions=_versions())
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception as exc:  # no driver, no library, no GPU: all mean "no NVIDIA GPU here"
        return Facts(gpu_count=0, nvml_status=f"NVML unavailable: {type(exc).__name__}", **common)
    try:
        count = pynvml.nvmlDeviceGetCount()
        names, ids, links = [], [], []
        for i in range(count):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            name = pynvml.nvmlDeviceGetName(h)
            names.append(name.decode() if isinstance(name, bytes) else name)
            ids.append(pynvml.nvmlDeviceGetPciInfo(h).pciDeviceId >> 16)
            links.append(_active_nvlinks(pynvml, h))
        cuda = pynvml.nvmlSystemGetCudaDriverVersion()
        driver = pynvml.nvmlSystemGetDriverVersion()
        return Facts(gpu_count=count, gpu_names=tuple(names), pci_device_ids=tuple(sorted(set(ids))),
                     nvlinks_per_gpu=min(links) if links else None,
                     driver=driver.decode() if isinstance(driver, bytes) else driver,
                     cuda_driver=f"{cuda // 1000}.{cuda % 1000 // 10}", nvml_status="ok", **common)
    finally:
        pynvml.nvmlShutdown()


def _active_nvlinks(pynvml: Any, handle: Any) -> int:
    active = 0
    for link in range(getattr(pynvml, "NVML_NVLINK_MAX_LINKS", 18)):
        try:
            if pynvml.nvmlDeviceGetNvLinkState(handle, link) == pynvml.NVML_FEATURE_ENABLED:
                active += 1
        except pynvml.NVMLError:
            continue  # NotSupported / InvalidArgument past the last link
    return active


def matches(profile: Profile, facts: Facts) -> bool:
    if not profile.detect:
        return False
    for key, want in profile.detect.items():
        have: object = getattr(facts, key)
        if key == "pci_device_ids":
            if not facts.pci_device_ids or not set(facts.pci_device_ids) <= set(want):  # type: ignore[arg-type]
                return False
        elif have != want:
            return False
    return True


def detect(directory: Path, facts: Facts) -> Profile:
    """The single profile whose detect block matches; a clear error when none or several do."""
    profiles = [load_profile(p, display(p)) for p in sorted(directory.glob("*.yaml"))]
    found = [p for p in profiles if matches(p, facts)]
    summary = (f"{facts.gpu_count} GPU(s) {', '.join(sorted(set(facts.gpu_names))) or ''} "
               f"pci ids {[f'0x{i:04x}' for i in facts.pci_device_ids]} nvlinks/GPU {facts.nvlinks_per_gpu}")
    if not found:
        raise UserError(f"no threshold profile in {directory} matches this machine ({summary.strip()}); "
                        f"pick one with --platform")
    if len(found) > 1:
        raise UserError(f"several profiles match this machine ({', '.join(p.name for p in found)}); "
                        f"pick one with --platform")
    return found[0]
