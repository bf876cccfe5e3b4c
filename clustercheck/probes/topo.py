"""GPU topology matrix (`nvidia-smi topo -m`, or AMD's `amd-smi topology` / `rocm-smi --showtopo` link-type
table) against the platform's expectation.

Levels, best first: NV# (a bonded set of # NVLinks), PIX, PXB, PHB, NODE, SYS. A profile says what every
GPU pair must show (`topology.gpu_gpu: NV18`), that GPUs come in NVLink-bridged pairs
(`topology.nvlink_pairs: NV4` with `gpu_gpu: [NODE, SYS]` for the rest), and how near each GPU's closest
NIC must be (`topology.gpu_nic: [PIX, PXB]`). Without a profile, NVLink pairs must at least agree with
each other: one pair at NV12 among NV18 pairs is a degraded link.

On AMD the link type of each GPU pair is XGMI (Infinity Fabric) or PCIE; an MI300X platform expects
`topology.gpu_gpu: XGMI` for every pair. amd-smi names GPUs by bus id: they become GPU0.. in its column
order and every verdict carries the bus id beside the index.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Mapping

from clustercheck.probes.base import Probe, ProbeParseError, ProbeVerdict
from clustercheck.toolout import evidence_lines

_LEVEL = re.compile(r"^(X|SYS|NODE|PHB|PXB|PIX|NV\d+)$")
_RANK = {"PIX": 1, "PXB": 2, "PHB": 3, "NODE": 4, "SYS": 5}
_TRAILER = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID", "...")
_LEGEND = re.compile(r"^\s*(NIC\d+):\s*(\S+)\s*$")
_GPU = re.compile(r"GPU\d+")


@dataclass(frozen=True)
class TopoMatrix:
    devices: tuple[str, ...]                       # column order: GPU0.., NIC0.. or mlx5_0..
    links: tuple[tuple[str, str, str], ...]        # (row, column, level) for every off-diagonal cell
    numa: tuple[tuple[str, str], ...] = ()         # GPU -> NUMA Affinity
    nic_names: tuple[tuple[str, str], ...] = ()    # NIC0 -> mlx5_0 from the NIC legend
    bus_ids: tuple[tuple[str, str], ...] = ()      # GPU0 -> 0000:0c:00.0 where the tool names GPUs by bus id
    problems: tuple[str, ...] = ()                 # a device missing, listed twice or contradicting itself

    # Lookups are cached: judging walks every GPU pair, and a search of `links` per lookup made a
    # 128-device matrix take seconds (n^2 lookups of n^2 cells).
    @cached_property
    def gpus(self) -> tuple[str, ...]:
        return tuple(d for d in self.devices if _GPU.fullmatch(d))

    @cached_property
    def nics(self) -> tuple[str, ...]:
        gpus = set(self.gpus)
        return tuple(d for d in self.devices if d not in gpus)

    @cached_property
    def _by_pair(self) -> dict[tuple[str, str], str]:
        return {(r, c): lv for r, c, lv in self.links}

    def level(self, a: str, b: str) -> str:
        return self._by_pair[(a, b)]

    def nic_label(self, nic: str) -> str:
        name = dict(self.nic_names).get(nic)
        return f"{nic} ({name})" if name else nic


# the first cell of a device's row: GPU3, NIC0, mlx5_2 (older drivers name the NICs by their RDMA device)
_DEVICE = re.compile(r"(?:GPU|NIC)\d{1,4}|mlx\d_\d{1,4}")


def _split(line: str) -> list[str]:
    return [c.strip() for c in line.split("\t")] if "\t" in line else re.split(r"\s{2,}", line.strip())


# AMD: amd-smi's "LINK TYPE TABLE:" (rows and columns are bus ids, SELF on the diagonal) and rocm-smi's
# "Link Type between two GPUs" (GPU0.., 0 on the diagonal)
_AMD_TABLE = re.compile(r"^\s*LINK TYPE TABLE:\s*$|=+ Link Type between two GPUs =+")
_AMD_SELF = ("SELF", "0")
_BDF = re.compile(r"^[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")
_ROCM_NUMA = re.compile(r"^GPU\[(\d+)\]\s*: \(Topology\) Numa Node: (\S+)")


def _parse_amd(lines: list[str], start: int) -> TopoMatrix:
    header = lines[start + 1].split() if start + 1 < len(lines) else []
    if not header or not all(_BDF.match(h) or _GPU.fullmatch(h) for h in header):
        raise ProbeParseError(f"line {start + 2}: expected the GPUs (bus ids or GPU0 GPU1 ...) under the link-type title")
    names = [h if _GPU.fullmatch(h) else f"GPU{i}" for i, h in enumerate(header)]
    by_label = dict(zip(header, names))
    links: list[tuple[str, str, str]] = []
    seen: list[str] = []
    problems = _twice(header, "column")
    for number, line in enumerate(lines[start + 2:], start + 3):
        cells = line.split()
        if not cells or cells[0] not in by_label:
            break  # the table ends at a blank line or the next table's title
        if len(cells) - 1 != len(header):
            raise ProbeParseError(f"line {number}: row {cells[0]} has {len(cells) - 1} cells for {len(header)} GPUs")
        row = by_label[cells[0]]
        if row in seen:
            problems.append(f"row {cells[0]} listed twice (again at line {number})")
            continue
        for col, value in zip(names, cells[1:]):
            if col != row:
                links.append((row, col, "X" if value in _AMD_SELF else value.upper()))
        seen.append(row)
    if not seen:
        raise ProbeParseError(f"line {start + 2}: no GPU rows under the link-type table")
    numa = tuple((f"GPU{m.group(1)}", m.group(2)) for m in map(_ROCM_NUMA.match, lines) if m)
    bus = tuple((n, h.lower()) for h, n in zip(header, names) if _BDF.match(h))
    problems += [f"{h} has a column and no row: its links are not in the capture" for h, n in by_label.items()
                 if n not in seen]
    kept = tuple(l for l in links if l[1] in seen)
    return TopoMatrix(tuple(dict.fromkeys(n for n in names if n in seen)), kept, numa, (), bus,
                      problems=tuple(problems + _asymmetric(kept)))


def parse_any(text: str) -> TopoMatrix:
    """The topo probe's input: AMD's link-type table where the text has one, else `nvidia-smi topo -m`."""
    lines = evidence_lines(text)
    amd = next((i for i, l in enumerate(lines) if _AMD_TABLE.search(l)), None)
    if amd is not None:
        return _parse_amd(lines, amd)
    try:
        return parse(text)
    except ProbeParseError as exc:
        raise ProbeParseError(f"{exc}, or AMD's `amd-smi topology` / `rocm-smi --showtopo` with its link-type "
                              f"table") from None


def parse(text: str) -> TopoMatrix:
    """`nvidia-smi topo -m` (the numa probe reads only this: AMD's tables name no NIC)."""
    lines = evidence_lines(text)
    # the header is indented (its first cell is empty); rows start at column 0 with the device name
    head = next((i for i, l in enumerate(lines) if re.match(r"^\s+GPU0(\s|$)", l)), None)
    if head is None:
        raise ProbeParseError("expected `nvidia-smi topo -m` output: a header line with GPU0 GPU1 ... and one row per device")
    cols = [c for c in _split(lines[head]) if c]
    devices = []
    for c in cols:
        if c in _TRAILER:
            break
        devices.append(c)
    trailer = cols[len(devices):]
    numa_at = trailer.index("NUMA Affinity") if "NUMA Affinity" in trailer else None
    columns = set(devices)
    links: list[tuple[str, str, str]] = []
    numa: list[tuple[str, str]] = []
    seen: list[str] = []
    problems = _twice(devices, "column")
    for number, line in enumerate(lines[head + 1:], head + 2):
        cells = _split(line)
        if not cells or cells[0] not in columns:
            if seen and not line.strip():
                break  # the matrix ends at the first blank line after it
            if cells and _DEVICE.fullmatch(cells[0]):  # a device's row whose column was cut: never dropped silently
                problems.append(f"{cells[0]} has a row and no column: its links are not in the capture (line {number})")
            continue
        name, values = cells[0], cells[1:]
        if len(values) < len(devices):
            raise ProbeParseError(f"line {number}: row {name} has {len(values)} cells for {len(devices)} devices")
        if name in seen:
            problems.append(f"row {name} listed twice (again at line {number})")
            continue
        for col, value in zip(devices, values):
            if not _LEVEL.match(value):
                raise ProbeParseError(f"line {number}: row {name}, column {col}: {value[:40]!r} is not a topology "
                                      f"level (X, NV#, PIX, PXB, PHB, NODE, SYS)")
            if (col == name) != (value == "X"):
                problems.append(f"row {name}, column {col} reads {value}: X is a device's own cell and only that")
            if col != name:
                links.append((name, col, value))
        if numa_at is not None and len(values) > len(devices) + numa_at and name.startswith("GPU"):
            numa.append((name, values[len(devices) + numa_at]))
        seen.append(name)
    if not [d for d in seen if d.startswith("GPU")]:
        raise ProbeParseError("expected `nvidia-smi topo -m` rows starting with GPU0, GPU1, ... under the header")
    legend = tuple((m.group(1), m.group(2)) for m in map(_LEGEND.match, lines) if m)
    rows = set(seen)
    problems += [f"{d} has a column and no row: its links are not in the capture" for d in dict.fromkeys(devices)
                 if d not in rows]
    kept = tuple(l for l in links if l[1] in rows)
    return TopoMatrix(tuple(dict.fromkeys(d for d in devices if d in rows)), kept, tuple(numa), legend,
                      problems=tuple(problems + _asymmetric(kept)))


def _twice(names: list[str], what: str) -> list[str]:
    counts: dict[str, int] = {}
    for n in names:
        counts[n] = counts.get(n, 0) + 1
    return [f"{what} {n} listed twice" for n, k in counts.items() if k > 1]


def _asymmetric(links: tuple[tuple[str, str, str], ...]) -> list[str]:
    """A link read one way and another the other way: the matrix contradicts itself."""
    by_pair = {(r, c): lv for r, c, lv in links}
    return [f"{r}-{c} reads {lv} one way and {by_pair[(c, r)]} the other" for r, c, lv in links
            if r < c and (c, r) in by_pair and by_pair[(c, r)] != lv]


def _levels(value: object) -> tuple[str, ...]:
    return tuple(value) if isinstance(value, list) else (str(value),)


def judge(m: TopoMatrix, expect: Mapping[str, Any]) -> list[ProbeVerdict]:
    out = _judge(m, expect)
    if not m.bus_ids:
        return out
    from clustercheck.probes import name_gpus

    return list(name_gpus(tuple(out), {int(g[3:]): bus for g, bus in m.bus_ids}))


def _judge(m: TopoMatrix, expect: Mapping[str, Any]) -> list[ProbeVerdict]:
    topo: Mapping[str, Any] = expect.get("topology") or {}
    gpus = m.gpus
    out: list[ProbeVerdict] = []
    if m.problems:  # judged on what it shows, and failed for what it does not show whole
        more = f"; and {len(m.problems) - 8} more" if len(m.problems) > 8 else ""
        out.append(ProbeVerdict("node", "topology matrix", False, "; ".join(m.problems[:8]) + more,
                                len(m.problems), 0))
    out.extend(gpu_count(m, expect))
    pairs = [(a, b) for i, a in enumerate(gpus) for b in gpus[i + 1:]]
    bridged: set[tuple[str, str]] = set()
    if "nvlink_pairs" in topo:
        want = topo["nvlink_pairs"]
        for g in gpus:
            partners = [h for h in gpus if h != g and m.level(g, h) == want]
            ok = len(partners) == 1
            out.append(ProbeVerdict(g, "NVLink bridge partner", ok,
                                    f"bridged to {partners[0]} at {want}" if ok else
                                    f"{len(partners)} GPUs at {want} ({', '.join(partners) or 'none'}); expected exactly one",
                                    measured=len(partners), expected=1))
            bridged.update((g, h) for h in partners)
    if "gpu_gpu" in topo:
        allowed = _levels(topo["gpu_gpu"])
        bad = [(a, b) for a, b in pairs if (a, b) not in bridged and m.level(a, b) not in allowed]
        for a, b in bad:
            out.append(ProbeVerdict(f"{a}-{b}", "GPU link level", False,
                                    f"{m.level(a, b)}, expected {' or '.join(allowed)}", m.level(a, b), allowed))
        if not bad:
            out.append(ProbeVerdict("GPU pairs", "GPU link level", True,
                                    f"all {len(pairs) - len(bridged) // 2} pairs at {' or '.join(allowed)}", expected=allowed))
    elif "nvlink_pairs" not in topo:
        nv = {p: int(m.level(*p)[2:]) for p in pairs if m.level(*p).startswith("NV")}
        top = max(nv.values(), default=0)
        weak = [p for p, n in nv.items() if n < top]
        for a, b in weak:
            out.append(ProbeVerdict(f"{a}-{b}", "GPU link level", False,
                                    f"NV{nv[(a, b)]} while other pairs have NV{top}: degraded NVLink bonding",
                                    f"NV{nv[(a, b)]}", f"NV{top}"))
        if not weak:
            summary = ", ".join(f"{lv} x{n}" for lv, n in _count(m.level(*p) for p in pairs))
            out.append(ProbeVerdict("GPU pairs", "GPU link level", True, f"{len(gpus)} GPUs; pairs: {summary or 'none'}"))
    if "gpu_nic" in topo:
        allowed = _levels(topo["gpu_nic"])
        for g in gpus:
            best = _nearest_nic(m, g)
            ok = best is not None and best[1] in allowed
            out.append(ProbeVerdict(g, "nearest NIC", ok,
                                    f"{m.nic_label(best[0])} at {best[1]}" if best else "no NIC in the matrix",
                                    best[1] if best else None, allowed))
    return out


def gpu_count(m: TopoMatrix, expect: Mapping[str, Any]) -> list[ProbeVerdict]:
    """The matrix's GPUs against the platform's `gpu_count` (topo and numa read the same matrix)."""
    want = expect.get("gpu_count")
    if want is None:
        return []
    n = len(m.gpus)
    return [ProbeVerdict("node", "GPUs in topology", n == want, f"{n} GPU(s) in the matrix, platform expects {want}",
                         n, want)]


def _nearest_nic(m: TopoMatrix, gpu: str) -> tuple[str, str] | None:
    options = [(n, m.level(gpu, n)) for n in m.nics]
    return min(options, key=lambda o: _RANK.get(o[1], 0)) if options else None


def _count(levels: Any) -> list[tuple[str, int]]:
    counts: dict[str, int] = {}
    for lv in levels:
        counts[lv] = counts.get(lv, 0) + 1
    return sorted(counts.items())


def collect_text() -> str:
    """nvidia-smi, else amd-smi, else (older ROCm) rocm-smi. A failing tool (a GPU lost from the bus) is an
    error naming the command; only when none is installed does the probe skip."""
    from clustercheck.probes import nvsmi, tool
    from clustercheck.probes.base import ProbeSkip

    try:
        return nvsmi.run("topo", "-m")
    except ProbeSkip as nvidia:
        for argv in (["amd-smi", "topology", "-t"], ["rocm-smi", "--showtopotype", "--showtoponuma"]):
            try:
                return tool.run(argv, f"{argv[0]} is not installed")
            except ProbeSkip:
                continue
        raise ProbeSkip(f"{nvidia.reason}; neither amd-smi nor rocm-smi is installed either") from None


PROBE = Probe(
    name="topo",
    description="GPU topology matrix (NV#/PIX/PXB/PHB/NODE/SYS) vs the platform's expectation",
    input_help="`nvidia-smi topo -m`, `amd-smi topology` or `rocm-smi --showtopo` output",
    scope="node",
    parse=parse_any,
    collect=collect_text,
    judge=judge,
    expect_keys=("gpu_count", "topology"),
    by_index=True,
)
