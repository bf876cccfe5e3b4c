"""How much each counter may rise during one check, and the judgement of a window against it.

A profile may carry a `counters:` block (counter name or dotted prefix -> allowance, with its source):

    counters:
      pcie.aer.correctable: {allow: 32/min, source: "NVIDIA/DCGM nvvs/plugin_src/pcie/PcieMain.cpp ..."}
      kernel.xid: {allow: 0, source: "..."}
      kernel.xid.43: {allow: 5, source: "..."}   # the longest matching prefix wins

`allow` is a count for the window or a rate (`N/min`, the allowed count being N x the window's minutes
rounded up). An error counter no allowance names may not rise at all. DEFAULTS hold the built-in
allowances with their public sources; a profile's entries replace or refine them."""

from __future__ import annotations

import difflib
import math
import re
from dataclasses import dataclass
from typing import Mapping

from clustercheck.counters.delta import Delta, Increase
from clustercheck.counters.facts import ReadError
from clustercheck.counters.nvml_counters import NVLINK_COUNTERS, PRESENT
from clustercheck.counters.sysfs import IB_ERROR_BITS
from clustercheck.errors import show
from clustercheck.schema import Fields

FAMILIES = ("pcie", "ib", "gpu", "nvlink", "amdgpu", "kernel", "cpu")
_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*/\s*min\s*$")
MAX_ALLOW = 10 ** 9  # a count or a count per minute; far above any real allowance (DCGM's AER: 480)
_NAME = re.compile(r"^[a-z][a-z0-9_]*(\.[A-Za-z0-9_]+)*$")


@dataclass(frozen=True)
class Allowance:
    counter: str        # the name or prefix it covers
    amount: float
    per_minute: bool
    source: str
    origin: str         # file:line, or "built in"

    def allowed(self, seconds: float) -> int:
        return math.ceil(self.amount * max(seconds, 0.0) / 60.0) if self.per_minute else int(self.amount)

    def describe(self, seconds: float) -> str:
        if self.per_minute:
            return f"{self.amount:g}/min x {seconds:.0f} s = {self.allowed(seconds)}"
        return str(self.allowed(seconds))


_AER = "NVIDIA/DCGM nvvs/plugin_src/pcie/PcieMain.cpp: aer_threshold 480 (32/minute x 15 minutes)"
_UNCORR_PCIE = "clustercheck's choice: an uncorrectable PCIe error loses or poisons a transaction"
_REMAP = ("Azure/azurehpc-health-checks customTests/azure_gpu_ecc.nhc fails a pending or failed row remap; "
          "clustercheck's choice: no new remap during a check")
_AMDGPU_RAS = (  # kind, limit, why
    ("ue", 0, "facebookresearch/gcm gcm/health_checks/checks/check_nvidia_smi.py: uncorrected ECC errors fail above 0 "
              "(an amdgpu RAS uncorrectable error, as NVIDIA's)"),
    ("de", 0, "clustercheck's choice: a deferred error (poison) is an uncorrectable error not yet consumed "
              "(torvalds/linux drivers/gpu/drm/amd/amdgpu/amdgpu_umc.c retires its page as it does an "
              "uncorrectable one's)"),
    ("ce", 1000, "clustercheck's choice (no public per-window figure), as gpu.ecc.corrected: 1,000 per check, a "
                 "tenth of Azure's aggregate SRAM limit of 10,000 (Azure/azurehpc-health-checks "
                 "customTests/azure_gpu_ecc.nhc)"))
