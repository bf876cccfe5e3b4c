"""GPU error counters from NVML (pynvml): volatile ECC counts, row remapping (Ampere and later), retired
pages (before Ampere) and NVLink error counters per link (NVML API reference: nvmlDeviceGetTotalEccErrors,
nvmlDeviceGetRemappedRows, nvmlDeviceGetRetiredPages, nvmlDeviceGetNvLinkErrorCounter). A query the GPU
does not offer (NOT_SUPPORTED: ECC off, no row remapper) is a note; any other failure is a ReadError
naming the GPU and the call, and a GPU that fell off the bus (NVML_ERROR_GPU_IS_LOST) is `vanished`."""

from __future__ import annotations

from typing import Any

from clustercheck.counters.facts import Counter, Reading, ReadError
from clustercheck.nvml import _Reader, _text, bus_id, error_name

# nvmlNvLinkErrorCounter_t in order: NVML_NVLINK_ERROR_DL_REPLAY ... NVML_NVLINK_ERROR_DL_ECC_DATA
NVLINK_COUNTERS = ("replay", "recovery", "crc_flit", "crc_data", "ecc_data")
_NO_DRIVER = ("NVML_ERROR_LIBRARY_NOT_FOUND", "NVML_ERROR_DRIVER_NOT_LOADED")


def read(nv: Any = None) -> Reading:
    """Every GPU's counters; a node without pynvml or an NVIDIA driver gets a note, not an error."""
    if nv is None:
        try:
            import pynvml
        except ImportError:
            return Reading(notes=("no GPU counters: pynvml is not installed",))
        nv = pynvml
    try:
        nv.nvmlInit()
    except nv.NVMLError as exc:
        name = error_name(nv, exc)
        if name in _NO_DRIVER:
            return Reading(notes=(f"no GPU counters: no NVIDIA driver ({name})",))
        return Reading(errors=(ReadError("nvml", "", "nvmlInit", f"{name} ({exc})"),))
    try:
        return _read(nv)
    finally:
        nv.nvmlShutdown()


def _read(nv: Any) -> Reading:
    r = _Reader(nv)
    counters: list[Counter] = []
    notes: list[str] = []
    status, count = r.call("nvmlDeviceGetCount")
    for i in range(count if status == "ok" else 0):
        status, h = r.call("nvmlDeviceGetHandleByIndex", i, gpu=i)
        if status != "ok":
            continue
        status, pci = r.call("nvmlDeviceGetPciInfo", h, gpu=i)
        bus = bus_id(_text(pci.busId)) if status == "ok" else ""
        gpu = f"GPU{i} ({bus})" if bus else f"GPU{i}"

        def get(fn: str, *args: Any) -> Any:
            status, value = r.call(fn, h, *args, gpu=i, bus=bus, optional=True)
            if status == "absent" and f"{gpu}: {fn} not supported" not in notes:
                notes.append(f"{gpu}: {fn} not supported")
            return value if status == "ok" else None

        for kind, err in (("corrected", nv.NVML_MEMORY_ERROR_TYPE_CORRECTED),
                          ("uncorrected", nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED)):
            value = get("nvmlDeviceGetTotalEccErrors", err, nv.NVML_VOLATILE_ECC)
            if value is not None:
                counters.append(Counter(f"gpu.ecc.{kind}", gpu, int(value)))
        rows = get("nvmlDeviceGetRemappedRows")
        if rows is not None:
            for name, value in zip(("correctable", "uncorrectable", "pending", "failure"), rows):
                counters.append(Counter(f"gpu.remap.{name}", gpu, int(value)))
        for name, cause in (("sbe", nv.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS),
                            ("dbe", nv.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)):
            pages = get("nvmlDeviceGetRetiredPages", cause)
            if pages is not None:
                counters.append(Counter(f"gpu.retired_pages.{name}", gpu, len(pages)))
        pending = get("nvmlDeviceGetRetiredPagesPendingStatus")
        if pending is not None:
            counters.append(Counter("gpu.retired_pages.pending", gpu, int(pending)))
        counters += _links(nv, r, h, i, bus, gpu)
    errors = tuple(ReadError("nvml", f"GPU{f.gpu}" + (f" ({f.bus_id})" if f.bus_id else "") if f.gpu is not None
                             else "", f.call, f"{f.error} ({f.message})" if f.message else f.error,
                             "vanished" if f.error == "NVML_ERROR_GPU_IS_LOST" else "unreadable")
                   for f in r.faults)
    return Reading(tuple(counters), (), errors, tuple(notes))


def _links(nv: Any, r: _Reader, h: Any, i: int, bus: str, gpu: str) -> list[Counter]:
    """NVLink error counters of every link the GPU has, as nvml.py counts them (a link without a state,
    down or disabled, does not hide the links after it); none on PCIe-only GPUs. A GPU that stopped
    answering has its fault kept by the reader, which explains every counter of it."""
    out: list[Counter] = []
    for link, _ in r.present_links(h, i, bus) or ():
        for counter, name in enumerate(NVLINK_COUNTERS):
            status, value = r.call("nvmlDeviceGetNvLinkErrorCounter", h, link, counter, gpu=i, bus=bus,
                                   optional=True)
            if status == "ok":
                out.append(Counter(f"nvlink.{name}", f"{gpu} link {link}", int(value)))
    return out
