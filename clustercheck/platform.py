"""Which platform is this? Facts read from the hardware (NVML), matched against each threshold
profile's `detect:` block: PCI device id, GPU count and active NVLinks, not the marketing name."""

from __future__ import annotations

import dataclasses

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
    # Accelerators seen on the PCI bus (sysfs), whatever their driver: an AMD or Intel Gaudi box, or NVIDIA
    # GPUs without a working driver, must not look like a CPU-only machine to detection.
    pci_accelerators: tuple[int, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["pci_device_ids"] = [f"0x{i:04x}" for i in self.pci_device_ids]
        d["pci_accelerators"] = [f"0x{i:04x}" for i in self.pci_accelerators]
        return d

    @property
    def accelerator_count(self) -> int:
        """GPUs by NVML, else accelerators on the PCI bus."""
        return self.gpu_count or len(self.pci_accelerators)

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


# PCI vendors whose display/processing-accelerator functions are accelerators we have profiles for:
# NVIDIA, AMD, Habana (pci-ids database vendor ids 10de, 1002, 1da3).
_ACCEL_VENDORS = (0x10DE, 0x1002, 0x1DA3)


def pci_accelerators(root: Path = Path("/sys/bus/pci/devices")) -> tuple[int, ...]:
    """Device ids of accelerator functions in sysfs (display class 0x03 or processing accelerator 0x12)."""
    ids = []
    try:
        devices = sorted(root.iterdir())
    except OSError:
        return ()
    for dev in devices:
        try:
            cls = int((dev / "class").read_text(), 16)
            vendor = int((dev / "vendor").read_text(), 16)
            device = int((dev / "device").read_text(), 16)
        except (OSError, ValueError):
            continue
        if cls >> 16 in (0x03, 0x12) and vendor in _ACCEL_VENDORS:
            ids.append(device)
    return tuple(ids)


def read_facts() -> Facts:
    base = Facts(host=socket.gethostname(), gpu_count=0, cpu_count=os.cpu_count() or 0,
                 os=f"{_platform.system()} {_platform.release()}", versions=_versions(),
                 pci_accelerators=pci_accelerators())
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception as exc:  # no driver, no library, no GPU: all mean "no NVIDIA GPU here"
        return dataclasses.replace(base, nvml_status=f"NVML unavailable: {type(exc).__name__}")
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
        return dataclasses.replace(base, gpu_count=count, gpu_names=tuple(names),
                                   pci_device_ids=tuple(sorted(set(ids))),
                                   nvlinks_per_gpu=min(links) if links else None,
                                   driver=driver.decode() if isinstance(driver, bytes) else driver,
                                   cuda_driver=f"{cuda // 1000}.{cuda % 1000 // 10}", nvml_status="ok")
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
        if key == "gpu_count":
            have: object = facts.accelerator_count
        elif key == "pci_device_ids":
            have = facts.device_ids
            if not have or not isinstance(want, tuple) or not set(have) <= set(want):
                return False
            continue
        else:
            have = getattr(facts, key)  # nvlinks_per_gpu: None (unknown) never equals a number
        if have != want:
            return False
    return True


def detect(directory: Path, facts: Facts) -> Profile:
    """The single profile whose detect block matches; a clear error when none or several do."""
    profiles = [load_profile(p, display(p)) for p in sorted(directory.glob("*.yaml"))]
    found = [p for p in profiles if matches(p, facts)]
    summary = describe(facts)
    if not found:
        raise UserError(f"no threshold profile in {directory} matches this machine ({summary.strip()}); "
                        f"pick one with --platform")
    if len(found) > 1:
        raise UserError(f"several profiles match this machine ({', '.join(p.name for p in found)}); "
                        f"pick one with --platform")
    return found[0]


def describe(facts: Facts) -> str:
    """The facts detection uses, in one line (printed and recorded with the chosen profile)."""
    names = ", ".join(sorted(set(facts.gpu_names)))
    return (f"{facts.accelerator_count} GPU(s){' ' + names if names else ''}, "
            f"pci ids {[f'0x{i:04x}' for i in facts.device_ids]}, nvlinks/GPU {facts.nvlinks_per_gpu}")
