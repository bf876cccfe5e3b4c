"""AMD Instinct node health from AMD's own tools: inventory, ECC/RAS counters, PCIe link, xGMI links and
temperature, read from `amd-smi` (ROCm >= 6) or, on older ROCm, `rocm-smi`'s Concise Info table.

Evidence (any mix, concatenated; each is recognised by its own layout):
- `amd-smi list` / `amd-smi static --asic --bus`: "GPU: N" blocks with BDF, MARKET_NAME, DEVICE_ID;
- `amd-smi metric --ecc --ecc-blocks --pcie`: ECC totals and per-block counts, PCIe WIDTH/SPEED;
- `amd-smi xgmi`: LINK METRIC TABLE (link type per GPU), GPU LINK PORT STATUS (U/D/X per port) and, on
  ROCm >= 7, XGMI LINK STATUS (U/D/X per GPU pair; on ROCm 6.4 that title held the per-port table);
- `amd-smi topology`: LINK TYPE TABLE (link type per GPU pair, by bus id);
- `rocm-smi` (Concise Info): one row per GPU with its device id and junction temperature.

Judged: the GPU count against the platform's (not judged without a GPU list; a GPU number missing between
those the input names is not judged by name); every GPU's uncorrectable and deferred ECC counts are 0
(a counter that reads N/A fails: it could not be read); PCIe generation and width. Where the input (or the
live run) has ECC or PCIe output, a GPU without its counters or link there (missing from it, or `ECC: N/A`)
is `not judged`, never silently left out; no xGMI port down, and
every GPU's link type XGMI where the platform expects xGMI between GPUs (`topology.gpu_gpu: XGMI`, the one
value it judges: another, such as NV18, is refused typed and not judged from a profile); no GPU pair's link
status down (or, where xGMI is expected, disabled; N/A is not judged); junction temperature.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any, Mapping

from clustercheck.probes import tool
from clustercheck.probes.amd_smi_blocks import Conflict, blocks
from clustercheck.probes.base import Probe, ProbeParseError, ProbeSkip, ProbeVerdict, not_judged
from clustercheck.toolout import count, evidence_lines

_XGMI_METRIC = re.compile(r"^GPU(\d+)\s+(\S+)\s.*?(XGMI|PCIE|N/A)\s*$")
_XGMI_ROW = re.compile(r"^GPU(\d+)\s+(\S+:\S+)\s+(.*?)\s*$")  # any GPU row of an xGMI table
_XGMI_PORTS = re.compile(r"^GPU(\d+)\s+(\S+)\s+((?:[UDX]\s*)+)$")
_LINK_TYPE = re.compile(r"(XGMI|PCIE|N/A)$")
# `amd-smi xgmi` prints up to three tables, each about something else: LINK METRIC TABLE (a link type per GPU),
# GPU LINK PORT STATUS (U/D/X per port) and XGMI LINK STATUS (ROCm >= 7: U/D/X per GPU pair, SELF, N/A; ROCm 6.4:
# per port, as GPU LINK PORT STATUS is now). A row feeds the field of the table it is in, never another's.
_METRIC, _PORTS, _STATUS = "LINK METRIC TABLE", "GPU LINK PORT STATUS", "XGMI LINK STATUS"
_PORT_CELLS = ("U", "D", "X", "N/A")
_TITLE = re.compile(r"^(?!GPU\d)[A-Za-z][\w /-]*:\s*$")  # "LINK METRIC TABLE:", "Legend:"; never "GPU0 ..."
_HEX_ID = re.compile(r"0x[0-9a-fA-F]{1,8}")
_CONCISE_ROW = re.compile(r"^(\d{1,4})\s+.*?(0x[0-9a-fA-F]{4})\b(.*)$")
_CONCISE_TEMP = re.compile(r"(\d{1,3}(?:\.\d{1,3})?)°C")
_GEN_BY_GTS = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6, 128.0: 7}


@dataclass(frozen=True)
class AmdGpu:
    index: int
    bus_id: str | None = None
    model: str | None = None
    device_id: int | None = None
    ecc: tuple[tuple[str, str], ...] = ()  # ("TOTAL_UNCORRECTABLE_COUNT", "0"), ("UMC/UNCORRECTABLE_COUNT", "0")
    pcie_width: str | None = None          # as printed: "16"
    pcie_speed: str | None = None          # "32 GT/s"
    temperature_c: float | None = None     # junction (rocm-smi Concise Info)
    xgmi_link: str | None = None           # LINK METRIC TABLE's link_type: XGMI, PCIE or N/A
    xgmi_ports: str | None = None          # GPU LINK PORT STATUS, e.g. "U U U U U U U D"
    xgmi_types: tuple[tuple[int, str], ...] = ()   # `amd-smi topology` LINK TYPE TABLE per peer GPU: (3, "PCIE")
    xgmi_status: tuple[tuple[int, str], ...] = ()  # XGMI LINK STATUS per peer GPU: (3, "U"), (5, "U/D"), (6, "N/A")
    unread: tuple[tuple[str, str], ...] = ()  # a section printed as one value: ("ECC", "N/A"), ("PCIE", "N/A")

    @property
    def subject(self) -> str:
        return f"GPU{self.index} ({self.bus_id})" if self.bus_id else f"GPU{self.index}"


@dataclass(frozen=True)
class AmdReport:
    gpus: tuple[AmdGpu, ...]
    sections: frozenset[str] = field(default_factory=frozenset)  # list, static, ecc, pcie, xgmi, concise
    conflicts: tuple[Conflict, ...] = ()  # a GPU's key read twice with two values (judged: a failed verdict)

    @property
    def inventory(self) -> bool:
        return bool(self.sections & {"list", "static", "concise"})


def _device_id(gpu: int, value: str) -> int:
    """ASIC/DEVICE_ID, e.g. 0x74a2; a value that is not one is unreadable output, never a guess."""
    if not _HEX_ID.fullmatch(value):
        raise ProbeParseError(f"GPU {gpu}: ASIC DEVICE_ID {value[:20]!r} is not a hexadecimal number")
    return int(value, 16)


def parse(text: str) -> AmdReport:
    tool.refuse_crashed(text)
    raw = evidence_lines(text)
    skipped = text.replace("\r\n", "\n").count("\n") + 1 - len(raw)  # a fixture's source note, on top
    numbered = [(n, l) for n, l in enumerate(raw, skipped + 1) if not l.lstrip().startswith("$ ")]
    lines = [l for _, l in numbered]
    gpus: dict[int, AmdGpu] = {}
    sections: set[str] = set()

    def gpu(i: int) -> AmdGpu:
        return gpus.setdefault(i, AmdGpu(i))

    keyed, conflicts = blocks(lines, [n for n, _ in numbered])
    for i, keys in keyed.items():
        g = gpu(i)
        bdf = keys.get("BDF") or keys.get("BUS/BDF")
        sections.update({"list"} if "BDF" in keys else set())
        sections.update({"static"} if any(k.startswith(("ASIC/", "BUS/")) for k in keys) else set())
        device = keys.get("ASIC/DEVICE_ID")
        ecc = tuple((k.split("/", 1)[1], v) for k, v in keys.items() if k.startswith(("ECC/", "ECC_BLOCKS/")))
        # "ECC: N/A" / "PCIE: N/A" is the section asked for and not read on this GPU: kept for its verdict
        unread = tuple((k, v) for k, v in keys.items() if k in ("ECC", "ECC_BLOCKS", "PCIE"))
        sections.update({"ecc"} if ecc or any(k.startswith("ECC") for k, _ in unread) else set())
        sections.update({"pcie"} if any(k == "PCIE" or k.startswith("PCIE/") for k in keys) else set())
        gpus[i] = replace(g, bus_id=(bdf or g.bus_id or "").lower() or None, model=keys.get("ASIC/MARKET_NAME", g.model),
                          device_id=_device_id(i, device) if device and device.startswith("0x") else g.device_id,
                          ecc=g.ecc + ecc, pcie_width=keys.get("PCIE/WIDTH", g.pcie_width),
                          pcie_speed=keys.get("PCIE/SPEED", g.pcie_speed), unread=g.unread + unread)
    concise = False
    table = ""                      # the title of the table a row is in ("" before any)
    status_cols: list[int] | None = None  # XGMI LINK STATUS's peer columns; None: its per-port form (ROCm 6.4)
    for number, line in enumerate(lines, 1):
        if "Concise Info" in line:
            concise, sections = True, sections | {"concise"}
        if _TITLE.match(line):  # only a title line: junk between a table's rows must not unseat its title
            table, status_cols = line.strip().rstrip(":").strip(), None
        m = _CONCISE_ROW.match(line) if concise else None
        if m:
            # a row whose Temp reads N/A is still a GPU: its temperature was not read, it is not absent
            g, temp = gpu(int(m.group(1))), _CONCISE_TEMP.search(m.group(3))
            gpus[g.index] = replace(g, device_id=int(m.group(2), 16),
                                    temperature_c=float(temp.group(1)) if temp else g.temperature_c)
            continue
        if table == _STATUS and line[:1].isspace() and line.split()[:1] == ["bdf"]:
            heads = line.split()[1:]
            status_cols = [int(h[3:]) for h in heads] if heads and all(re.fullmatch(r"GPU\d+", h) for h in heads) \
                else None
            continue
        m = _XGMI_ROW.match(line) if table in (_METRIC, _PORTS, _STATUS) else None
        if m:
            sections.add("xgmi")
            g = gpu(int(m.group(1)))
            g = replace(g, bus_id=g.bus_id or m.group(2).lower())
            cells = m.group(3).split()
            if table == _METRIC:
                # a link type none amd-smi documents: that GPU with what it printed, never dropped
                t = _LINK_TYPE.search(m.group(3))
                g = replace(g, xgmi_link=t.group(1) if t else f"unrecognised: {m.group(3)[-40:]!r}")
            elif table == _STATUS and status_cols is not None:
                if len(cells) != len(status_cols):
                    raise ProbeParseError(f"line {number}: XGMI LINK STATUS row GPU{g.index} has {len(cells)} cells "
                                          f"for {len(status_cols)} GPUs")
                g = replace(g, xgmi_status=tuple((p, c) for p, c in zip(status_cols, cells) if p != g.index))
            else:
                g = replace(g, xgmi_ports=" ".join(cells))
            gpus[g.index] = g
            continue
        if table:
            continue
        # rows before any title (a capture cut above its table): as each row's own layout says
        m = _XGMI_PORTS.match(line)
        if m:
            sections.add("xgmi")
            g = gpu(int(m.group(1)))
            gpus[g.index] = replace(g, bus_id=g.bus_id or m.group(2).lower(), xgmi_ports=" ".join(m.group(3).split()))
            continue
        m = _XGMI_METRIC.match(line)
        if m and ":" in m.group(2):
            sections.add("xgmi")
            g = gpu(int(m.group(1)))
            gpus[g.index] = replace(g, bus_id=g.bus_id or m.group(2).lower(), xgmi_link=m.group(3))
    _link_types(lines, gpus, sections)
    if not gpus:
        raise ProbeParseError("expected amd-smi output (list, static, metric --ecc/--pcie, xgmi: 'GPU: N' blocks or "
                              "the xGMI tables) or rocm-smi's Concise Info table")
    return AmdReport(tuple(gpus[i] for i in sorted(gpus)), frozenset(sections), conflicts)


def _link_types(lines: list[str], gpus: dict[int, AmdGpu], sections: set[str]) -> None:
    """`amd-smi topology`'s LINK TYPE TABLE: the link type of every GPU pair, rows and columns by bus id. It is
    kept per pair: LINK METRIC TABLE's one link_type per GPU reads XGMI when any of its links is XGMI, so a
    PCIE pair between two GPUs whose other links are XGMI shows only here. A bus id another section names
    is that GPU; else the column's place (amd-smi prints its GPUs in order), never a GPU of another bus id."""
    for start in [i for i, l in enumerate(lines) if l.strip() == "LINK TYPE TABLE:"]:
        header = lines[start + 1].split() if start + 1 < len(lines) else []
        known = {g.bus_id: g.index for g in gpus.values() if g.bus_id}
        index = {bdf: known.get(bdf.lower(), n) for n, bdf in enumerate(header)}
        for bdf, i in index.items():
            if i in gpus and gpus[i].bus_id not in (None, bdf.lower()):
                raise ProbeParseError(f"line {start + 2}: LINK TYPE TABLE column {bdf} would be GPU{i}, which the "
                                      f"input names {gpus[i].bus_id}")
        for number, line in enumerate(lines[start + 2:], start + 3):
            cells = line.split()
            if not cells or cells[0] not in index:
                break  # a blank line or the next table's title
            if len(cells) - 1 != len(header):
                raise ProbeParseError(f"line {number}: LINK TYPE TABLE row {cells[0]} has {len(cells) - 1} cells "
                                      f"for {len(header)} GPUs")
            sections.add("topology")
            g = gpus.setdefault(index[cells[0]], AmdGpu(index[cells[0]]))
            gpus[g.index] = replace(g, bus_id=g.bus_id or cells[0].lower(), xgmi_types=tuple(
                (index[h], c.upper()) for h, c in zip(header, cells[1:]) if index[h] != g.index))


