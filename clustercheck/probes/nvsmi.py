"""`nvidia-smi -q` (also `-a`) as data: the header and one record per GPU, keyed by indented path
("PCI/GPU Link Info/Link Width/Current"). Shared by the pcie-link, ecc, throttle, fabric and versions probes,
with the rules every one of them judges the report's GPUs by: `coverage` (the sections against the header)
and `listed` (the GPUs against the platform's `gpu_count`)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from clustercheck.probes import tool
from clustercheck.probes.base import ProbeParseError, ProbeSkip, ProbeVerdict, count_of, not_judged
from clustercheck.toolout import count, evidence_lines

_BUS = re.compile(r"[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]")
_GPU = re.compile(rf"^GPU ({_BUS.pattern})$")


@dataclass(frozen=True)
class NvsmiGpu:
    bus_id: str
    index: int                                  # order in the output, as nvidia-smi numbers GPUs
    fields: tuple[tuple[str, str], ...]         # (path, value), paths joined by "/"

    def get(self, *paths: str) -> str | None:
        """The first of `paths` present (layouts differ across driver versions)."""
        d = dict(self.fields)
        for p in paths:
            if p in d:
                return d[p]
        return None

    def under(self, prefix: str) -> dict[str, str]:
        return {k[len(prefix) + 1:]: v for k, v in self.fields if k.startswith(prefix + "/")}

    @property
    def name(self) -> str:
        return f"GPU{self.index}"

    @property
    def label(self) -> str:
        """"GPU3 (0000:19:00.0)": the index and the bus id in sysfs form, as every GPU subject is named."""
        from clustercheck.nvml import bus_id

        return f"{self.name} ({bus_id(self.bus_id)})"

    @property
    def product(self) -> str:
        return self.get("Product Name") or "unknown GPU"


@dataclass(frozen=True)
class NvsmiReport:
    header: tuple[tuple[str, str], ...]
    gpus: tuple[NvsmiGpu, ...]
    missing: str = ""  # live, nvidia-smi not on PATH: why nothing was read (collect_report); judged by `without`

    def head(self, key: str) -> str | None:
        return dict(self.header).get(key)


# nvidia-smi's own error lines: a GPU it could not reach is left out of what it prints after them
ERRORS = tool.OwnErrors("nvidia-smi", ("Unable to determine the device handle", "Failed to initialize NVML",
                                       "has fallen off the bus"), rf"GPU ?({_BUS.pattern})", "GPU {}")


def parse(text: str) -> NvsmiReport:
    tool.refuse_crashed(text, ERRORS)
    header: list[tuple[str, str]] = []
    gpus: list[NvsmiGpu] = []
    current: list[tuple[str, str]] | None = None
    bus = ""
    stack: list[tuple[int, str, bool, int]] = []  # (indent, section name, nothing under it yet, line)
    ended = (0, "")                    # the line at the margin that ended the GPU sections
    for number, line in enumerate(evidence_lines(text), 1):
        if not line.strip() or line.strip().startswith("=") or line.strip() == "...":
            continue
        m = _GPU.match(line)
        if m:
            if current is not None:
                gpus.append(NvsmiGpu(bus, len(gpus), tuple(current)))
            current, bus, stack = [], m.group(1), []
            continue
        indent = len(line) - len(line.lstrip())
        if current is not None and indent == 0:
            # nvidia-smi indents every line of a GPU section: one at the margin ends its output (other lines
            # may follow, as `torch: 2.3.1` for the versions probe), never a section holding later fields
            gpus.append(NvsmiGpu(bus, len(gpus), tuple(current)))
            current, ended = None, (number, line.strip()[:60])
            continue
        if current is None and gpus and indent:
            raise ProbeParseError(f"line {number}: {line.strip()[:60]!r} is indented after line {ended[0]} "
                                  f"({ended[1]!r}) ended the section of GPU {bus}: not `nvidia-smi -q` output")
        key, sep, value = line.strip().partition(":")
        key, value = key.strip(), value.strip()
        if current is None:
            if sep and indent == 0:
                header.append((key, value))
            continue
        # nvidia-smi indents a GPU section by 4 spaces a level and puts something under every section name:
        # a line off that grid, or a name with nothing under it, is not its output, and read anyway it would
        # move the fields after it under another path, out of the probes' sight
        if indent % 4 or "\t" in line[:indent]:
            raise ProbeParseError(f"line {number}: {line.strip()[:60]!r} indented {indent} inside the section of GPU "
                                  f"{bus}, not by nvidia-smi's 4 spaces a level: not `nvidia-smi -q` output")
        if stack and stack[-1][2] and indent <= stack[-1][0]:
            raise ProbeParseError(f"line {stack[-1][3]}: section {stack[-1][1][:60]!r} of GPU {bus} has nothing under "
                                  f"it: not `nvidia-smi -q` output")
        while stack and stack[-1][0] >= indent:
            stack.pop()
        if stack:
            stack[-1] = (*stack[-1][:2], False, stack[-1][3])
        path = "/".join([s for _, s, _, _ in stack] + [key])
        if sep:  # "Name :" with nothing after it is a field left empty (a process's name), not a section
            current.append((path, value))
        else:
            stack.append((indent, key, True, number))
    if current is not None:
        gpus.append(NvsmiGpu(bus, len(gpus), tuple(current)))
    if not gpus:  # a header alone is not enough: nvbandwidth prints "Driver Version: ..." too
        raise ProbeParseError("expected `nvidia-smi -q` output: the NVSMI LOG header and one 'GPU 00000000:19:00.0' "
                              "section per GPU")
    return NvsmiReport(tuple(header), tuple(gpus))


class SmiMissing(ProbeSkip):
    """nvidia-smi is not on PATH. A skip only where the platform expects nothing that only nvidia-smi reads
    here (`without`): a container given NVML but not nvidia-smi still has the NVLinks its platform expects."""


# Where the kernel shows the NVIDIA driver loaded (a container shares the host's /proc and /sys/module)
DRIVER_SIGNS = (Path("/proc/driver/nvidia/version"), Path("/sys/module/nvidia"))


def driver_seen() -> str | None:
    """What shows an NVIDIA driver here without nvidia-smi (the kernel's files, else NVML answering with
    its version), None when nothing does: a container given NVML but not nvidia-smi has a driver."""
    loaded = next((str(p) for p in DRIVER_SIGNS if p.exists()), None)
    if loaded:
        return loaded
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            version = pynvml.nvmlSystemGetDriverVersion()
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no library, no driver, or it failing: nothing here shows one
        return None
    return f"NVML answers, driver {version.decode() if isinstance(version, bytes) else version}"


def run(*args: str) -> str:
    """stdout of `nvidia-smi ARGS`: SmiMissing (a ProbeSkip) only without the binary; a non-zero exit, e.g. a
    GPU lost from the bus, is a ToolError naming the command, its status and its stderr."""
    if tool.locate("nvidia-smi") is None:  # a non-executable nvidia-smi is a ToolError there, never "no driver"
        seen = driver_seen()
        raise SmiMissing(f"nvidia-smi not found on PATH, though an NVIDIA driver is here ({seen})" if seen else
                         "nvidia-smi not found: no NVIDIA driver on this machine")
    try:
        return tool.run(["nvidia-smi", *args], missing="nvidia-smi not found")
    except ProbeSkip as exc:  # gone between the two looks
        raise SmiMissing(exc.reason) from None


def collect_report(*args: str) -> str | NvsmiReport:
    """`run(ARGS)`'s text, or without nvidia-smi an empty report saying so, for the probe's judge to decide
    with the platform's expectations (`without`) whether that is a skip."""
    try:
        return run(*args)
    except SmiMissing as exc:
        return NvsmiReport((), (), missing=exc.reason)


