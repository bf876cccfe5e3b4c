"""System probes: read a tool's text (captured or live), parse it into frozen facts, judge them.

Every probe module defines `parse(text)`, `collect()` and `judge(parsed, expect)` and a `PROBE` entry.
`collect()` returns text (parsed by `parse`) or already-parsed facts, or raises `ProbeSkip` when the tool
or hardware is absent. Judging the same text offline (`clustercheck probe NAME --input FILE`) and live
gives the same verdicts. Nothing heavy is imported here: modules load only when a probe is asked for.
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass, replace
from typing import Any, Callable, Mapping

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
    "ib": "ib",
    "nccl-tests": "nccl_tests",
    "nvbandwidth": "nvbandwidth",
    "amd-smi": "amd_smi",
    "amd-host": "amd_host",
}
NAMES: tuple[str, ...] = tuple(_MODULES)


class ProbeParseError(ValueError):
    """The text is not what the probe reads; the message says what was expected."""


class ProbeSkip(Exception):
    """The tool or hardware the probe needs is absent here; the message is the reason."""

    @property
    def reason(self) -> str:
        return str(self.args[0]) if self.args else "not applicable"


@dataclass(frozen=True)
class ProbeVerdict:
    subject: str          # what was judged: a bridge BDF "0000:02:08.0", "GPU3", "mlx5_0/1", "NCCL_P2P_DISABLE"
    what: str             # the property: "ACS redirect", "link width", "active NVLinks"
    passed: bool
    detail: str = ""      # one line a person can act on
    measured: object = None
    expected: object = None

    def line(self) -> str:
        return f"{self.subject}: {self.what}: {self.detail}" if self.detail else f"{self.subject}: {self.what}"


@dataclass(frozen=True)
class Probe:
    name: str
    description: str
    input_help: str       # what --input FILE must hold
    scope: str            # "node" or "gpu": what the verdicts are about
    parse: Callable[[str], Any]
    collect: Callable[[], Any]
    judge: Callable[[Any, Mapping[str, Any]], list[ProbeVerdict]]
    expect_keys: tuple[str, ...] = ()
    by_index: bool = False  # subjects name GPUs by nvidia-smi index only ("GPU3"): live runs add the bus id


@dataclass(frozen=True)
class ProbeOutcome:
    name: str
    outcome: str          # passed | failed | skipped | error
    verdicts: tuple[ProbeVerdict, ...] = ()
    reason: str = ""      # for skipped and error

    @property
    def failures(self) -> tuple[ProbeVerdict, ...]:
        return tuple(v for v in self.verdicts if not v.passed)


def get(name: str) -> Probe:
    module = _MODULES.get(name) or _MODULES.get(name.replace("_", "-"))
    if module is None:
        raise KeyError(f"no probe {name!r}; known: {', '.join(NAMES)}")
    return importlib.import_module(f"clustercheck.probes.{module}").PROBE


def run_live(probe: Probe, expect: Mapping[str, Any]) -> ProbeOutcome:
    """Collect on this machine and judge. A skip is `skipped`; a crash or unreadable output is `error`.
    GPU subjects are named by PCI bus id alongside nvidia-smi's index (see `name_gpus`)."""
    try:
        collected = probe.collect()
        parsed = probe.parse(collected) if isinstance(collected, str) else collected
        verdicts = tuple(probe.judge(parsed, expect))
        if probe.by_index:
            from clustercheck.probes import nvsmi

            verdicts = name_gpus(verdicts, nvsmi.bus_ids())
    except ProbeSkip as exc:
        return ProbeOutcome(probe.name, "skipped", reason=exc.reason)
    except ProbeParseError as exc:
        return ProbeOutcome(probe.name, "error", reason=f"could not parse the live output: {exc}")
    except Exception as exc:  # a probe bug or an OS surprise is a harness error, never a hardware failure
        return ProbeOutcome(probe.name, "error", reason=f"{type(exc).__name__}: {exc}")
    if not verdicts:
        return ProbeOutcome(probe.name, "error", reason="the probe produced no verdict")
    return ProbeOutcome(probe.name, "passed" if all(v.passed for v in verdicts) else "failed", verdicts)


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


# -- helpers shared by parsers ---------------------------------------------------------------

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def evidence_lines(text: str) -> list[str]:
    """Lines of tool output: ANSI escapes removed, trailing spaces dropped, and a fixture's
    '# source: ...' line plus the blank line after it skipped (captured evidence carries its origin)."""
    lines = [_ANSI.sub("", line).rstrip() for line in text.replace("\r\n", "\n").split("\n")]
    if lines and lines[0].startswith("# source:"):
        lines = lines[2:] if len(lines) > 1 and not lines[1].strip() else lines[1:]
    return lines


# Expectations live in clustercheck.expect (thresholds load them too); probes name them from here.
from clustercheck.expect import EXPECT_KEYS, TOPOLOGY_KEYS, check_expect, parse_expect_args  # noqa: E402,F401
