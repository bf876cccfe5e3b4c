"""GPU error counters from NVML (pynvml): volatile ECC counts, row remapping (Ampere and later), retired
pages (before Ampere) and NVLink error counters per link (NVML API reference: nvmlDeviceGetTotalEccErrors,
nvmlDeviceGetRemappedRows, nvmlDeviceGetRetiredPages, nvmlDeviceGetNvLinkErrorCounter).

What the GPU does not have is a note: NOT_SUPPORTED for every counter of a feature (both ECC counts: a
GPU without ECC, or with ECC off; the row remapper before Ampere; page retirement from Ampere on, which
remaps rows instead) on every GPU of the node with the same PCI device id. One GPU lacking a feature its
identical siblings have did not read it: its counters of that feature are errors (not judged). Any other counter NVML would not read is a ReadError naming that counter and its
GPU or link, so the window is `not judged` for it, never clean: NOT_SUPPORTED for part of a feature or for
an NVLink error counter of a link the GPU has, INVALID_ARGUMENT, FUNCTION_NOT_FOUND (an older library), or
any other error. A GPU that fell off the bus (NVML_ERROR_GPU_IS_LOST) is `vanished`. A GPU whose PCI info NVML will
not give has no counters, only that error: without its bus id they could not be matched across the window. Each GPU NVML enumerates
is a counter `gpu.present` (1), so a GPU with no counters at all (ECC off, no NVLink: a PCIe card) that is
no longer enumerated after the window is `vanished` too, never unnoticed."""

from __future__ import annotations

from typing import Any

from clustercheck.counters.facts import Counter, Reading, ReadError
from clustercheck.counters.sysfs import NO_GPU
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
            return Reading(notes=(f"{NO_GPU}pynvml is not installed",))
        nv = pynvml
    try:
        nv.nvmlInit()
    except nv.NVMLError as exc:
        name = error_name(nv, exc)
        if name in _NO_DRIVER:
            return Reading(notes=(f"{NO_GPU}no NVIDIA driver ({name})",))
        return Reading(errors=(ReadError("nvml", "", "nvmlInit", f"{name} ({exc})"),))
    try:
        return _read(nv)
    finally:
        nv.nvmlShutdown()


# The counters a feature's calls read: NOT_SUPPORTED for all of them says the GPU lacks the feature
FEATURES = {"gpu.ecc": ("no ECC, or ECC off", 2), "gpu.remap": ("no row remapper: before Ampere", 4),
            "gpu.retired_pages": ("no page retirement: Ampere and later remap rows", 3)}
_UNSUPPORTED, _LOST = "NVML_ERROR_NOT_SUPPORTED", "NVML_ERROR_GPU_IS_LOST"
PRESENT = "gpu.present"  # 1 for each GPU NVML enumerates