DEFAULTS: dict[str, Allowance] = {a.counter: a for a in (
    Allowance("pcie.aer.correctable", 32, True, _AER, "built in"),
    Allowance("pcie.aer.rootport.correctable", 32, True, _AER, "built in"),
    Allowance("kernel.aer.corrected", 32, True, _AER, "built in"),
    Allowance("pcie.aer.nonfatal", 0, False, _UNCORR_PCIE, "built in"),
    Allowance("pcie.aer.fatal", 0, False, _UNCORR_PCIE, "built in"),
    Allowance("pcie.aer.rootport.nonfatal", 0, False, _UNCORR_PCIE, "built in"),
    Allowance("pcie.aer.rootport.fatal", 0, False, _UNCORR_PCIE, "built in"),
    Allowance("gpu.ecc.uncorrected", 0, False, "facebookresearch/gcm gcm/health_checks/checks/check_nvidia_smi.py: "
              "uncorrected ECC errors fail above 0", "built in"),
    Allowance("gpu.ecc.corrected", 1000, False, "clustercheck's choice (no public per-window figure): 1,000 per "
              "check, a tenth of Azure's aggregate SRAM limit of 10,000 (Azure/azurehpc-health-checks "
              "customTests/azure_gpu_ecc.nhc)", "built in"),
    Allowance("gpu.remap", 0, False, _REMAP, "built in"),
    Allowance("gpu.retired_pages", 0, False, "clustercheck's choice: a page retired during a check is a new memory "
              "fault (facebookresearch/gcm gcm/health_checks/checks/check_nvidia_smi.py fails at 10 in all)",
              "built in"),
    Allowance("nvlink", 0, False, "facebookresearch/gcm gcm/health_checks/checks/check_dcgmi.py: NVLink CRC data, "
              "CRC flit, recovery and replay error thresholds default to 0", "built in"),
    Allowance("ib", 0, False, "facebookresearch/gcm gcm/health_checks/checks/check_ib_counters.py: warns above 0 "
              "port errors, link_downed critical when non-zero", "built in"),
    Allowance("kernel.xid", 0, False, "Azure/azurehpc-health-checks customTests/azure_gpu_xid.nhc fails on Xids "
              "logged in its window; clustercheck's choice: every Xid code, a profile may allow some", "built in"),
    Allowance("kernel.sxid", 0, False, "clustercheck's choice: an NVSwitch error (SXid) during a check", "built in"),
    Allowance("kernel.gpu_lost", 0, False, "NVIDIA/NVSentinel #155: a GPU fallen off the bus, logged without an "
              "Xid", "built in"),
    Allowance("kernel.mce", 0, False, "clustercheck's choice: a machine check during a check", "built in"),
    Allowance("kernel.edac", 0, False, "clustercheck's choice: a memory controller error during a check",
              "built in"),
    Allowance("kernel.hardware_error", 0, False, "clustercheck's choice: firmware-reported hardware error",
              "built in"),
    # amdgpu's RAS errors, as its kernel log lines (kernel.amdgpu.*) and its sysfs counts (amdgpu.*) say them
    *(Allowance(f"{family}.{kind}", limit, False, why, "built in") for family in ("kernel.amdgpu", "amdgpu")
      for kind, limit, why in _AMDGPU_RAS),
    Allowance("kernel.amdgpu.reset", 0, False, "clustercheck's choice: a GPU reset during a check (amdgpu's "
              "\"GPU reset begin!\") loses the work on the GPU", "built in"),
    Allowance("cpu.throttle", 0, False, "clustercheck's choice: a CPU thermal throttle event during a check",
              "built in"),
)}
NONE = Allowance("", 0, False, "clustercheck's rule: an error counter no allowance names may not rise", "built in")


# Every counter the readers give, by name: sysfs.py (pcie.aer, ib, cpu.throttle, amdgpu), nvml_counters.py (gpu,
# nvlink), kernel_log.py (kernel.*: KernelLine.counter). `<n>` is a number (an Xid code), `<block>` an amdgpu RAS
# block (umc, gfx, ...). An allowance must name one of them or a dotted prefix of some: any other name is a
# typo that would never apply, and the counter it meant would stay at the built-in allowance.
_AER_KINDS = ("correctable", "nonfatal", "fatal")
COUNTER_NAMES: tuple[str, ...] = (
    *(f"pcie.aer.{k}" for k in _AER_KINDS), *(f"pcie.aer.rootport.{k}" for k in _AER_KINDS),
    *(f"ib.{name}" for name in IB_ERROR_BITS),
    PRESENT, "gpu.ecc.corrected", "gpu.ecc.uncorrected",
    *(f"gpu.remap.{k}" for k in ("correctable", "uncorrectable", "pending", "failure")),
    *(f"gpu.retired_pages.{k}" for k in ("sbe", "dbe", "pending")),
    *(f"nvlink.{name}" for name in NVLINK_COUNTERS),
    "kernel.xid.<n>", "kernel.sxid.<n>", "kernel.gpu_lost", "kernel.aer.corrected", "kernel.aer.nonfatal",
    "kernel.aer.fatal", "kernel.mce", "kernel.edac.ce", "kernel.edac.ue", "kernel.hardware_error",
    *(f"kernel.amdgpu.{k}" for k in ("ue", "de", "ce", "reset")),
    *(f"amdgpu.{k}.<block>" for k in ("ue", "ce", "de")),
    "cpu.throttle.core", "cpu.throttle.package",
)
_PLACES = {"<n>": re.compile(r"\d+"), "<block>": re.compile(r"[a-z0-9_]+")}