def _number(text: str) -> int | None:
    return count(text)


def _ecc(g: AmdGpu) -> ProbeVerdict:
    bad = [(k, v) for k, v in g.ecc if ("UNCORRECTABLE" in k or "DEFERRED" in k) and _number(v) != 0]
    unread = [k for k, v in bad if _number(v) is None]
    correctable = sum(_number(v) or 0 for k, v in g.ecc if k == "TOTAL_CORRECTABLE_COUNT")
    if not bad:
        return ProbeVerdict(g.subject, "ECC", True, f"0 uncorrectable, 0 deferred; {correctable} correctable", 0, 0)
    listed = ", ".join(f"{k} {v}" for k, v in bad)
    why = "could not be read" if unread and len(unread) == len(bad) else "uncorrectable/deferred errors"
    return ProbeVerdict(g.subject, "ECC", False, f"{why}: {listed}", listed, 0)


def _printed(g: AmdGpu, prefix: str) -> str:
    said = [f"{k}: {v}" for k, v in g.unread if k.startswith(prefix)]
    return f" (it prints {', '.join(said)})" if said else ""


def _pcie(g: AmdGpu, expect: Mapping[str, Any]) -> list[ProbeVerdict]:
    out = []
    speed = re.match(r"([\d.]+)\s*GT/s", g.pcie_speed or "")
    # a GPU amd-smi lists whose link reads x0 or 0 GT/s, or a width or speed that reads as none, has no
    # working link: failed whatever the platform expects, as the NVIDIA pcie-link probe fails x0
    down = [f"{k} {v!r}" for k, v, n in (("WIDTH", g.pcie_width, _number(g.pcie_width or "")),
                                         ("SPEED", g.pcie_speed, float(speed.group(1)) if speed else None))
            if v is not None and not n]
    if down:
        return [ProbeVerdict(g.subject, "PCIe link", False, f"link down: {', '.join(down)}", ", ".join(down),
                             "a trained link")]
    gen = _GEN_BY_GTS.get(float(speed.group(1))) if speed else None
    if expect.get("pcie_gen") is not None:
        want = expect["pcie_gen"]
        out.append(ProbeVerdict(g.subject, "PCIe generation", gen is not None and gen >= want,
                                f"{g.pcie_speed or 'not read'} (Gen{gen or '?'}), platform expects Gen{want}", gen, want))
    if expect.get("pcie_width") is not None:
        want, width = expect["pcie_width"], _number(g.pcie_width or "")
        out.append(ProbeVerdict(g.subject, "PCIe width", width is not None and width >= want,
                                f"x{g.pcie_width or '?'}, platform expects x{want}", width, want))
    return out