def _read(nv: Any) -> Reading:
    r = _Reader(nv)
    counters: list[Counter] = []
    notes: list[str] = []
    errors: list[ReadError] = []
    # (PCI device id, feature) -> the GPUs NVML answers NOT_SUPPORTED for the whole feature, and those it
    # does not: a feature absent on every GPU of one model is what the model is (a note); on one GPU of
    # eight identical ones it is a read that failed, so that GPU's counters are not judged
    lacking: dict[tuple[int | None, str], list[tuple[str, list[ReadError]]]] = {}
    having: set[tuple[int | None, str]] = set()
    status, count = r.call("nvmlDeviceGetCount")
    for i in range(count if status == "ok" else 0):
        status, h = r.call("nvmlDeviceGetHandleByIndex", i, gpu=i)
        if status != "ok":
            continue
        status, pci = r.call("nvmlDeviceGetPciInfo", h, gpu=i)
        if status != "ok":  # no bus id: its counters could not be matched with another snapshot's (NVML
            continue  # renumbers GPUs), so none are given; the fault, `GPU<i>`, explains them all (not judged)
        bus = bus_id(_text(pci.busId))
        gpu = f"GPU{i} ({bus})" if bus else f"GPU{i}"
        # the GPU itself, whatever counters it has: one with none (no ECC, no NVLink) that is gone after the
        # window must still be missed there (delta: vanished)
        counters.append(Counter(PRESENT, gpu, 1))
        unsupported: list[ReadError] = []  # NOT_SUPPORTED: a feature absent, or counters not judged
        lost: list[str] = []  # the call that found the GPU fallen off the bus

        def get(fn: str, names: tuple[str, ...], *args: Any, device: str = gpu) -> Any:
            """fn's answer; None, with each of `names` (the counters it would give) left unjudged, when
            NVML gives none. A GPU lost is asked nothing more: its one `vanished` error accounts for every
            counter it has (each call after it was one more error, the loss named once per call)."""
            if lost:
                return None
            try:
                return getattr(nv, fn)(h, *args)
            except nv.NVMLError as exc:
                name = error_name(nv, exc)
                why = f"{name} ({exc})"
                if name == _LOST:
                    lost.append(fn)
                    errors.append(ReadError("nvml", gpu, fn, why, "vanished"))
                else:
                    (unsupported if name == _UNSUPPORTED else errors).extend(
                        ReadError("nvml", device, fn, why, counter=n) for n in names)
                return None

        for kind, err in (("corrected", nv.NVML_MEMORY_ERROR_TYPE_CORRECTED),
                          ("uncorrected", nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED)):
            value = get("nvmlDeviceGetTotalEccErrors", (f"gpu.ecc.{kind}",), err, nv.NVML_VOLATILE_ECC)
            if value is not None:
                counters.append(Counter(f"gpu.ecc.{kind}", gpu, int(value)))
        remap = tuple(f"gpu.remap.{n}" for n in ("correctable", "uncorrectable", "pending", "failure"))
        rows = get("nvmlDeviceGetRemappedRows", remap)
        if rows is not None:
            counters += [Counter(name, gpu, int(value)) for name, value in zip(remap, rows)]
        for name, cause in (("sbe", nv.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS),
                            ("dbe", nv.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)):
            pages = get("nvmlDeviceGetRetiredPages", (f"gpu.retired_pages.{name}",), cause)
            if pages is not None:
                counters.append(Counter(f"gpu.retired_pages.{name}", gpu, len(pages)))
        pending = get("nvmlDeviceGetRetiredPagesPendingStatus", ("gpu.retired_pages.pending",))
        if pending is not None:
            counters.append(Counter("gpu.retired_pages.pending", gpu, int(pending)))
        links = [] if lost else [link for link, _ in r.present_links(h, i, bus) or ()]  # as nvml.py: a link
        for link in links:  # without a state (disabled) does not hide the links after it
            for counter, name in enumerate(NVLINK_COUNTERS):
                value = get("nvmlDeviceGetNvLinkErrorCounter", (f"nvlink.{name}",), link, counter,
                            device=f"{gpu} link {link}")
                if value is not None:
                    counters.append(Counter(f"nvlink.{name}", f"{gpu} link {link}", int(value)))
        for name in NVLINK_COUNTERS:  # a counter NVML gives on none of a GPU's links (newer GPUs drop some
            absent = [e for e in unsupported if e.counter == f"nvlink.{name}"]  # of them): what it is, a note
            if links and len(absent) == len(links):
                notes.append(f"{gpu}: nvlink.{name} not supported on any of its {len(links)} link(s)")
                unsupported = [e for e in unsupported if e not in absent]
        model = pci.pciDeviceId
        for family, (_, size) in FEATURES.items():
            absent = [e for e in unsupported if e.counter.startswith(family + ".")]
            if len(absent) == size:  # the whole feature: what this GPU is, if its siblings lack it too
                lacking.setdefault((model, family), []).append((gpu, absent))
                unsupported = [e for e in unsupported if e not in absent]
            elif any(c.device == gpu and c.name.startswith(family + ".") for c in counters):
                having.add((model, family))  # read on this GPU (a lost GPU or another error proves nothing)
        errors += unsupported
    for (model, family), gpus in lacking.items():
        if (model, family) in having:  # a GPU of the same PCI device id has it: this one did not read it
            errors += [e for _, absent in gpus for e in absent]
        else:
            notes += [f"{gpu}: {fn} not supported ({FEATURES[family][0]})" for gpu, absent in gpus
                      for fn in dict.fromkeys(e.what for e in absent)]
    errors += [ReadError("nvml", f"GPU{f.gpu}" + (f" ({f.bus_id})" if f.bus_id else "") if f.gpu is not None
                         else "", f.call, f"{f.error} ({f.message})" if f.message else f.error,
                         "vanished" if f.error == _LOST else "unreadable")
               for f in r.faults]
    return Reading(tuple(counters), (), _once(errors), tuple(notes))


def _once(errors: list[ReadError]) -> tuple[ReadError, ...]:
    """`errors` with each lost GPU named once: its first `vanished` error (a call, then its NVLink state
    read through nvml.py's reader, each found it lost)."""
    seen: set[str] = set()
    out = []
    for e in dict.fromkeys(errors):
        if e.kind == "vanished":
            if e.device in seen:
                continue
            seen.add(e.device)
        out.append(e)
    return tuple(out)
