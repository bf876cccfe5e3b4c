"""Clock throttle reasons and temperature per GPU, from `nvidia-smi -q`.

Hardware slowdown, thermal slowdown (HW or SW) and power-brake slowdown fail: the GPU runs below its clocks
for a reason outside the workload (NVML clocks event reasons, https://docs.nvidia.com/deploy/nvml-api/; Azure treats
anything but idle and SW power cap as throttled). Temperature fails above `gpu_temp_max_c` (default 84 C,
Meta GCM check-nvidia-smi, facebookresearch/gcm gcm/health_checks) or at the GPU's own slowdown temperature;
a temperature or judged reason that reads N/A or Not Supported is `not judged`, never a pass. With the
platform's `gpu_count`, a report listing another number of GPUs fails the node (`nvsmi.listed`): the GPUs
it lacks have no clocks or temperature to judge, and are named.
"""

from __future__ import annotations

from typing import Any, Mapping

from clustercheck.probes import nvsmi
from clustercheck.probes.base import Probe, ProbeParseError, ProbeVerdict, not_judged

BAD_REASONS = ("HW Slowdown", "HW Thermal Slowdown", "HW Power Brake Slowdown", "SW Thermal Slowdown")
TEMP_MAX_C = 84.0
# Below absolute zero no reading is a temperature; at 200 C no GPU is still running (the shutdown
# temperatures nvidia-smi prints in tests/fixtures are 90 and 98 C): either is a broken reading, not a cool
# or a hot GPU.
TEMP_DOMAIN = (-273.15, 200.0)
_STATES = ("Active", "Not Active", "N/A", "Not Supported", "[N/A]", "[Not Supported]")
_JUDGED_STATES = ("Active", "Not Active")  # a judged reason reading anything else was not read


def parse(text: str) -> nvsmi.NvsmiReport:
    report = nvsmi.parse(text)
    if not any(_reasons(g) or g.get("Temperature/GPU Current Temp") for g in report.gpus):
        raise ProbeParseError("expected `nvidia-smi -q` with 'Clocks Event Reasons' (or 'Clocks Throttle "
                              "Reasons') and 'Temperature' sections")
    return report


def _reasons(g: nvsmi.NvsmiGpu) -> dict[str, str]:
    return g.under("Clocks Event Reasons") or g.under("Clocks Throttle Reasons")


def judge(report: nvsmi.NvsmiReport, expect: Mapping[str, Any]) -> list[ProbeVerdict]:
    limit = float(expect.get("gpu_temp_max_c", TEMP_MAX_C))
    out: list[ProbeVerdict] = nvsmi.coverage(report, "throttle")
    # what the capture prints for some GPU it owes for every GPU: a section one GPU lacks was not read there
    any_reasons = any(_reasons(g) for g in report.gpus)
    any_temp = any(g.get("Temperature/GPU Current Temp") is not None for g in report.gpus)
    for g in report.gpus:
        subject = g.label
        before = len(out)
        reasons = {k.rsplit("/", 1)[-1]: v for k, v in _reasons(g).items()}
        if reasons:
            active = [r for r in BAD_REASONS if reasons.get(r) == "Active"]
            # "Unknown Error" where a reason should be is an unreadable GPU, not "no slowdown"
            unread = [f"{r} = {v!r}" for r, v in reasons.items() if v not in _STATES]
            parts = ([f"active: {', '.join(active)}"] if active else []) + \
                    ([f"unreadable: {', '.join(unread[:3])}"] if unread else [])
            # a judged reason absent from the section, or N/A / Not Supported there, was not read: its
            # slowdown is unknown, never "not active"
            unjudged = [f"{r} = {reasons[r]!r}" if r in reasons else f"{r} missing" for r in BAD_REASONS
                        if reasons.get(r) not in _JUDGED_STATES]
            if unjudged and not parts:
                out.append(not_judged(subject, "clock throttling", f"{', '.join(unjudged)} in the clock event "
                                      f"reasons: a slowdown reason not read is never inactive",
                                      measured=", ".join(unjudged), expected="none of " + ", ".join(BAD_REASONS)))
            else:
                out.append(ProbeVerdict(subject, "clock throttling", not parts,
                                        "; ".join(parts) or "no hardware, thermal or power-brake slowdown",
                                        measured=", ".join(active + unread) or "none",
                                        expected="none of " + ", ".join(BAD_REASONS)))
        raw = g.get("Temperature/GPU Current Temp")
        temp = nvsmi.number(raw)
        if temp is not None and not TEMP_DOMAIN[0] < temp < TEMP_DOMAIN[1]:
            out.append(ProbeVerdict(subject, "temperature", False, f"{raw!r} is no temperature a GPU can have "
                                    f"(outside {TEMP_DOMAIN[0]:g}..{TEMP_DOMAIN[1]:g} C): unreadable", measured=raw))
        elif temp is None and raw is not None and raw not in _STATES:
            out.append(ProbeVerdict(subject, "temperature", False, f"unreadable: {raw!r}", measured=raw))
        elif temp is None and raw is not None:
            # N/A or Not Supported: as for a slowdown reason, a temperature not read is never a cool GPU,
            # even on a model that never reports one
            out.append(not_judged(subject, "temperature", f"GPU Current Temp reads {raw!r}: a temperature not "
                                  f"read is never within the limit", measured=raw, expected=f"<= {limit:g} C"))
        elif temp is not None:
            slowdown = nvsmi.number(g.get("Temperature/GPU Slowdown Temp"))
            cap = min(limit, slowdown) if slowdown and slowdown > 0 else limit
            out.append(ProbeVerdict(subject, "temperature", temp <= cap, f"{temp:g} C (limit {cap:g} C)",
                                    measured=temp, expected=f"<= {cap:g} C"))
        if len(out) > before and not reasons and any_reasons:
            out.append(not_judged(subject, "clock throttling", "no Clocks Event Reasons section for this GPU, "
                                  "which the other GPUs print: a slowdown not read is never inactive"))
        if len(out) > before and raw is None and any_temp:
            out.append(not_judged(subject, "temperature", "no GPU Current Temp for this GPU, which the other GPUs "
                                  "print: a temperature not read is never within the limit",
                                  expected=f"<= {limit:g} C"))
        if len(out) == before:  # a GPU the others' report covers but this one's does not: never silently absent
            out.append(ProbeVerdict(subject, "clock throttling", False, "no clock event reason or temperature "
                                    "readable for this GPU"))
    return out + nvsmi.listed(report, expect, "clocks and temperature")


def collect() -> str:
    return nvsmi.collect_text()


PROBE = Probe(
    name="throttle",
    description="clock throttle reasons (HW/thermal/power-brake slowdown) and GPU temperature",
    input_help="`nvidia-smi -q` output",
    scope="gpu",
    parse=parse,
    collect=collect,
    judge=judge,
    expect_keys=("gpu_temp_max_c", "gpu_count"),
)