def _xgmi(g: AmdGpu, expect_xgmi: bool, xgmi_read: bool) -> list[ProbeVerdict]:
    out = []
    if g.xgmi_ports is not None:
        ports = g.xgmi_ports.split()
        down = [str(n) for n, p in enumerate(ports) if p == "D"]
        odd = [f"{n} {p!r}" for n, p in enumerate(ports) if p not in _PORT_CELLS]
        up = ports.count("U")
        if not down and not odd and up == 0 and "N/A" in ports:
            out.append(not_judged(g.subject, "xGMI ports", f"amd-smi prints the port status N/A ({g.xgmi_ports})"))
        else:
            ok = not down and not odd and (up > 0 or not expect_xgmi)
            detail = (f"port(s) {', '.join(down)} down" if down else f"port(s) {', '.join(odd)}: not U, D or X"
                      if odd else f"{up} of {len(ports)} ports up"
                      + ("" if ok else "; the platform expects xGMI links between its GPUs"))
            out.append(ProbeVerdict(g.subject, "xGMI ports", ok, detail, up, len(ports)))
    if g.xgmi_link is not None and expect_xgmi:
        out.append(ProbeVerdict(g.subject, "xGMI link type", g.xgmi_link == "XGMI",
                                f"{g.xgmi_link}, platform expects XGMI", g.xgmi_link, "XGMI"))
    elif g.xgmi_ports is None and not g.xgmi_status and not g.xgmi_types and expect_xgmi and xgmi_read:
        out.append(not_judged(g.subject, "xGMI link type", "this GPU is in no xGMI table of the amd-smi output",
                              expected="XGMI"))
    return out