def names_a_counter(name: str) -> bool:
    """`name` is a counter the readers give, or a dotted prefix of one (kernel.xid, pcie.aer, nvlink)."""
    parts = name.split(".")
    for known in COUNTER_NAMES:
        want = known.split(".")
        if len(parts) <= len(want) and all(
                _PLACES[w].fullmatch(p) if w in _PLACES else p == w for p, w in zip(parts, want)):
            return True
    return False


def _unknown_counter(name: str) -> str:
    """Why `name` is refused, with the nearest counter names (difflib) as a hint."""
    known = sorted({".".join(k.split(".")[:n]) for k in COUNTER_NAMES for n in range(1, len(k.split(".")) + 1)})
    hint = difflib.get_close_matches(name, known, n=1, cutoff=0.75)
    also = f"; did you mean {hint[0]!r}?" if hint else ""
    return (f"no counter {name!r}: an allowance names a counter or a dotted prefix of one (e.g. pcie.aer.correctable, "
            f"kernel.xid.79, nvlink, amdgpu.ce.umc){also}")


def parse(raw: object, file: str, line: int = 0, key: str = "counters") -> dict[str, Allowance]:
    """A profile's `counters:` block, checked (UserError naming file, line and key), over DEFAULTS."""
    top = Fields(raw, file, key, line)
    out = dict(DEFAULTS)
    for name in list(top.data):
        if not isinstance(name, str) or not _NAME.match(name) or name.split(".")[0] not in FAMILIES:
            raise top.error(str(name), f"not a counter name: expected a dotted name starting with one of "
                                       f"{', '.join(FAMILIES)} (e.g. pcie.aer.correctable, kernel.xid.79)")
        if not names_a_counter(name):
            raise top.error(name, _unknown_counter(name))
        f = Fields(top.get(name, dict), file, top.key_path(name), top.line_of(name))
        allow = f.get("allow", (int, str))
        source = f.get("source", str)
        if not source.strip():
            raise f.error("source", "say where the allowance comes from (a public document, or clustercheck's choice)")
        f.done()
        if isinstance(allow, int) and 0 <= allow <= MAX_ALLOW:
            out[name] = Allowance(name, allow, False, source, f"{file}:{f.line_of('allow')}")
        elif isinstance(allow, str) and len(allow) <= 40 and (m := _RATE.match(allow)) \
                and float(m.group(1)) <= MAX_ALLOW:  # 400 nines read as inf, which no judge can count with
            out[name] = Allowance(name, float(m.group(1)), True, source, f"{file}:{f.line_of('allow')}")
        else:
            raise f.error("allow", f"expected a count from 0 to {MAX_ALLOW:,} or a rate such as 32/min, "
                                   f"got {show(allow)}")
    return out


def allowance_for(name: str, allowances: Mapping[str, Allowance]) -> Allowance:
    """The allowance of the longest dotted prefix of `name` (kernel.xid.79, kernel.xid, kernel)."""
    parts = name.split(".")
    for n in range(len(parts), 0, -1):
        found = allowances.get(".".join(parts[:n]))
        if found is not None:
            return found
    return NONE


@dataclass(frozen=True)
class Finding:
    increase: Increase
    allowance: Allowance
    allowed: int

    @property
    def passed(self) -> bool:
        return self.increase.amount <= self.allowed

    def text(self, seconds: float) -> str:
        return f"{self.increase.text()} in {seconds:.0f} s; allowed {self.allowance.describe(seconds)}"


@dataclass(frozen=True)
class Judgement:
    """One node's window: every increase against its allowance, and what kept it from being judged."""

    host: str
    seconds: float
    findings: tuple[Finding, ...]
    errors: tuple[ReadError, ...]
    notes: tuple[str, ...] = ()  # what the node has not got, so not judged and not an error (Delta.notes)

    @property
    def failed(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if not f.passed)

    @property
    def vanished(self) -> tuple[ReadError, ...]:
        """Devices or counters gone during the window: the hardware's failure, not the harness's."""
        return tuple(e for e in self.errors if e.kind == "vanished")

    @property
    def harness_errors(self) -> tuple[ReadError, ...]:
        """Unreadable, saturated or reset counters and lost log lines: the window cannot be judged (for a
        ReadError naming its counter, that counter is `not judged`)."""
        return tuple(e for e in self.errors if e.kind != "vanished")


def judge(d: Delta, allowances: Mapping[str, Allowance] | None = None) -> Judgement:
    rules = DEFAULTS if allowances is None else allowances
    findings = []
    for inc in d.increases:
        allowance = allowance_for(inc.name, rules)
        findings.append(Finding(inc, allowance, allowance.allowed(d.seconds)))
    return Judgement(d.host, d.seconds, tuple(findings), d.errors, d.notes)
