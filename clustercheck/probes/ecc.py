"""ECC errors, row remapping and retired pages per GPU, from NVML live or `nvidia-smi -q` text.

Limits follow Azure's check_gpu_ecc (Azure/azurehpc-health-checks customTests): a pending or failed row remap fails,
any SRAM uncorrectable error fails, SRAM correctable above 10 000 and DRAM counts above 20 000 000 fail,
more than 512 uncorrectable remapped rows fail. Pre-Ampere GPUs report retired pages instead: a pending
retirement fails, and so do more than 10 retired pages (Meta GCM check-nvidia-smi, facebookresearch/gcm).

nvidia-smi prints SRAM uncorrectable errors in two layouts: one `SRAM Uncorrectable` counter (e.g. driver
545, tests/fixtures nvidia-smi-q/h100-...), or split into `SRAM Uncorrectable Parity` and `SRAM
Uncorrectable SEC-DED` plus `SRAM Threshold Exceeded` (driver 535.247 on an A10G, NVIDIA/DCGM#232, and
later drivers). Any counter whose name starts with "SRAM Uncorrectable" counts, so a third spelling still
fails closed. A counter nvidia-smi could not read ("Unknown Error") fails the GPU instead of reading clean,
and so does an ECC mode neither Enabled, Disabled nor N/A (ECC may be off), and one that is no count ("-1", "2.5", "1e400"); a counter a rule here judges that reads N/A while
the rest of its section reads (one SRAM or DRAM count, a remap or retired-page field) is not judged, naming
the GPU and counter: all N/A is a GPU without ECC, one N/A among numbers was not read. A GPU section missing
from the capture (fewer sections than the header's `Attached GPUs`) or listed twice fails the node, and
so, with the platform's `gpu_count`, does a report listing another number of GPUs (`nvsmi.listed`): the
GPUs it lacks have no counters to judge, and are named.
"""

from __future__ import annotations

from typing import Any, Mapping

from clustercheck.probes import ecc_nvml, nvsmi
from clustercheck.probes.base import Probe, ProbeParseError, ProbeSkip, ProbeVerdict, not_judged

SRAM_CORRECTABLE_MAX = 10_000
DRAM_MAX = 20_000_000
UNC_REMAPPED_ROWS_MAX = 512
RETIRED_PAGES_MAX = 10
_SECTIONS = ("ECC Errors", "Retired Pages", "Remapped Rows")
_UNSUPPORTED = {"N/A", "[N/A]", "Not Supported", "[Not Supported]"}
_FLAGS = {"Yes", "No"}
_MODES = {"Enabled", "Disabled"}  # ECC Mode/Current as nvidia-smi prints it when read


def parse(text: str) -> nvsmi.NvsmiReport:
    report = nvsmi.parse(text)
    if not any(g.under(s) for g in report.gpus for s in _SECTIONS):
        raise ProbeParseError("expected `nvidia-smi -q` with 'ECC Errors', 'Remapped Rows' or 'Retired Pages' "
                              "sections for at least one GPU")
    return report


def _has_counters(g: nvsmi.NvsmiGpu) -> bool:
    """Counters to judge, or an ECC mode that could not be read: that GPU is no proof of "no ECC here"."""
    return any(v not in _UNSUPPORTED for s in _SECTIONS for v in g.under(s).values()) or _mode_unreadable(g)


def _mode(g: nvsmi.NvsmiGpu) -> str | None:
    return g.get("ECC Mode/Current", "Ecc Mode/Current")


def _mode_unreadable(g: nvsmi.NvsmiGpu) -> bool:
    """ECC Mode/Current that is neither Enabled, Disabled nor N/A ("Unknown Error", NVML's failed call):
    ECC could be off, and an unread mode is never clean."""
    mode = _mode(g)
    return mode is not None and mode not in _MODES and mode not in _UNSUPPORTED


