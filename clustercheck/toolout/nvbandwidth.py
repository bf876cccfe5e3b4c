"""nvbandwidth output (NVIDIA/nvbandwidth v0.4-v0.8: output.cpp, inline_common.h, json_output.cpp) -> NvbandwidthRun.

Text: `Running <testcase>.`, a title such as `memcpy CE CPU(row) -> GPU(column) bandwidth (GB/s)` or
`memory latency SM CPU(row) <-> GPU(column) (ns)`, a column-label line, one line per row label with
`N/A` (or `0.00` in older builds) where a pair is not measured, a blank line, then `SUM <key> <value>` (every
version since v0.1 prints it under every matrix, inline_common.h; the README examples leave it out) or
`&&&& PERF <key> <value> +GB/s` with --perfFormatter. Bidirectional tests
print several matrices (`..._read1`, `..._read2`, `..._total`). Also read: the version, CUDA and driver
lines, `Device N: <name> (<pci id>)` lines (no pci id before v0.6), `Waived:` lines, output cut down to
the SUM lines (`| grep SUM`), `[...]` elisions, and `-j` JSON (nvbandwidth_json).

Failures: the data-pattern check (` Invalid value when checking the pattern`), `ASSERT in expression`,
CUDA/NVML errors (`[CUDA_ERROR_...] ... in expression`), `Error:`/`ERROR:` status lines, `Aborted`, a
`Running` test that printed no matrix, a matrix row with more or fewer values than columns or a line in the
matrix that is no row, a cell or SUM that is not a number (`N/A`, `abc`, nan, inf, 1e400) or is below 0: no
tool measured it; a testcase printed twice (its `Running` line, or a second matrix of one name): a judge
reading it by name would see only the first; a SUM line whose key is not the running test's (its own or its
matrix suffix), one printed twice, and a matrix with no SUM line under it where the output prints them (a version line, or another SUM
line): the run was cut off or the output edited. Only an elision (`[...]`) may stand in for a SUM line.

"""

from __future__ import annotations

import re

from clustercheck.toolout import evidence_lines
from clustercheck.toolout import NotToolOutput, clean_lines, number
from clustercheck.toolout.nvbandwidth_run import Device, NvbandwidthRun, Testcase
from clustercheck.toolout import nvbandwidth_json

_RUNNING = re.compile(r"^Running (\S+?)\.?$")
# Every title nvbandwidth prints (testcases_*.cpp, multinode_testcases.cpp) starts with one of these words.
_TITLE_START = re.compile(r"^(?:memcpy|memory latency|multicast|Device to Device Latency)\b")
_UNITS = ("GB/s", "ns")
_SUM_START = ("SUM ", "&&&& PERF")
_SUM = re.compile(r"^(?:SUM|&&&& PERF) (?P<key>\S+) (?P<value>[-+\d.eE]+|[-+]?(?i:nan|inf|infinity))"
                  r"(?:\s*[-+]?(?P<unit>GB/s|ns))?$")
_DEVICE = re.compile(r"^(?:Process \d{1,9} \((?P<host>[^)]*)\): )?[Dd]evice (?P<index>\d{1,9}): (?P<name>.+?)"
                     r"(?: \((?P<pci>[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.\d)?)\))?$")
_KV = re.compile(r"^(nvbandwidth Version|Built from Git version|CUDA Runtime Version|CUDA Driver Version|"
                 r"Driver Version): (.+)$")
# Lines that say the run failed, compared in lower case as plain substrings and prefixes: one IGNORECASE
# regex of a dozen alternatives took over a second on an 8 MiB line.
_FAILURE_TEXT = ("invalid value when checking the pattern", "pattern check", "assert in expression", "nvml_error",
                 "aborted", "segmentation fault", "terminate called after throwing", "mpi_abort was invoked")
_FAILURE_START = ("[cuda", "error: ", "error ", "error:")


def _failed(s: str) -> bool:
    low = s.lower()
    return any(t in low for t in _FAILURE_TEXT) or (low.startswith(_FAILURE_START) and (
        not low.startswith("[cuda") or "]" in low[:80]))


_ELISION = re.compile(r"^\[\.\.\.\]$|^\.{3,}$")
# A row label nvbandwidth prints: the row's index, or `0->4` in the multinode bisect tests (setRowLabels).
_ROW_LABEL = re.compile(r"^\d{1,9}(?:->\d{1,9})?$")
# The matrices a bidirectional test prints, each with the test's key plus one of these (testcases_ce.cpp).
_SUM_SUFFIXES = ("", "_read1", "_read2", "_write1", "_write2", "_total")