def without(missing: str, expect: Mapping[str, Any], key: str, what: str) -> list[ProbeVerdict]:
    """A probe that could not run nvidia-smi: `not judged`, naming it and what the platform expects, where
    the expectation `key` asks for what only nvidia-smi reads here (NVLinks, an NVSwitch fabric), so that a
    link known down never passes as a skip; a skip otherwise."""
    want = expect.get(key)
    if not want:
        raise ProbeSkip(missing)
    return [not_judged("node", what, f"{missing}; the platform expects {key}: {want}, and nothing here reads it "
                       f"without nvidia-smi", expected=want)]


def bus_ids() -> dict[int, str]:
    """nvidia-smi's index -> PCI bus id in sysfs form ("0000:19:00.0"), the numbering its other outputs use
    (`nvlink -s`, `topo -m`). Empty where nvidia-smi is absent or does not answer: the probe that named the
    GPUs by index has already read the same driver, so its verdicts stand, by index alone."""
    try:
        text = run("--query-gpu=index,pci.bus_id", "--format=csv,noheader")
    except (ProbeSkip, tool.ToolError):
        return {}
    return parse_bus_ids(text)


def parse_bus_ids(text: str) -> dict[int, str]:
    """`nvidia-smi --query-gpu=index,pci.bus_id --format=csv,noheader` lines: "0, 00000000:19:00.0"."""
    from clustercheck.nvml import bus_id

    out: dict[int, str] = {}
    for line in text.splitlines():
        index, sep, bus = line.partition(",")
        i = count(index)
        if sep and i is not None and _BUS.fullmatch(bus.strip()):
            out[i] = bus_id(bus)
    return out