def _pairs(report: AmdReport, field: str) -> dict[tuple[int, int], list[str]]:
    """A per-pair table's cells by GPU pair (lower number first), both directions as printed: "i->j CELL"."""
    out: dict[tuple[int, int], list[str]] = {}
    for g in report.gpus:
        for peer, cell in getattr(g, field):
            out.setdefault((min(g.index, peer), max(g.index, peer)), []).append(f"GPU{g.index}->GPU{peer} {cell}")
    return dict(sorted(out.items()))


def _pair_types(report: AmdReport) -> list[ProbeVerdict]:
    """LINK TYPE TABLE, one verdict per GPU pair where the platform expects xGMI: anything but XGMI fails."""
    out = []
    for (i, j), said in _pairs(report, "xgmi_types").items():
        types = {s.split(" ", 1)[1] for s in said}
        out.append(ProbeVerdict(f"GPU{i} - GPU{j}", "xGMI link type", types == {"XGMI"},
                                f"{', '.join(said)}, platform expects XGMI", "/".join(sorted(types)), "XGMI"))
    return out


def _link_status(report: AmdReport, expect_xgmi: bool) -> list[ProbeVerdict]:
    """XGMI LINK STATUS, one verdict per GPU pair: a D fails; where xGMI is expected, X (disabled) fails and N/A
    (amd-smi could not read the link, e.g. a VF) is not judged."""
    out = []
    for (i, j), said in _pairs(report, "xgmi_status").items():
        printed = [s.split(" ", 1)[1] for s in said]
        cells = {c for p in printed for c in ([p] if p == "N/A" else p.split("/"))}  # "U/D": two links, one pair
        subject, detail = f"GPU{i} - GPU{j}", ", ".join(said)
        if "D" in cells or (expect_xgmi and "X" in cells) or not cells <= {"U", "D", "X", "N/A"}:
            out.append(ProbeVerdict(subject, "xGMI link status", False, f"{detail} (U up, D down, X disabled)"))
        elif "N/A" in cells and expect_xgmi:
            out.append(not_judged(subject, "xGMI link status", f"amd-smi prints {detail}"))
        elif cells == {"U"}:
            out.append(ProbeVerdict(subject, "xGMI link status", True, detail))
    return out


