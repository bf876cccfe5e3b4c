"""A node's hardware identity, for the evidence a run signs: host name, kernel, the board's serial and asset
tag (DMI), each GPU's UUID and serial (NVML), each NIC's GUID or MAC (sysfs), the machine id. Read on the
node (by its first rank, with the platform facts), so a controller on a login node names the GPU nodes, not
itself. Never raises: what cannot be read is listed under `unreadable` (DMI serials are root-only on most
distributions), because evidence that says nothing about a field must not look like a field that is empty."""

from __future__ import annotations

import platform
import socket
from pathlib import Path
from typing import Any

DMI = Path("/sys/class/dmi/id")
# DMI fields that name this machine (SMBIOS: system, board and chassis serials, asset tags, UUID)
DMI_FIELDS = ("sys_vendor", "product_name", "product_serial", "product_uuid", "board_vendor", "board_name",
              "board_serial", "board_asset_tag", "chassis_serial", "chassis_asset_tag")


def _text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return None


def _board(root: Path, unreadable: list[str]) -> dict[str, str]:
    out = {}
    for name in DMI_FIELDS:
        value = _text(root / name)
        if value is None:
            if (root / name).exists():
                unreadable.append(f"dmi.{name}")
        elif value:
            out[name] = value
    return out


def _nics(sys_class: Path) -> list[dict[str, str]]:
    """InfiniBand/RoCE devices by node GUID, and physical network interfaces by MAC address."""
    out = []
    ib = sys_class / "infiniband"
    for dev in sorted(ib.iterdir()) if ib.is_dir() else ():
        guid = _text(dev / "node_guid")
        if guid:
            out.append({"name": dev.name, "node_guid": guid, **({"fw": fw} if (fw := _text(dev / "fw_ver")) else {})})
    net = sys_class / "net"
    for dev in sorted(net.iterdir()) if net.is_dir() else ():
        if not (dev / "device").exists():  # virtual (lo, bridges, veth): not hardware
            continue
        mac = _text(dev / "address")
        if mac:
            out.append({"name": dev.name, "mac": mac})
    return out


def _gpus(unreadable: list[str]) -> list[dict[str, Any]]:
    try:
        import pynvml
    except ImportError:
        return []
    try:
        pynvml.nvmlInit()
    except Exception:  # no NVIDIA driver here: no NVIDIA GPU to name
        return []
    out: list[dict[str, Any]] = []
    try:
        count = pynvml.nvmlDeviceGetCount()
        for i in range(count):
            gpu: dict[str, Any] = {"index": i}
            try:
                h = pynvml.nvmlDeviceGetHandleByIndex(i)
            except pynvml.NVMLError:
                unreadable.append(f"GPU{i}")
                out.append(gpu)
                continue
            for key, call in (("bus_id", "nvmlDeviceGetPciInfo"), ("uuid", "nvmlDeviceGetUUID"),
                              ("serial", "nvmlDeviceGetSerial"), ("name", "nvmlDeviceGetName"),
                              ("vbios", "nvmlDeviceGetVbiosVersion")):
                try:
                    value = getattr(pynvml, call)(h)
                except pynvml.NVMLError:
                    unreadable.append(f"GPU{i}.{key}")
                    continue
                if key == "bus_id":
                    value = value.busId
                gpu[key] = value.decode() if isinstance(value, bytes) else str(value)
            out.append(gpu)
    except pynvml.NVMLError:
        unreadable.append("gpus")
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass  # what was read stands
    return out


def read_identity(sys_class: Path = Path("/sys/class"), dmi: Path = DMI) -> dict[str, Any]:
    unreadable: list[str] = []
    machine_id = _text(Path("/etc/machine-id"))
    return {"hostname": socket.gethostname(), "kernel": platform.release(), "kernel_version": platform.version(),
            **({"machine_id": machine_id} if machine_id else {}),
            "board": _board(dmi, unreadable), "gpus": _gpus(unreadable), "nics": _nics(sys_class),
            "unreadable": unreadable}
