"""Inventory: GPU count and model, driver, CUDA, NCCL and torch versions, and NVML's health.

Evidence: `nvidia-smi -q` (driver, CUDA, GPUs) and/or `name: version` lines (torch: 2.4.0, nccl: 2.21.5,
as `python -c 'import torch; print(torch.__version__)'` and friends print them). Live: NVML through
clustercheck.judging.platform and the installed torch. Minimum versions come from the platform's expect block.
The GPUs counted in `nvidia-smi -q` are its GPU sections, never its header's `Attached GPUs` (a header
that promises more fails: a section was cut). Fewer GPUs than the platform's gpu_count fails, naming the
missing GPU where anything can: a bus id the
PCI bus shows and NVML does not list, or the HGX module (nvidia-smi "Module Id", 1..8) nobody answers
for. Every NVML call that failed live fails its GPU, naming the call and NVML's error.
"""

from __future__ import annotations

import platform as _platform
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from clustercheck.errors import show
from clustercheck.judging.expect import VERSION
from clustercheck.nvml import NvmlFault, bus_id
from clustercheck.probes import nvsmi, tool
from clustercheck.probes.base import Probe, ProbeParseError, ProbeVerdict, not_judged
from clustercheck.toolout import count, evidence_lines

_NVSMI_GPU = re.compile(r"^GPU [0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]\s*$", re.MULTILINE)
# nvml_status (judging/platform.py) where NVML's library, not the node, is missing: GPUs are then uncounted
NO_LIBRARY = ("NVML unavailable: NVML_ERROR_LIBRARY_NOT_FOUND", "NVML unavailable: pynvml is not installed")
_KV = re.compile(r"^\s*(torch|nccl|python|cuda|driver|gpu_count|gpu_model)\s*[:=]\s*(\S.*)$", re.IGNORECASE)


@dataclass(frozen=True)
class Inventory:
    gpu_count: int | None
    gpu_models: tuple[str, ...]
    driver: str | None
    cuda: str | None
    nccl: str | None
    torch: str | None
    python: str | None
    listed: tuple[str, ...] = ()           # bus ids of the GPUs NVML or nvidia-smi lists
    modules: tuple[int | None, ...] = ()   # their module ids, in the same order
    on_bus: tuple[str, ...] | None = None  # NVIDIA GPUs on the PCI bus (live only; None: not looked)
    faults: tuple[NvmlFault, ...] = ()
    nvml_status: str = ""
    report: nvsmi.NvsmiReport | None = None  # the `nvidia-smi -q` text it was read from, when it was


def parse(text: str) -> Inventory:
    tool.refuse_crashed(text)
    values: dict[str, str] = {}
    models: list[str] = []
    listed: tuple[str, ...] = ()
    modules: tuple[int | None, ...] = ()
    report = None
    # nvidia-smi -q by its own markers only: other tools (nvbandwidth) print "Driver Version: ..." too
    if "NVSMI LOG" in text or _NVSMI_GPU.search(text):
        report = nvsmi.parse(text)
        for key, name in (("Driver Version", "driver"), ("CUDA Version", "cuda")):
            if report.head(key):
                values[name] = report.head(key)  # type: ignore[assignment]
        # the GPUs counted are the sections read, never the header's word for them (nvsmi.coverage judges
        # a header that promises more)
        values["gpu_count"] = str(len(report.gpus))
        models = [g.product for g in report.gpus if g.get("Product Name")]
        listed = tuple(bus_id(g.bus_id) for g in report.gpus)
        modules = tuple(_int(g.get("Module ID", "Platform Info/Module Id")) for g in report.gpus)
    for line in evidence_lines(text):
        m = _KV.match(line)
        if m:
            key = m.group(1).lower()
            if key == "gpu_model":
                models.append(m.group(2).strip())
            else:
                values.setdefault(key, m.group(2).strip())
    if not values and not models:
        raise ProbeParseError("expected `nvidia-smi -q` (Driver Version, CUDA Version, Attached GPUs) or "
                              "'name: version' lines for torch, nccl, cuda, driver")
    return Inventory(count(values.get("gpu_count")), tuple(models), values.get("driver"),
                     values.get("cuda"), values.get("nccl"), values.get("torch"), values.get("python"),
                     listed, modules, report=report)


def _int(text: str | None) -> int | None:
    return count(text)


def _missing(inv: Inventory, want: int) -> str:
    """Which GPU is missing, as far as anything here can tell."""
    gone = [b for b in inv.on_bus or () if b not in inv.listed]
    if gone:
        return f"{', '.join(gone)} (on the PCI bus, not listed by NVML)"
    slots = {m for m in inv.modules if m is not None}
    # an HGX H100 board's GPUs answer Module Id 1..8 (the 8-GPU `nvidia-smi -a` capture in tests/fixtures):
    # a module no listed GPU answers for is the one gone
    if slots and len(slots) == len(inv.modules) == inv.gpu_count and slots <= set(range(1, want + 1)):
        gaps = ", ".join(str(m) for m in sorted(set(range(1, want + 1)) - slots))
        return f"module {gaps} (no listed GPU has that Module Id)"
    seen = f"listed: {', '.join(inv.listed)}" if inv.listed else "no GPU listed"
    bus = "; not on the PCI bus either" if inv.on_bus is not None else ""
    status = f"; {inv.nvml_status}" if inv.nvml_status.startswith("NVML unavailable") else ""
    return f"{want - (inv.gpu_count or 0)} GPU(s) ({seen}{bus}{status})"


