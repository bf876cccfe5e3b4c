"""NVML read as facts. A call that fails on one GPU becomes a fact (which GPU, which call, NVML's name for
the error) instead of an exception: a GPU that fell off the bus answers NVML_ERROR_GPU_IS_LOST (NVML API
reference, nvmlDeviceGetHandleByIndex_v2), and that node must be judged failed by the versions probe, not
end the run. Links are counted by what the GPU has (state answered, up or down, or P2P capability), so
that a link down does not make an H100 SXM look like another platform."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# Answers meaning "no such thing here", not "something is wrong": a link past the GPU's last one, a query
# the GPU or this driver does not offer.
ABSENT = ("NVML_ERROR_NOT_SUPPORTED", "NVML_ERROR_INVALID_ARGUMENT", "NVML_ERROR_FUNCTION_NOT_FOUND")


@dataclass(frozen=True)
class NvmlFault:
    """One NVML call that failed."""

    call: str                 # the pynvml function, e.g. nvmlDeviceGetHandleByIndex
    error: str                # NVML's name for the return code, e.g. NVML_ERROR_GPU_IS_LOST
    message: str = ""         # NVML's words for it ("GPU is lost")
    gpu: int | None = None    # NVML index; None for a call about the whole node
    bus_id: str = ""          # "0000:9a:00.0" when NVML said it before failing

    @property
    def subject(self) -> str:
        return "node" if self.gpu is None else f"GPU{self.gpu}"

    @property
    def detail(self) -> str:
        """What failed, without the subject: `nvmlDeviceGetName failed: NVML_ERROR_GPU_IS_LOST (GPU is
        lost); bus id 0000:9a:00.0`."""
        return (f"{self.call} failed: {self.error}{f' ({self.message})' if self.message else ''}"
                f"{f'; bus id {self.bus_id}' if self.bus_id else ''}")

    def text(self) -> str:
        return f"{self.subject}: {self.detail}"


@dataclass(frozen=True)
class Gpu:
    """One GPU as NVML lists it."""

    index: int
    bus_id: str = ""                  # sysfs form, lower case: 0000:9a:00.0
    name: str = ""
    device_id: int | None = None      # PCI device id, 0x2330 for an H100 SXM5
    module_id: int | None = None      # HGX baseboard slot (nvidia-smi "Module Id"); None where NVML has none
    nvlinks: int | None = None        # links this GPU has, up or down; None when NVML stopped answering
    nvlinks_active: int | None = None


@dataclass(frozen=True)
class Reading:
    count: int                        # nvmlDeviceGetCount: GPUs the driver attached, reachable or not
    gpus: tuple[Gpu, ...]             # those NVML could describe
    driver: str | None
    cuda_driver: str | None
    faults: tuple[NvmlFault, ...]


def bus_id(text: str) -> str:
    """NVML's "00000000:9A:00.0" in sysfs's form "0000:9a:00.0", so the two can be compared."""
    t = text.strip().lower()
    domain, sep, rest = t.partition(":")
    if sep and rest.count(":") == 1:
        try:
            return f"{int(domain, 16):04x}:{rest}"
        except ValueError:
            pass
    return t


def error_name(nv: Any, exc: BaseException) -> str:
    """NVML_ERROR_GPU_IS_LOST for pynvml's NVMLError_GpuIsLost, by the module's own constants."""
    value = getattr(exc, "value", None)
    for name, v in vars(nv).items():
        if name.startswith("NVML_ERROR_") and v == value:
            return str(name)
    return type(exc).__name__


class _Reader:
    def __init__(self, nv: Any) -> None:
        self.nv = nv
        self.faults: list[NvmlFault] = []

    def call(self, fn: str, *args: Any, gpu: int | None = None, bus: str = "",
             optional: bool = False) -> tuple[str, Any]:
        """("ok", value), ("absent", None) for an optional query NVML does not offer, or ("fault", None)
        with the fault kept."""
        try:
            return "ok", getattr(self.nv, fn)(*args)
        except self.nv.NVMLError as exc:
            name = error_name(self.nv, exc)
            if optional and name in ABSENT:
                return "absent", None
            self.faults.append(NvmlFault(fn, name, str(exc), gpu, bus))
            return "fault", None

    def links(self, h: Any, gpu: int, bus: str) -> tuple[int | None, int | None]:
        """(links the GPU has, links up); (None, None) when the GPU stopped answering."""
        present = self.present_links(h, gpu, bus)
        return (None, None) if present is None else (len(present), sum(up for _, up in present))

    def present_links(self, h: Any, gpu: int, bus: str) -> list[tuple[int, bool]] | None:
        """(link, up) for every link the GPU has, up or down, walking all NVML_NVLINK_MAX_LINKS: a link whose
        state NVML does not give (NOT_SUPPORTED on a disabled link) is still one when its P2P capability
        answers, and later links are read past it. None when the GPU stopped answering. The links probe's
        count and the counters' per-link reading both come from here, so they cannot disagree."""
        nv = self.nv
        out: list[tuple[int, bool]] = []
        for link in range(getattr(nv, "NVML_NVLINK_MAX_LINKS", 18)):
            status, state = self.call("nvmlDeviceGetNvLinkState", h, link, gpu=gpu, bus=bus, optional=True)
            if status == "absent":  # no state: the link may still exist and be down (its capability says)
                status, state = self.call("nvmlDeviceGetNvLinkCapability", h, link,
                                          nv.NVML_NVLINK_CAP_P2P_SUPPORTED, gpu=gpu, bus=bus, optional=True)
                if status == "ok" and state:
                    out.append((link, False))
            elif status == "ok":
                out.append((link, state == nv.NVML_FEATURE_ENABLED))
            if status == "fault":
                return None
        return out


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def read(nv: Any) -> Reading:
    """Every GPU NVML lists, after nvmlInit; never raises NVMLError."""
    r = _Reader(nv)
    status, count = r.call("nvmlDeviceGetCount")
    count = count if status == "ok" else 0
    gpus = []
    for i in range(count):
        status, h = r.call("nvmlDeviceGetHandleByIndex", i, gpu=i)
        if status != "ok":
            continue
        status, pci = r.call("nvmlDeviceGetPciInfo", h, gpu=i)
        bus = bus_id(_text(pci.busId)) if status == "ok" else ""
        _, name = r.call("nvmlDeviceGetName", h, gpu=i, bus=bus)
        _, module = r.call("nvmlDeviceGetModuleId", h, gpu=i, bus=bus, optional=True)
        has, active = r.links(h, i, bus)
        gpus.append(Gpu(i, bus, _text(name) if name is not None else "",
                        pci.pciDeviceId >> 16 if pci is not None else None, module, has, active))
    _, driver = r.call("nvmlSystemGetDriverVersion")
    _, cuda = r.call("nvmlSystemGetCudaDriverVersion")
    return Reading(count, tuple(gpus), None if driver is None else _text(driver),
                   None if cuda is None else f"{cuda // 1000}.{cuda % 1000 // 10}", tuple(r.faults))