def judge(report: nvsmi.NvsmiReport, expect: Mapping[str, Any]) -> list[ProbeVerdict]:
    if not report.gpus:  # nothing listed is no proof that the GPUs lack ECC
        raise ProbeParseError("no GPU listed, so no GPU's ECC counters could be read")
    if not any(_has_counters(g) for g in report.gpus):
        raise ProbeSkip("no GPU reports ECC counters (every ECC value is N/A: GPUs without ECC)")
    out: list[ProbeVerdict] = nvsmi.coverage(report, "ecc")
    for g in report.gpus:
        problems, checked = _problems(g)
        if not checked and not problems:
            problems = ["no ECC counter readable while other GPUs here report them"]
        unread = _judged_na(g)
        if unread and not problems:
            out.append(not_judged(g.label, "ECC and row remap", f"{', '.join(unread[:3])} read N/A while the other "
                                  f"counters of {'their sections' if len(unread) > 1 else 'its section'} read: a "
                                  f"counter not read is never clean", measured="N/A",
                                  expected="no pending/failed remap"))
            continue
        detail = "; ".join(problems) if problems else f"clean ({', '.join(checked)})"
        out.append(ProbeVerdict(g.label, "ECC and row remap", not problems, detail,
                                measured="; ".join(problems) or "0 errors", expected="no pending/failed remap"))
    return out + nvsmi.listed(report, expect, "ECC counters")


def _problems(g: nvsmi.NvsmiGpu) -> tuple[list[str], list[str]]:
    problems: list[str] = []
    checked: list[str] = []
    # every value here is a count, Yes/No or N/A; anything else ("Unknown Error", "GPU is lost") is a
    # counter nvidia-smi could not read, and an unread counter must not pass as zero
    unreadable = [f"{s}/{k} = {v!r}" for s in _SECTIONS for k, v in g.under(s).items()
                  if v not in _UNSUPPORTED and v not in _FLAGS and not _is_count(v)]
    mode = _mode(g)
    if _mode_unreadable(g):  # outside _SECTIONS, so checked by itself: ECC may be off
        unreadable.insert(0, f"ECC Mode/Current = {mode!r}")
    if unreadable:
        problems.append(f"counter unreadable: {', '.join(unreadable[:3])}")
    if mode == "Disabled":
        problems.append("ECC is disabled")
    remap = g.under("Remapped Rows")
    if any(v not in _UNSUPPORTED for v in remap.values()):
        checked.append("row remap")
        if remap.get("Pending") == "Yes":
            problems.append("a row remap is pending (reset the GPU)")
        if remap.get("Remapping Failure Occurred") == "Yes":
            problems.append("a row remapping failure occurred (replace the GPU)")
        unc = nvsmi.number(remap.get("Uncorrectable Error"))
        if unc is not None and unc > UNC_REMAPPED_ROWS_MAX:
            problems.append(f"{unc:.0f} rows remapped for uncorrectable errors (> {UNC_REMAPPED_ROWS_MAX})")
    for scope in ("Volatile", "Aggregate"):
        counts = g.under(f"ECC Errors/{scope}")
        if all(v in _UNSUPPORTED for v in counts.values()):
            continue
        checked.append(f"{scope.lower()} ECC")
        for key, value in counts.items():
            if key == "SRAM Threshold Exceeded" and value == "Yes":
                problems.append(f"{scope.lower()} SRAM error threshold exceeded")
            n = nvsmi.number(value)
            if n is None:
                continue
            if key.startswith("SRAM Uncorrectable") and n > 0:
                problems.append(f"{scope.lower()} {key} = {n:.0f}" + _sources(g, scope))
            elif key == "SRAM Correctable" and n > SRAM_CORRECTABLE_MAX:
                problems.append(f"{scope.lower()} SRAM correctable = {n:.0f} (> {SRAM_CORRECTABLE_MAX})")
            elif key.startswith("DRAM") and n > DRAM_MAX:
                problems.append(f"{scope.lower()} {key} = {n:.0f} (> {DRAM_MAX})")
            elif scope == "Volatile" and key == "Double Bit/Total" and n > 0:  # pre-Ampere layout
                problems.append(f"volatile double-bit (uncorrectable) errors = {n:.0f}")
    retired = g.under("Retired Pages")
    sbe, dbe = nvsmi.number(retired.get("Single Bit ECC")), nvsmi.number(retired.get("Double Bit ECC"))
    if sbe is not None or dbe is not None:
        checked.append("retired pages")
        total = (sbe or 0) + (dbe or 0)
        if total > RETIRED_PAGES_MAX:
            problems.append(f"{total:.0f} retired pages (> {RETIRED_PAGES_MAX})")
    if retired.get("Pending Page Blacklist", retired.get("Pending")) == "Yes":
        problems.append("a page retirement is pending (reset the GPU)")
    return problems, checked