def judge(report: AmdReport, expect: Mapping[str, Any]) -> list[ProbeVerdict]:
    names = {g.index: g.subject for g in report.gpus}
    out = [ProbeVerdict(names.get(c.gpu, f"GPU{c.gpu}"), "amd-smi output", False, c.detail(), c.again[1],
                        c.first[1]) for c in report.conflicts]
    want = expect.get("gpu_count")
    if report.inventory and want is not None:
        listed = [g for g in report.gpus if g.bus_id or g.device_id is not None or g.model]
        ids = sorted({f"0x{g.device_id:04x}" for g in listed if g.device_id is not None})
        out.append(ProbeVerdict("node", "GPU count", len(listed) == want,
                                f"{len(listed)} GPU(s) listed{' (' + ', '.join(ids) + ')' if ids else ''}, "
                                f"platform expects {want}", len(listed), want))
    elif want is not None:  # xGMI/ECC/PCIe sections alone: a GPU they all lack is nowhere in them
        out.append(not_judged("node", "GPU count", f"no GPU list in the input (amd-smi list or static, rocm-smi "
                              f"Concise Info); its other sections name {len(report.gpus)} GPU(s)", expected=want))
    # amd-smi numbers its GPUs 0..N-1: a number missing between them is a GPU the input has nothing of
    numbers = {g.index for g in report.gpus}
    out.extend(not_judged(f"GPU{i}", "GPU in the output", f"the amd-smi output names GPUs "
                          f"{', '.join(map(str, sorted(numbers)))} and nothing of GPU{i}")
               for i in range(max(numbers)) if i not in numbers)
    cannot = PROBE.cannot_judge(expect)  # NV18 or [NODE, SYS] (a profile's, for topo) was read and never judged
    out.extend([not_judged("node", "xGMI link type", cannot)] if cannot else [])
    expect_xgmi = not cannot and (expect.get("topology") or {}).get("gpu_gpu") is not None
    hottest = expect.get("gpu_temp_max_c")
    for g in report.gpus:
        # a GPU the input lists without the ECC or PCIe output its other GPUs have was not read there:
        # leaving it out would let a GPU missing from `amd-smi metric` read as a pass
        if g.ecc:
            out.append(_ecc(g))
        elif "ecc" in report.sections:
            out.append(not_judged(g.subject, "ECC", f"no ECC counters in the amd-smi output{_printed(g, 'ECC')}"))
        if g.pcie_width is not None or g.pcie_speed is not None:
            out.extend(_pcie(g, expect))
        elif "pcie" in report.sections and (expect.get("pcie_gen") is not None or expect.get("pcie_width") is not None):
            out.append(not_judged(g.subject, "PCIe link", f"no PCIe width or speed in the amd-smi output"
                                  f"{_printed(g, 'PCIE')}"))
        out.extend(_xgmi(g, expect_xgmi, "xgmi" in report.sections))
        if g.temperature_c is not None and hottest is not None:
            out.append(ProbeVerdict(g.subject, "temperature", g.temperature_c <= hottest,
                                    f"{g.temperature_c:g} C junction, limit {hottest} C", g.temperature_c, hottest))
        elif hottest is not None and "concise" in report.sections:
            out.append(not_judged(g.subject, "temperature", "no junction temperature for this GPU in rocm-smi's "
                                  "Concise Info", expected=hottest))
    out.extend(_pair_types(report) if expect_xgmi else [])
    out.extend(_link_status(report, expect_xgmi))
    if not out:
        summary = ", ".join(f"{g.subject} {g.model or ''}".strip() for g in report.gpus)
        out.append(ProbeVerdict("node", "inventory", True, f"{len(report.gpus)} GPU(s): {summary}"))
    return out


