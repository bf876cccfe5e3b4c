"""Whether a machine's facts prove it has no GPU, so that the `cpu` platform (a profile without device ids,
for 0 GPUs) may judge it. Seeing no GPU proves nothing where NVML answered an error that only a present
driver gives: a library newer than the loaded kernel module after a driver upgrade
(NVML_ERROR_LIB_RM_VERSION_MISMATCH), nvmlDeviceGetCount failing (NVML_ERROR_UNKNOWN), no permission on
/dev/nvidia*. With the PCI bus also unseen (a container without /sys/bus/pci), such a node would run the CPU
smoke checks and pass, a GPU node cleared with its driver broken; detection refuses it instead."""

from __future__ import annotations

from clustercheck.errors import HarnessError

# nvml_status values (platform.read_facts) that say no NVIDIA driver or library is here at all: NVML cannot
# tell about GPUs, and nothing it said proves one present. "" is facts not read from NVML (built by hand).
NO_DRIVER = ("", "NVML unavailable: pynvml is not installed", "NVML unavailable: NVML_ERROR_LIBRARY_NOT_FOUND",
             "NVML unavailable: NVML_ERROR_DRIVER_NOT_LOADED")


class DriverBroken(HarnessError):
    """No GPU seen, while NVML's answer says an NVIDIA driver is here and failing: not a CPU-only machine,
    and nothing can be judged on it until the driver answers (exit 3; the node is never cleared)."""


def driver_fault(nvml_status: str, gpu_count: int, nvml_faults: tuple[str, ...]) -> str | None:
    """Why NVML's answer does not show a machine without GPUs (None when it does): its status is `ok`
    with no GPU and no failed call, or one of NO_DRIVER. `nvml_faults` are the failed calls' texts."""
    if not nvml_faults and (nvml_status in NO_DRIVER or nvml_status == "ok" and gpu_count == 0):
        return None
    calls = "; ".join(nvml_faults[:2]) + (f"; and {len(nvml_faults) - 2} more" if len(nvml_faults) > 2 else "")
    return f"{nvml_status or 'NVML'}{f' ({calls})' if calls else ''}"
