"""Accelerators on the PCI bus, read from sysfs whatever their driver: an AMD or Intel Gaudi box, or NVIDIA
GPUs without a working driver, must not look like a CPU-only machine to detection (judging/platform.py).

The one rule of what an accelerator (a "GPU" to the probes) is: detection's count and pcie-link's count
against the platform's `gpu_count` (probes/pcie_link.py, from sysfs and lspci) both use it, so a node the
platform detects with N accelerators is never one pcie-link lists fewer of."""

from __future__ import annotations

from pathlib import Path

# PCI vendors whose display/processing-accelerator functions are accelerators we have profiles for:
# NVIDIA, AMD, Habana (pci-ids database vendor ids 10de, 1002, 1da3). 0x1022 is AMD's CPUs and chipsets,
# 0x1a03 a BMC's ASPEED VGA: neither is an accelerator.
ACCEL_VENDORS = (0x10DE, 0x1002, 0x1DA3)
ACCEL_CLASSES = (0x03, 0x12)  # PCI base class: display controller, processing accelerator
# The same, as `lspci -vvv` names them (pci.ids): class names, and the vendors' names over the years
# (0x1002's "AMD/ATI" forms; 0x1022 reads "Advanced Micro Devices, Inc. [AMD]" and is not one)
ACCEL_CLASS_WORDS = ("3D controller", "VGA compatible controller", "Display controller", "Processing accelerators")
ACCEL_VENDOR_WORDS = ("NVIDIA Corporation", "Advanced Micro Devices, Inc. [AMD/ATI]",
                      "Advanced Micro Devices [AMD] nee ATI", "ATI Technologies", "Habana Labs Ltd.")


def is_accelerator(vendor: int, class_code: int) -> bool:
    """An accelerator's PCI identity: one of ACCEL_VENDORS, of class ACCEL_CLASSES (`class_code` 16 bits,
    base class and subclass, as lspci -n prints it: 0x0302, 0x1200)."""
    return vendor in ACCEL_VENDORS and class_code >> 8 in ACCEL_CLASSES


def virtual_function(dev: Path) -> bool:
    """An SR-IOV virtual function (sysfs gives it a `physfn` link): a slice of a physical device listed on
    its own. Counted, a host with 8 GPUs and 7 VFs each would read as 64 accelerators; its link reads x0.
    A VF passed into a VM has no physfn there: it is that VM's GPU and counts."""
    return (dev / "physfn").exists()


def accelerator_function(dev: Path, vendor: int, cls: int) -> bool:
    """A physical accelerator in sysfs: `is_accelerator` by its vendor and `class` file (`cls` 24 bits, as
    sysfs writes it: 0x030200), and not a `virtual_function`."""
    return is_accelerator(vendor, cls >> 8) and not virtual_function(dev)


def _pci_functions(root: Path) -> list[tuple[str, int, int]]:
    """(bus id, vendor, device) of the accelerator functions in sysfs (`accelerator_function`)."""
    return pci_read(root)[0]


def pci_read(root: Path) -> tuple[list[tuple[str, int, int]], str]:
    """The functions above, and why the tree could not be listed ("" when it was): a container without
    /sys/bus/pci shows no GPU, which proves nothing, so the facts say so instead of an empty list alone."""
    found: list[tuple[str, int, int]] = []
    try:
        devices = sorted(root.iterdir())
    except OSError as exc:
        return [], f"{root} could not be read ({exc.strerror or type(exc).__name__})"
    for dev in devices:
        try:
            cls = int((dev / "class").read_text(), 16)
            vendor = int((dev / "vendor").read_text(), 16)
            device = int((dev / "device").read_text(), 16)
        except (OSError, ValueError):
            continue
        if accelerator_function(dev, vendor, cls):
            found.append((dev.name.lower(), vendor, device))
    return found, ""


def pci_accelerators(root: Path = Path("/sys/bus/pci/devices")) -> tuple[int, ...]:
    """Device ids of the accelerators on the PCI bus."""
    return tuple(device for _, _, device in _pci_functions(root))