def collect() -> AmdReport:
    """amd-smi where installed (ROCm >= 6), else rocm-smi's Concise Info; a tool that fails is an error."""
    commands = [["amd-smi", "list"], ["amd-smi", "static", "--asic", "--bus"],
                ["amd-smi", "metric", "--ecc", "--ecc-blocks", "--pcie"], ["amd-smi", "xgmi"]]
    try:
        report = parse("\n".join(tool.run(argv, "amd-smi is not installed") for argv in commands))
        # `metric --ecc --pcie` was asked: a GPU (or every GPU) it printed nothing for was not read
        return replace(report, sections=report.sections | {"ecc", "pcie"})
    except ProbeSkip:
        pass
    return parse(tool.run(["rocm-smi"], "neither amd-smi nor rocm-smi is installed (no ROCm on this machine)"))


PROBE = Probe(
    name="amd-smi",
    description="AMD GPUs: count, ECC/RAS counters, PCIe link, xGMI ports and link type, temperature (amd-smi/rocm-smi)",
    input_help="`amd-smi list|static|metric --ecc --ecc-blocks --pcie|xgmi` output, or `rocm-smi` (Concise Info)",
    scope="gpu",
    parse=parse,
    collect=collect,
    judge=judge,
    expect_keys=("gpu_count", "pcie_gen", "pcie_width", "gpu_temp_max_c", "topology.gpu_gpu"),
    takes=(("topology.gpu_gpu", ("XGMI",)),),
)