def parse(text: str) -> NvbandwidthRun:
    body = "\n".join(evidence_lines(text))   # a fixture's source note may precede JSON too
    if body.lstrip().startswith("{"):
        return nvbandwidth_json.parse(body)
    raw_count = len(text.replace("\r\n", "\n").split("\n"))
    lines = clean_lines(text)
    offset = raw_count - len(lines)
    meta: dict[str, str] = {}
    devices: list[Device] = []
    cases: list[Testcase] = []
    ran: list[tuple[str, int]] = []
    waived = 0
    failures: list[tuple[int, str]] = []
    notes: list[str] = []
    sums: dict[str, int] = {}     # SUM key -> its line: a key printed twice is no single result
    running: dict[str, int] = {}  # Running name -> its line: a test printed twice is no single result either
    twice: set[str] = set()       # Running names printed twice, failed at their second line
    elided: set[int] = set()      # cases an elision follows: the source cut their SUM line, not the run
    i = 0
    while i < len(lines):
        n, s = i + 1 + offset, lines[i].strip()
        i += 1
        if not s:
            continue
        if _failed(s):
            failures.append((n, s))
        m = _RUNNING.match(s)
        if m:
            if m.group(1) in running:
                failures.append((n, _twice(m.group(1), running[m.group(1)], n)))
                twice.add(m.group(1))
            running.setdefault(m.group(1), n)
            ran.append((m.group(1), len(cases)))
            continue
        if s.startswith("Waived"):
            waived += 1
            continue
        if _ELISION.match(s):
            notes.append(f"line {n}: an elision in the source")
            elided.add(len(cases) - 1)
            continue
        kv = _KV.match(s)
        if kv:
            meta.setdefault(kv.group(1), kv.group(2).strip())
            continue
        d = _DEVICE.match(s)
        if d:
            devices.append(Device(int(d.group("index")), d.group("name").strip(), d.group("pci"), d.group("host")))
            continue
        if s.startswith(_SUM_START):
            why = _sum_line(s, n, cases, ran, sums)
            if why:
                failures.append((n, why))
            continue
        t = _title(s)
        if t and i < len(lines):
            i, case, problem = _matrix(lines, i, offset, t[0], t[1], n, ran, len(cases))
            cases.append(case)
            if problem:
                failures.append(problem)
    if meta.get("nvbandwidth Version") or sums:
        failures += _unsummed(cases, elided)
    failures += _repeated(cases, twice)
    return _finish(meta, devices, cases, ran, waived, failures, notes)


def _sum_line(s: str, n: int, cases: list[Testcase], ran: list[tuple[str, int]], sums: dict[str, int]) -> str | None:
    """Read a `SUM <key> <value>` (or `&&&& PERF`) line onto its matrix; the problem with it, if any. A SUM
    line that does not read is never skipped: the matrix above it would pass as one printed without a SUM."""
    sm = _SUM.match(s)
    if not sm:
        return f"a SUM line that does not read as '<key> <value>': {s[:120]!r}"
    key = sm.group("key")
    try:
        value = number(sm.group("value"))
    except ValueError as exc:  # nan, inf, 1e400, or "1.2.3": no sum of measured cells
        return f"SUM {key}: {exc}"
    if value is None:
        return f"SUM {key} {sm.group('value')}: no value: the tool summed nothing it measured"
    if value < 0:
        return f"SUM {key} {sm.group('value')} is below 0"
    base = ran[-1][0] if ran else ""
    # compared within the key's length, not by building base + suffix: one huge Running name under many
    # SUM lines must stay linear
    if ran and not (key.startswith(base) and key[len(base):] in _SUM_SUFFIXES):
        # a SUM under another test's matrix would rename that matrix to a test that never ran here
        return f"SUM {key} under Running {base}: not that test's result"
    if key in sums:
        return f"SUM {key} printed twice (lines {sums[key]} and {n}): which one is the run's cannot be told"
    sums[key] = n
    _attach_sum(cases, key, value, sm.group("unit") or ("ns" if "latency" in key else "GB/s"), n, ran)
    return None


def _unsummed(cases: list[Testcase], elided: set[int]) -> list[tuple[int, str]]:
    """Where the output prints SUM lines, a matrix without one (and no elision after it) was cut off before
    it, or lost it: its cells may be a part of the run's."""
    out = []
    for k, case in enumerate(cases):
        if case.rows and case.sum is None and k not in elided:
            why = "the run was cut off before it" if k == len(cases) - 1 else "the line is missing"
            out.append((case.line, f"{case.name}: no SUM line under its matrix, as nvbandwidth prints under "
                                    f"every one: {why}"))
    return out


def _twice(name: str, first: int, again: int) -> str:
    return f"testcase {name} printed twice (lines {first} and {again}): which one is the run's cannot be told"


def _repeated(cases: list[Testcase], told: set[str]) -> list[tuple[int, str]]:
    """A matrix name held twice (two matrices under one Running line, or none): a judge that reads one of them
    by name would pass on the first and never see the second. Names a repeated Running line told are skipped."""
    first: dict[str, int] = {}
    told = set(told)
    out = []
    for case in cases:
        if case.name in first and case.name not in told:
            out.append((case.line, _twice(case.name, first[case.name], case.line)))
            told.add(case.name)
        first.setdefault(case.name, case.line)
    return out


