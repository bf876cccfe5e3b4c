"""ECC counters from NVML (pynvml), shaped as the `nvidia-smi -q` fields the ecc probe judges.

Live, NVML is read in preference to text: its SRAM status is a struct (nvmlDeviceGetSramEccErrorStatus,
with parity, SEC-DED and threshold-exceeded fields), so no renamed text key can turn an error into
"clean". Only "NVML cannot start here" falls back to nvidia-smi; a GPU NVML cannot reach is an error,
and so is NVML that starts and lists no GPU (never "GPUs without ECC").
Needs a GPU to verify: the values and NOT_SUPPORTED answers of each call on real A100/H100 drivers
(tests drive this mapping through a stand-in pynvml module).
"""

from __future__ import annotations

import ctypes
from typing import Any, Callable

from clustercheck.probes import nvsmi, tool


class NvmlUnavailable(Exception):
    """NVML cannot be used on this machine (no pynvml, no driver): fall back to nvidia-smi."""


def read() -> nvsmi.NvsmiReport:
    try:
        import pynvml
    except ImportError:
        raise NvmlUnavailable("pynvml is not installed") from None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        raise NvmlUnavailable(f"nvmlInit: {exc}") from None
    try:
        driver = _text(pynvml.nvmlSystemGetDriverVersion())
        header = (("Driver Version", driver),)
        count = pynvml.nvmlDeviceGetCount()
        if not count:  # a driver that sees no GPU is no "GPU without ECC": the probe cannot judge this node
            raise tool.ToolError(f"NVML started (driver {driver}) but nvmlDeviceGetCount lists no GPU: the driver "
                                 f"sees none (fallen off the bus, or a container given no GPU device)")
        gpus = []
        for i in range(count):
            try:
                h = pynvml.nvmlDeviceGetHandleByIndex(i)
            except pynvml.NVMLError as exc:  # a GPU fallen off the bus: never a skip, never clean
                raise tool.ToolError(f"NVML nvmlDeviceGetHandleByIndex({i}): {exc}") from None
            gpus.append(nvsmi.NvsmiGpu(_text(_call(pynvml, pynvml.nvmlDeviceGetPciInfo, h, attr="busId")), i,
                                       (("Product Name", _text(_call(pynvml, pynvml.nvmlDeviceGetName, h))),
                                        *_fields(pynvml, h))))
        return nvsmi.NvsmiReport(header, tuple(gpus))
    finally:
        pynvml.nvmlShutdown()


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _call(nv: Any, fn: Callable[..., Any], *args: Any, attr: str = "") -> Any:
    """fn(*args); "N/A" when NVML says NOT_SUPPORTED, "Unknown Error (...)" for any other failure, which
    the judge reads as an unreadable counter (a fail), as it reads nvidia-smi's own "Unknown Error"."""
    try:
        value = fn(*args)
    except nv.NVMLError as exc:
        return "N/A" if getattr(exc, "value", None) == nv.NVML_ERROR_NOT_SUPPORTED else f"Unknown Error ({exc})"
    return getattr(value, attr) if attr else value


def _mode(nv: Any, state: Any) -> str:
    return {nv.NVML_FEATURE_ENABLED: "Enabled", nv.NVML_FEATURE_DISABLED: "Disabled"}.get(state, f"unknown state {state!r}")


def _fields(nv: Any, h: Any) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    mode = _call(nv, nv.nvmlDeviceGetEccMode, h)
    # a failed call is "Unknown Error (...)" and a state NVML does not define its number: both read as an
    # unreadable ECC mode (the judge fails them), never dropped, which read as ECC on
    out.append(("ECC Mode/Current", _mode(nv, mode[0]) if isinstance(mode, (tuple, list)) else str(mode)))
    sram = nv.c_nvmlEccSramErrorStatus_v1_t()
    status = _call(nv, nv.nvmlDeviceGetSramEccErrorStatus, h, ctypes.byref(sram))
    for scope, counter, prefix in (("Volatile", nv.NVML_VOLATILE_ECC, "volatile"),
                                   ("Aggregate", nv.NVML_AGGREGATE_ECC, "aggregate")):
        base = f"ECC Errors/{scope}"
        if status == nv.NVML_SUCCESS:  # the split layout, as nvidia-smi prints it from the same struct
            out += [(f"{base}/SRAM Correctable", str(getattr(sram, f"{prefix}Cor"))),
                    (f"{base}/SRAM Uncorrectable Parity", str(getattr(sram, f"{prefix}UncParity"))),
                    (f"{base}/SRAM Uncorrectable SEC-DED", str(getattr(sram, f"{prefix}UncSecDed")))]
        elif status != "N/A":  # the call failed: an unreadable counter, never "no SRAM errors"
            out.append((f"{base}/SRAM Uncorrectable", str(status)))
        else:  # drivers without the struct: one SRAM counter per error type
            for kind, err in (("Correctable", nv.NVML_MEMORY_ERROR_TYPE_CORRECTED),
                              ("Uncorrectable", nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED)):
                out.append((f"{base}/SRAM {kind}", str(_call(nv, nv.nvmlDeviceGetMemoryErrorCounter, h, err,
                                                             counter, nv.NVML_MEMORY_LOCATION_SRAM))))
        for kind, err in (("Correctable", nv.NVML_MEMORY_ERROR_TYPE_CORRECTED),
                          ("Uncorrectable", nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED)):
            out.append((f"{base}/DRAM {kind}", str(_call(nv, nv.nvmlDeviceGetMemoryErrorCounter, h, err, counter,
                                                         nv.NVML_MEMORY_LOCATION_DRAM))))
    if status == nv.NVML_SUCCESS:
        out.append(("ECC Errors/Aggregate/SRAM Threshold Exceeded", "Yes" if sram.bThresholdExceeded else "No"))
    rows = _call(nv, nv.nvmlDeviceGetRemappedRows, h)
    if isinstance(rows, (tuple, list)):
        corr, unc, pending, failed = rows
        out += [("Remapped Rows/Correctable Error", str(corr)), ("Remapped Rows/Uncorrectable Error", str(unc)),
                ("Remapped Rows/Pending", "Yes" if pending else "No"),
                ("Remapped Rows/Remapping Failure Occurred", "Yes" if failed else "No")]
    else:
        out.append(("Remapped Rows/Pending", str(rows)))
    for key, cause in (("Single Bit ECC", nv.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS),
                       ("Double Bit ECC", nv.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)):  # pre-Ampere
        pages = _call(nv, nv.nvmlDeviceGetRetiredPages, h, cause)
        out.append((f"Retired Pages/{key}", str(len(pages)) if isinstance(pages, list) else str(pages)))
    pending = _call(nv, nv.nvmlDeviceGetRetiredPagesPendingStatus, h)
    out.append(("Retired Pages/Pending Page Blacklist", str(pending) if isinstance(pending, str) else
                "Yes" if pending == nv.NVML_FEATURE_ENABLED else "No"))
    return out