def collect_text() -> str:
    return run("-q")


def number(value: str | None) -> float | None:
    """'33 C' -> 33.0, '16x' -> 16.0, '-5' -> -5.0 (the caller judges its domain); None for 'N/A' and for
    anything that is not one number ('1e400', '1.2.3', 'nan'): never the leading digits of something else."""
    if value is None:
        return None
    m = _NUMBER.match(value)
    return float(m.group(1)) if m else None


_NUMBER = re.compile(r"^\s*(-?\d{1,15}(?:\.\d{1,15})?)(?![\d.eE])")


def _bus_key(bus: str) -> tuple[int, ...]:
    return tuple(int(part, 16) for part in re.split(r"[:.]", bus))


def coverage(report: NvsmiReport, probe: str) -> list[ProbeVerdict]:
    """The GPU sections against what the header promises (`Attached GPUs`) and against each other (a bus
    id listed twice): a section cut from the capture leaves that GPU unjudged, so the node fails, naming
    it, whichever probe reads the report. No verdict when they agree."""
    problems = []
    seen: dict[str, int] = {}
    for g in report.gpus:
        seen[g.bus_id.upper()] = seen.get(g.bus_id.upper(), 0) + 1
    twice = [b for b, k in seen.items() if k > 1]
    if twice:
        problems.append(f"GPU {', '.join(twice[:8])} listed twice")
    # nvidia-smi numbers GPUs in PCI bus order, and a GPU's index here is its place in the output: sections
    # out of that order would name each GPU by another's index
    ids = [_bus_key(g.bus_id) for g in report.gpus]
    back = next((i for i in range(1, len(ids)) if ids[i] < ids[i - 1]), None)
    if back is not None and not twice:
        problems.append(f"GPU {report.gpus[back].bus_id} comes after {report.gpus[back - 1].bus_id}: the sections are "
                        f"out of PCI bus order, so their GPU numbers cannot be told")
    raw = report.head("Attached GPUs")
    if raw is not None:
        attached = count(raw)
        if attached is None:
            problems.append(f"'Attached GPUs: {raw[:40]}' is not a count of GPUs")
        elif attached != len(report.gpus):
            problems.append(f"the header says Attached GPUs: {attached} and the capture has {len(report.gpus)} GPU "
                            f"section(s): a GPU section is cut or missing, and its GPU is not judged")
    if not problems:
        return []
    return [ProbeVerdict("node", "GPU sections", False, f"{probe}: " + "; ".join(problems), len(report.gpus),
                         raw)]


def listed(report: NvsmiReport, expect: Mapping[str, Any], what: str) -> list[ProbeVerdict]:
    """The GPUs the report lists against the platform's `gpu_count`, as nvlink counts them: one GPU of an
    8-GPU platform judged alone read as the node, the 7 others unnamed. `what` is what the missing GPUs
    leave unjudged ("ECC counters"). nvidia-smi (and NVML) number GPUs by their place in the listing, so the
    missing ones are the numbers past the last listed. No verdict without a `gpu_count`."""
    want = count_of(expect.get("gpu_count"))
    if want is None:
        return []
    have = len(report.gpus)
    if have == want:
        return [ProbeVerdict("node", "GPUs listed", True, f"{have} GPU(s) listed, as the platform has", have, want)]
    gone = [str(i) for i in range(have, min(want, have + 64))]
    missing = (f"GPU {', '.join(gone[:8])}{' and more' if want - have > 8 else ''} not listed, their {what} not "
               f"judged; " if gone else "")
    return [ProbeVerdict("node", "GPUs listed", False, f"{missing}{have} GPU(s) listed, the platform has {want}",
                         have, want)]