def _judged_ecc_key(scope: str, key: str) -> bool:
    """The ECC Errors counters _problems judges: SRAM, DRAM, the threshold, pre-Ampere volatile double-bit.
    The others (a V100's Texture Memory, single-bit CBU) are N/A by design on GPUs that lack them."""
    return (key.startswith(("SRAM Uncorrectable", "DRAM")) or key in ("SRAM Correctable", "SRAM Threshold Exceeded")
            or (scope == "Volatile" and key == "Double Bit/Total"))


_JUDGED_FIELDS = {"Remapped Rows": ("Uncorrectable Error", "Pending", "Remapping Failure Occurred"),
                  "Retired Pages": ("Single Bit ECC", "Double Bit ECC", "Pending Page Blacklist", "Pending")}


def _judged_na(g: nvsmi.NvsmiGpu) -> list[str]:
    """Counters a rule judges that read N/A in a section whose other counters read (a section all N/A is
    a feature the GPU lacks): _problems skips N/A, so without this such a GPU passed as clean."""
    out: list[str] = []
    for scope in ("Volatile", "Aggregate"):
        counts = g.under(f"ECC Errors/{scope}")
        if any(v not in _UNSUPPORTED for v in counts.values()):
            out += [f"ECC Errors/{scope}/{k}" for k, v in counts.items()
                    if v in _UNSUPPORTED and _judged_ecc_key(scope, k)]
    for section, keys in _JUDGED_FIELDS.items():
        fields = g.under(section)
        if any(v not in _UNSUPPORTED for v in fields.values()):
            out += [f"{section}/{k}" for k in keys if fields.get(k) in _UNSUPPORTED]
    return out


def _is_count(value: str) -> bool:
    """An error count or a count of rows or pages: a whole number >= 0 ("-1" or "2.5" is no count)."""
    n = nvsmi.number(value)
    return n is not None and n >= 0 and n == int(n)


def _sources(g: nvsmi.NvsmiGpu, scope: str) -> str:
    """Where the aggregate SRAM errors were (L2, SM, ...), when the layout says."""
    if scope != "Aggregate":
        return ""
    where = [f"{k.removeprefix('SRAM ')} {v}" for k, v in g.under("ECC Errors/Aggregate Uncorrectable SRAM Sources").items()
             if (nvsmi.number(v) or 0) > 0]
    return f" (in {', '.join(where)})" if where else ""


def read_nvml() -> nvsmi.NvsmiReport:
    """The NVML boundary (tests replace it; no GPU here): counters as nvidia-smi would print them."""
    return ecc_nvml.read()


def collect() -> nvsmi.NvsmiReport | str:
    """NVML counters when NVML answers (no text layout to misread); `nvidia-smi -q` text otherwise."""
    try:
        return read_nvml()
    except ecc_nvml.NvmlUnavailable:
        return nvsmi.collect_text()


PROBE = Probe(
    name="ecc",
    description="ECC errors, row remapping and retired pages per GPU",
    input_help="`nvidia-smi -q` output",
    scope="gpu",
    parse=parse,
    collect=collect,
    judge=judge,
    expect_keys=("gpu_count",),
)