def _title(s: str) -> tuple[str, str] | None:
    """(title, unit) of a matrix title line such as `memcpy CE CPU(row) -> GPU(column) bandwidth (GB/s)`.
    String tests, not one regex: a lazy `.*?` before the unit takes quadratic time on a long line."""
    if not _TITLE_START.match(s):
        return None
    for unit in _UNITS:
        if s.endswith(f"({unit})"):
            return s[:-len(unit) - 2].rstrip(), unit
    return None


def _matrix(lines: list[str], i: int, offset: int, title: str, unit: str, n: int, ran: list[tuple[str, int]],
            index: int) -> tuple[int, Testcase, tuple[int, str] | None]:
    """Read the column-label line and the rows after a title; stop at a blank or foreign line."""
    columns = tuple(lines[i].split())
    i += 1
    rows: list[tuple[str, tuple[float | None, ...]]] = []
    problem = None
    while i < len(lines) and lines[i].strip():
        s = lines[i].strip()
        tokens = s.split()
        at = i + 1 + offset
        if not _ROW_LABEL.match(tokens[0]):
            # nvbandwidth ends a matrix with a blank line; without one (a capture that drops blank lines) a
            # line it prints after one ends it. Any other line here is a row whose label does not read.
            if not _after_matrix(s):
                problem = problem or (at, f"a line in the matrix that is no row: {s[:120]!r}")
            break
        values: list[float | None] = []
        bad = ""
        for column, tok in zip(columns + ("?",) * len(tokens), tokens[1:]):
            try:
                value = number(tok)
            except ValueError as exc:  # a garbled cell, nan, inf, 1e400: never a row cut short
                bad = bad or f"row {tokens[0]} column {column}: {exc}"
                value = None
            if value is not None and value < 0:
                bad = bad or f"row {tokens[0]} column {column}: {tok} is below 0"
            values.append(value)
        if bad:
            problem = problem or (at, f"a matrix cell that no tool measured: {bad}")
        if len(values) != len(columns):
            problem = problem or (at, f"a matrix row with {len(values)} values under {len(columns)} columns: "
                                      f"{lines[i].strip()[:120]!r}")
        rows.append((tokens[0], tuple(values)))
        i += 1
    name = _running_name(ran, index, title)
    if not rows:
        problem = (n, f"'{title} ({unit})' has no matrix rows after it")
    return i, Testcase(name, title, unit, columns, tuple(rows), None, n), problem


def _after_matrix(s: str) -> bool:
    """A line nvbandwidth (or a capture's editor) prints after a matrix, not a row of it."""
    return bool(s.startswith(_SUM_START) or s.startswith("Waived") or _RUNNING.match(s) or _title(s)
                or _ELISION.match(s) or _failed(s) or _KV.match(s) or _DEVICE.match(s))


def _running_name(ran: list[tuple[str, int]], index: int, title: str) -> str:
    """The name of a matrix before its SUM line is read: the Running test, with the suffix nvbandwidth adds
    to bidirectional tests' extra matrices (Read1 -> _read1, Total -> _total)."""
    base = ran[-1][0] if ran else "unnamed"
    m = re.search(r"\b(Read1|Read2|Write1|Write2|Total)\b", title)
    return f"{base}_{m.group(1).lower()}" if m else base


def _attach_sum(cases: list[Testcase], key: str, value: float, unit: str, n: int, ran: list[tuple[str, int]]) -> None:
    last = cases[-1] if cases else None
    if last is not None and last.sum is None and (not ran or ran[-1][1] <= len(cases) - 1):
        cases[-1] = Testcase(key, last.title, last.unit, last.columns, last.rows, value, last.line)
    else:  # SUM-only output (| grep SUM), or a SUM whose matrix was elided
        cases.append(Testcase(key, None, unit, (), (), value, n))


def _finish(meta: dict[str, str], devices: list[Device], cases: list[Testcase], ran: list[tuple[str, int]],
            waived: int, failures: list[tuple[int, str]], notes: list[str]) -> NvbandwidthRun:
    if not (cases or ran or meta.get("nvbandwidth Version") or failures and (devices or meta)):
        raise NotToolOutput("expected nvbandwidth output: 'Running <testcase>.' blocks with a '... (GB/s)' matrix, "
                            "'SUM <testcase> <value>' lines, or its -j JSON")
    for k, (name, at) in enumerate(ran):   # a test that printed nothing before the next one (or the end)
        until = ran[k + 1][1] if k + 1 < len(ran) else len(cases)
        if until == at and not any(f for f in failures):
            where = "the next test started" if k + 1 < len(ran) else "the output ends"
            failures.append((0, f"Running {name}: no result before {where}: the run stopped or the test failed"))
    failure, line = None, None
    if failures:
        line, text = failures[0]
        failure = f"line {line}: {text}" if line else text
        line = line or None
    fmt = "sum-only" if cases and all(not c.rows for c in cases) else "text"
    return NvbandwidthRun(fmt, meta.get("nvbandwidth Version"), meta.get("CUDA Runtime Version"),
                          meta.get("Driver Version"), tuple(devices), tuple(cases), tuple(n for n, _ in ran), waived,
                          failure, line, tuple(notes))
