"""System probes: read a tool's text (captured or live), parse it into frozen facts, judge them.

Every probe module defines `parse(text)`, `collect()` and `judge(parsed, expect)` and a `PROBE` entry.
`collect()` returns text (parsed by `parse`) or already-parsed facts, or raises `ProbeSkip` when the tool
or hardware is absent. Judging the same text offline (`clustercheck probe NAME --input FILE`) and live
gives the same verdicts. Nothing heavy is imported here: modules load only when a probe is asked for.
"""

from __future__ import annotations

import importlib
import re
from dataclasses import replace
from typing import Any, Mapping

from clustercheck.probes.base import Probe, ProbeOutcome, ProbeParseError, ProbeSkip, ProbeVerdict, outcome_of

# CLI name -> module under clustercheck.probes
_MODULES = {
    "versions": "versions",
    "env": "env",
    "pci-acs": "pci_acs",
    "pcie-link": "pcie_link",
    "topo": "topo",
    "numa": "numa",
    "nvlink": "nvlink",
    "fabric": "fabric",
    "ecc": "ecc",
    "throttle": "throttle",
    "gds": "gds",
    "gdsio": "gdsio",
    "ib": "ib",
    "ib-write-bw": "ib_write_bw",
    "nccl-tests": "nccl_tests",
    "nccl-log": "nccl_log",
    "nvbandwidth": "nvbandwidth",
    "amd-smi": "amd_smi",
    "amd-host": "amd_host",
}
NAMES: tuple[str, ...] = tuple(_MODULES)


def get(name: str) -> Probe:
    module = _MODULES.get(name) or _MODULES.get(name.replace("_", "-"))
    if module is None:
        raise KeyError(f"no probe {name!r}; known: {', '.join(NAMES)}")
    return importlib.import_module(f"clustercheck.probes.{module}").PROBE


def run_live(probe: Probe, expect: Mapping[str, Any]) -> ProbeOutcome:
    """Collect on this machine and judge. A skip is `skipped`; a crash or unreadable output is `error`.
    GPU subjects are named by PCI bus id alongside nvidia-smi's index (see `name_gpus`)."""
    from clustercheck.probes.tool import ToolReported

    try:
        collected = probe.collect()
        parsed = probe.parse(collected) if isinstance(collected, str) else collected
        verdicts = tuple(probe.judge(parsed, expect))
        if probe.by_index:
            from clustercheck.probes import nvsmi

            verdicts = name_gpus(verdicts, nvsmi.bus_ids())
    except ProbeSkip as exc:
        return ProbeOutcome(probe.name, "skipped", reason=exc.reason)
    except ToolReported as exc:  # the tool printed its own error line (a GPU lost): a failure naming it
        return outcome_of(probe.name, exc.verdicts)
    except ProbeParseError as exc:
        return ProbeOutcome(probe.name, "error", reason=f"could not parse the live output: {exc}")
    except Exception as exc:  # a probe bug or an OS surprise is a harness error, never a hardware failure
        return ProbeOutcome(probe.name, "error", reason=f"{type(exc).__name__}: {exc}")
    if not verdicts:
        return ProbeOutcome(probe.name, "error", reason="the probe produced no verdict")
    return outcome_of(probe.name, verdicts)  # judged by its worst verdict (probes/base.py)


_GPU_NAME = re.compile(r"\bGPU(\d+)\b(?! \()")


def name_gpus(verdicts: tuple[ProbeVerdict, ...], bus_ids: Mapping[int, str]) -> tuple[ProbeVerdict, ...]:
    """Subjects "GPU3" and "GPU0-GPU3" as "GPU3 (0000:19:00.0)": an index alone is ambiguous (nvidia-smi
    numbers GPUs in PCI order, CUDA by speed unless CUDA_DEVICE_ORDER=PCI_BUS_ID, and CUDA_VISIBLE_DEVICES
    renumbers), the bus id is what a technician finds in the chassis and what measurements name too.
    A subject already carrying its bus id, or an index the map lacks, is left as it is."""
    if not bus_ids:
        return verdicts

    def one(m: re.Match[str]) -> str:
        bus = bus_ids.get(int(m.group(1)))
        return f"{m.group(0)} ({bus})" if bus else m.group(0)

    return tuple(replace(v, subject=_GPU_NAME.sub(one, v.subject)) for v in verdicts)
