"""ECC errors, row remapping and retired pages per GPU, from `nvidia-smi -q`.

Limits follow Azure's check_gpu_ecc (reference/healthchecks.md 1): a pending or failed row remap fails,
any SRAM uncorrectable error fails, SRAM correctable above 10 000 and DRAM counts above 20 000 000 fail,
more than 512 uncorrectable remapped rows fail. Pre-Ampere GPUs report retired pages instead: a pending
retirement fails, and so do more than 10 retired pages (Meta GCM check-nvidia-smi, healthchecks.md 3).
"""

from __future__ import annotations

from typing import Any, Mapping

from clustercheck.probes import Probe, ProbeParseError, ProbeVerdict, nvsmi

SRAM_CORRECTABLE_MAX = 10_000
DRAM_MAX = 20_000_000
UNC_REMAPPED_ROWS_MAX = 512
RETIRED_PAGES_MAX = 10


def parse(text: str) -> nvsmi.NvsmiReport:
    report = nvsmi.parse(text)
    if not any(g.under("ECC Errors") or g.under("Retired Pages") or g.under("Remapped Rows") for g in report.gpus):
        raise ProbeParseError("expected `nvidia-smi -q` with 'ECC Errors', 'Remapped Rows' or 'Retired Pages' "
                              "sections for at least one GPU")
    return report


def judge(report: nvsmi.NvsmiReport, expect: Mapping[str, Any]) -> list[ProbeVerdict]:
    out: list[ProbeVerdict] = []
    for g in report.gpus:
        subject = f"{g.name} ({g.bus_id})"
        problems: list[str] = []
        checked: list[str] = []
        mode = g.get("ECC Mode/Current", "Ecc Mode/Current")
        if mode == "Disabled":
            problems.append("ECC is disabled")
        remap = g.under("Remapped Rows")
        if remap:
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
            if not counts:
                continue
            checked.append(f"{scope.lower()} ECC")
            for key, value in counts.items():
                n = nvsmi.number(value)
                if n is None:
                    continue
                if key == "SRAM Uncorrectable" and n > 0:
                    problems.append(f"{scope.lower()} SRAM uncorrectable = {n:.0f}")
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
        if not checked and not problems:
            continue
        detail = "; ".join(problems) if problems else f"clean ({', '.join(checked)})"
        out.append(ProbeVerdict(subject, "ECC and row remap", not problems, detail,
                                measured="; ".join(problems) or "0 errors", expected="no pending/failed remap"))
    return out


def collect() -> str:
    return nvsmi.collect_text()


PROBE = Probe(
    name="ecc",
    description="ECC errors, row remapping and retired pages per GPU",
    input_help="`nvidia-smi -q` output",
    scope="gpu",
    parse=parse,
    collect=collect,
    judge=judge,
)
