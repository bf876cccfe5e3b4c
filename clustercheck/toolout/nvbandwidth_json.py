"""nvbandwidth `-j` output (NVIDIA/nvbandwidth json_output.cpp, v0.5 on): the same data as the text.

{"nvbandwidth": {"version", "git_version", "CUDA Runtime Version", "Driver Version", "GPU Device list":
["0: NVIDIA H100 80GB HBM3 (00000000:19:00): (host)", ...], "testcases": [{"name", "status": Passed |
Waived | Error | Not Found | Running, "bandwidth_description": "memcpy CE ... (GB/s)", "bandwidth_matrix":
[["26.03", "N/A", ...], ...], "sum", "error"}], "error", "warning"}}. Cells are strings; the sum counts
N/A as 0. A testcase left `Running` means the tool died inside it. A testcase listed twice fails the run (a
judge reading it by name would see only the first), and so does one `Passed` with neither a matrix nor a sum:
it measured nothing. A sum without its matrix is kept, as the text's SUM-only output is; a matrix without its
sum (absent or null) fails, as the text's matrix with no SUM line under it does: nvbandwidth writes both together.
"""

from __future__ import annotations

import json
import re
from typing import Any

from clustercheck.toolout import NotFinite, NotToolOutput, number
from clustercheck.toolout.nvbandwidth_run import Device, NvbandwidthRun, Testcase

_DEVICE = re.compile(r"^(?P<index>\d{1,9}): (?P<name>.+?)(?: \((?P<pci>[0-9a-fA-F:.]+)\))?(?:: \((?P<host>[^)]*)\))?$")
_UNIT = re.compile(r"\((GB/s|ns)\)\s*$")


def parse(text: str) -> NvbandwidthRun:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        if '"nvbandwidth"' not in text:
            raise NotToolOutput(f"not nvbandwidth JSON output ({exc.msg} at char {exc.pos})") from None
        return NvbandwidthRun("json", None, None, None, (), (), (), 0,
                              f"the JSON output stops at char {exc.pos} ({exc.msg}): the run did not finish", None, ())
    body = doc.get("nvbandwidth") if isinstance(doc, dict) else None
    if not isinstance(body, dict):
        raise NotToolOutput('expected nvbandwidth -j output: {"nvbandwidth": {"testcases": [...]}}')
    try:
        return _run(body)
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        raise NotToolOutput(f"nvbandwidth JSON with an unexpected shape: {type(exc).__name__}: {exc}") from None


def _run(body: dict[str, Any]) -> NvbandwidthRun:
    devices = []
    for entry in body.get("GPU Device list") or []:
        m = _DEVICE.match(str(entry))
        if m:
            devices.append(Device(int(m.group("index")), m.group("name"), m.group("pci"), m.group("host")))
    cases: list[Testcase] = []
    failures: list[str] = []
    waived = 0
    ran: list[str] = []
    seen: dict[str, int] = {}   # name -> its entry (1-based): a testcase listed twice is no single result
    for k, tc in enumerate(body.get("testcases") or []):
        name, status = str(tc["name"]), str(tc.get("status", ""))
        if name in seen:
            failures.append(f"testcase {name} printed twice (entries {seen[name]} and {k + 1} of testcases): "
                            f"which one is the run's cannot be told")
        seen.setdefault(name, k + 1)
        if status == "Waived":
            waived += 1
            continue
        ran.append(name)
        if status != "Passed":
            failures.append(f"testcase {name}: status {status or 'missing'}"
                            + (f": {tc['error']}" if tc.get("error") else ""))
        matrix = tc.get("bandwidth_matrix")
        total = tc.get("sum")
        if not matrix:
            if total is not None:   # the sum alone, as `| grep SUM` leaves it: read, never dropped
                cases.append(Testcase(name, None, _unit(tc), (), (), _cell(total, name, "sum", failures), k + 1))
            elif status == "Passed":   # nvbandwidth adds both with the result: a pass that measured nothing
                failures.append(f"testcase {name}: status Passed but no bandwidth_matrix and no sum: it "
                                f"measured nothing")
            continue
        title = str(tc.get("bandwidth_description", ""))
        width = max(len(row) for row in matrix)
        rows = tuple((str(r), tuple(_cell(v, name, f"row {r} column {c}", failures) for c, v in enumerate(row)))
                     for r, row in enumerate(matrix))
        if any(len(row) != width for row in matrix):
            failures.append(f"testcase {name}: matrix rows of {sorted({len(row) for row in matrix})} values")
        if total is None:   # json_output.cpp writes the sum with every matrix, as the text prints its SUM line
            failures.append(f"testcase {name}: a bandwidth_matrix with no sum, as nvbandwidth writes with every "
                            f"matrix: the output was cut or edited")
        cases.append(Testcase(name, _UNIT.sub("", title).strip() or None, _unit(tc),
                              tuple(str(c) for c in range(width)), rows,
                              None if total is None else _cell(total, name, "sum", failures), k + 1))
    if body.get("error"):
        failures.insert(0, f"error: {body['error']}")
    notes = (f"warning: {body['warning']}",) if body.get("warning") else ()
    return NvbandwidthRun("json", body.get("version"), _str(body.get("CUDA Runtime Version")),
                          _str(body.get("Driver Version")), tuple(devices), tuple(cases), tuple(ran), waived,
                          failures[0] if failures else None, None, notes)


def _cell(value: Any, name: str, where: str, failures: list[str]) -> float | None:
    """A cell or sum as a number; one that is nan, inf or below 0 is a failure of the run (None here)."""
    try:
        out = number(str(value))
    except NotFinite as exc:
        failures.append(f"testcase {name}: {where} {exc}")
        return None
    if out is not None and out < 0:
        failures.append(f"testcase {name}: {where} {value} is below 0")
        return None
    return out


def _unit(tc: dict[str, Any]) -> str:
    """GB/s or ns, as the description's last parenthesis says (GB/s when it says neither)."""
    unit = _UNIT.search(str(tc.get("bandwidth_description", "")))
    return unit.group(1) if unit else "GB/s"


def _str(value: Any) -> str | None:
    return None if value is None else str(value)
