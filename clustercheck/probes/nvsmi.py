"""`nvidia-smi -q` (also `-a`) as data: the header and one record per GPU, keyed by indented path
("PCI/GPU Link Info/Link Width/Current"). Shared by the pcie-link, ecc, throttle and versions probes."""

from __future__ import annotations

import re
from dataclasses import dataclass

from clustercheck.probes import tool
from clustercheck.probes.base import ProbeParseError, ProbeSkip
from clustercheck.toolout import evidence_lines

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

    def head(self, key: str) -> str | None:
        return dict(self.header).get(key)


def parse(text: str) -> NvsmiReport:
    tool.refuse_crashed(text)
    header: list[tuple[str, str]] = []
    gpus: list[NvsmiGpu] = []
    current: list[tuple[str, str]] | None = None
    bus = ""
    stack: list[tuple[int, str]] = []  # (indent, section name)
    for line in evidence_lines(text):
        if not line.strip() or line.strip().startswith("=") or line.strip() == "...":
            continue
        m = _GPU.match(line)
        if m:
            if current is not None:
                gpus.append(NvsmiGpu(bus, len(gpus), tuple(current)))
            current, bus, stack = [], m.group(1), []
            continue
        indent = len(line) - len(line.lstrip())
        key, sep, value = line.strip().partition(":")
        key, value = key.strip(), value.strip()
        if current is None:
            if sep and indent == 0:
                header.append((key, value))
            continue
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = "/".join([s for _, s in stack] + [key])
        if sep and value:
            current.append((path, value))
        else:
            stack.append((indent, key))
    if current is not None:
        gpus.append(NvsmiGpu(bus, len(gpus), tuple(current)))
    if not gpus:  # a header alone is not enough: nvbandwidth prints "Driver Version: ..." too
        raise ProbeParseError("expected `nvidia-smi -q` output: the NVSMI LOG header and one 'GPU 00000000:19:00.0' "
                              "section per GPU")
    return NvsmiReport(tuple(header), tuple(gpus))


def run(*args: str) -> str:
    """stdout of `nvidia-smi ARGS`: ProbeSkip only without the binary (no NVIDIA driver here); a non-zero
    exit, e.g. a GPU lost from the bus, is a ToolError naming the command, its status and its stderr."""
    return tool.run(["nvidia-smi", *args], missing="nvidia-smi not found: no NVIDIA driver on this machine")


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
        if sep and index.strip().isdigit() and _BUS.fullmatch(bus.strip()):
            out[int(index)] = bus_id(bus)
    return out


def collect_text() -> str:
    return run("-q")


def number(value: str | None) -> float | None:
    """'33 C' -> 33.0, '16x' -> 16.0, 'N/A' -> None."""
    if value is None:
        return None
    m = re.match(r"^\s*(-?\d+(?:\.\d+)?)", value)
    return float(m.group(1)) if m else None