def _version(text: str | None) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", text or "")[:4])


def judge(inv: Inventory, expect: Mapping[str, Any]) -> list[ProbeVerdict]:
    out = nvsmi.coverage(inv.report, "versions") if inv.report is not None else []
    models = ", ".join(sorted(set(inv.gpu_models))) or "no model listed"
    want = expect.get("gpu_count")
    # NVML's library is not here (a container given the GPUs alone): nothing read the GPUs' count, model or
    # driver, which says nothing of the node's GPUs; the ranks bind what CUDA sees, and their checks judge those
    unread = "" if inv.listed or inv.nvml_status not in NO_LIBRARY else (
        f"{inv.nvml_status}: nothing here reads the GPUs" +
        (f" ({len(inv.on_bus)} NVIDIA GPU(s) on the PCI bus)" if inv.on_bus else ""))
    if want and unread:
        out.append(not_judged("node", "GPU count", f"{unread}; platform expects {want}", inv.gpu_count, want))
    elif want is not None:
        detail = f"{inv.gpu_count} GPU(s) ({models}), platform expects {want}"
        if inv.gpu_count is not None and inv.gpu_count < want:
            detail += f"; missing: {_missing(inv, want)}"
        out.append(ProbeVerdict("node", "GPU count", inv.gpu_count == want, detail, inv.gpu_count, want))
    for fault in inv.faults:
        out.append(ProbeVerdict(fault.subject, "NVML", False, fault.detail, fault.error, "NVML_SUCCESS"))
    want_model = expect.get("gpu_model")
    if want_model and unread:
        out.append(not_judged("node", "GPU model", f"{unread}; expected every GPU to be a {want_model}", None,
                              want_model))
    elif want_model:
        wrong = [m for m in inv.gpu_models if want_model not in m]
        ok = bool(inv.gpu_models) and not wrong
        out.append(ProbeVerdict("node", "GPU model", ok, f"{models}; expected every GPU to be a {want_model}",
                                models, want_model))
    for key in ("driver", "cuda", "nccl", "torch"):
        minimum = expect.get(f"{key}_min")
        if not minimum:
            continue
        have = getattr(inv, key)
        if key == "driver" and have is None and unread:  # the driver's version is NVML's to say
            out.append(not_judged("node", "driver version", f"{unread}; minimum {minimum}", None, minimum))
            continue
        if not VERSION.fullmatch(str(minimum)):  # refused at load; a caller past it: "banana" is below everything
            out.append(not_judged("node", f"{key} version", f"minimum {show(minimum, 40)} is no version (digits "
                                  f"separated by dots)", have, minimum))
            continue
        ok = have is not None and _version(have) >= _version(str(minimum))
        out.append(ProbeVerdict("node", f"{key} version", ok, f"{key} {have or 'not found'}, minimum {minimum}",
                                have, f">= {minimum}"))
    summary = ", ".join(f"{k} {getattr(inv, k)}" for k in ("driver", "cuda", "nccl", "torch", "python")
                        if getattr(inv, k))
    out.append(ProbeVerdict("node", "inventory", True,
                            f"{inv.gpu_count if inv.gpu_count is not None else '?'} GPU(s) ({models}); "
                            f"{summary or 'no versions found'}", measured=summary))
    return out


def collect(pci_root: Path = Path("/sys/bus/pci/devices")) -> Inventory:
    from importlib import metadata

    from clustercheck.judging.platform import read_facts

    facts = read_facts(pci_root=pci_root)
    torch_v = nccl_v = cuda_v = None
    try:
        torch_v = metadata.version("torch")
    except metadata.PackageNotFoundError:
        pass
    if torch_v:
        import torch  # heavy: only here, when the probe runs

        cuda_v = torch.version.cuda
        if cuda_v and torch.cuda.is_available():
            from clustercheck.fabric.nccl_lib import version

            nccl_v = version(torch.cuda.nccl.version())  # the library that runs, not torch's build-time figure
    return Inventory(facts.gpu_count, tuple(facts.gpu_names), facts.driver, facts.cuda_driver or cuda_v, nccl_v,
                     torch_v, _platform.python_version(), tuple(g.bus_id for g in facts.gpus),
                     tuple(g.module_id for g in facts.gpus), None if facts.pci_problem else facts.pci_gpus,  # unread: not looked
                     facts.nvml_faults, facts.nvml_status)


PROBE = Probe(
    name="versions",
    description="inventory: GPU count and model, driver, CUDA, NCCL, torch versions",
    input_help="`nvidia-smi -q` output and/or 'torch: X' / 'nccl: X' lines",
    scope="node",
    parse=parse,
    collect=collect,
    judge=judge,
    expect_keys=("gpu_count", "gpu_model", "driver_min", "cuda_min", "nccl_min", "torch_min"),
)
