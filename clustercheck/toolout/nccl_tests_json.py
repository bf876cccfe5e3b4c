"""nccl-tests `-J FILE.json` output (JSON_FILE_VERSION 3; NVIDIA/nccl-tests src/util.cu, 2025-10 on).

The file is written as the run goes and closed at exit, so a crashed run leaves JSON that does not
parse: that is read as a run cut off, never as a pass. Shape: {"version", "args": [argv...],
"nccl_version": code, "config": {nthreads, ngpus, maximum_bytes, validation...}, "devices": [{rank,
pid, hostname, device, device_hex, device_info}], "results": [{size, count, type, redop, root,
"out_of_place"/"in_place": {time|cpu_time, alg_bw, bus_bw, nwrong} or null}], "out_of_bounds":
{count, okay}, "average_bus_bandwidth": {bandwidth, okay}, "errors": [...]}.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from clustercheck.toolout import NotToolOutput
from clustercheck.toolout.nccl_footer import bounds_failure
from clustercheck.toolout.nccl_measured import as_table, implausible
from clustercheck.toolout.nccl_run import NcclTestsRun, Placement, RankInfo, Row, version_of

_BINARY = re.compile(r"(\w+?)_perf\w*$")


def parse(text: str, binary: str | None = None) -> NcclTestsRun:
    body = text[text.index("{"):]
    try:
        doc = json.loads(body)
    except json.JSONDecodeError as exc:
        if '"results"' not in body and '"nccl_version"' not in body:
            raise NotToolOutput(f"not nccl-tests JSON output ({exc.msg} at char {exc.pos})") from None
        return _cut_off(f"the JSON output stops at char {exc.pos} ({exc.msg}): the run did not finish", binary)
    if not isinstance(doc, dict) or "nccl_version" not in doc or not isinstance(doc.get("results", []), list):
        raise NotToolOutput("expected nccl-tests -J output: an object with nccl_version, config, devices and results")
    try:
        return _run(doc, binary)
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        raise NotToolOutput(f"nccl-tests JSON with an unexpected shape: {type(exc).__name__}: {exc}") from None


def _cut_off(reason: str, binary: str | None) -> NcclTestsRun:
    name = _stem(binary)
    return NcclTestsRun("nccl-tests", "json", name, "binary name" if name else "unknown", (), (), None, None, None,
                        None, None, None, None, None, None, None, reason, None, "incomplete", 0, ())


def _stem(binary: str | None) -> str | None:
    m = _BINARY.search(binary.rsplit("/", 1)[-1]) if binary else None
    return m.group(1) if m else None


def _placement(raw: Any) -> Placement | None:
    if raw is None:
        return None
    time = raw["time"] if "time" in raw else raw["cpu_time"]
    wrong = raw.get("nwrong")
    return Placement(_num(time), _num(raw["alg_bw"]), _num(raw["bus_bw"]), None if wrong is None else _num(wrong), None)


def _num(value: Any) -> float:
    return float(value)  # jsonDouble writes the string "nan" for NaN; float() reads it


def _run(doc: dict[str, Any], binary: str | None) -> NcclTestsRun:
    cfg = doc.get("config") or {}
    ranks = tuple(RankInfo(int(d["rank"]), d.get("hostname"), d.get("pid"), int(d["device"]),
                           str(d.get("device_hex", "")), str(d.get("device_info", "")).strip())
                  for d in doc.get("devices") or [])
    rows = []
    unread: list[tuple[int, str]] = []
    for i, r in enumerate(doc.get("results") or []):
        root = str(r.get("root", "")).strip()
        row = Row(int(r["size"]), int(r["count"]), str(r["type"]), str(r.get("redop") or "") or None,
                  int(root) if re.fullmatch(r"-?\d{1,12}", root) else None, _placement(r.get("out_of_place")),
                  _placement(r.get("in_place")), i + 1)
        cpu_time = any(isinstance(r.get(k), dict) and "cpu_time" in r[k] for k in ("out_of_place", "in_place"))
        why = _unmeasured(row, cpu_time)
        if why:  # as the text reader: a result that is no number is no result, and the run is not whole
            unread.append((i + 1, why))
        else:
            rows.append(row)
    oob = doc.get("out_of_bounds")
    avg = doc.get("average_bus_bandwidth")
    okay = avg.get("okay") if isinstance(avg, dict) else None
    errors = [str(e) for e in doc.get("errors") or [] if str(e).strip()]
    args = doc.get("args") or []
    name = _stem(binary) or _stem(str(args[0]) if args else None)
    failure = bounds = None
    avg_value = _num(avg["bandwidth"]) if isinstance(avg, dict) else None
    if unread:
        failure = f"result {unread[0][0]}: {unread[0][1]}"
    elif avg_value is not None and not (math.isfinite(avg_value) and avg_value >= 0):
        failure = f"average_bus_bandwidth {avg_value} is not a bandwidth any tool measured"
    elif oob is None:
        failure = (f"result {len(rows)}: the JSON has no out_of_bounds summary after the last result: the run "
                   f"stopped early") if rows else "the JSON has no results: the run stopped before its first row"
    elif avg_value is None:  # util.cu writes the two together, as the text's two footer lines
        failure = "the JSON's out_of_bounds has no average_bus_bandwidth after it: the run was cut off"
    elif not isinstance(oob, dict) or not isinstance(oob.get("okay"), bool):
        failure = f"out_of_bounds {oob} is no summary nccl-tests writes ({{count, okay}})"
    elif bounds := bounds_failure(int(oob["count"]), oob["okay"]):  # the text reader's rule (nccl_footer)
        failure = f"out_of_bounds {oob}: {bounds}"
    return NcclTestsRun(
        "nccl-tests", "json", name, "binary name" if name else "unknown", ranks, tuple(rows), cfg.get("nthreads"),
        cfg.get("ngpus"), cfg.get("maximum_bytes"), cfg.get("validation"),
        int(oob["count"]) if isinstance(oob, dict) else None,
        avg_value if avg_value is None or math.isfinite(avg_value) else None,
        None if okay in (None, "unchecked") else ("OK" if okay else "FAILED"),
        version_of(int(doc["nccl_version"])), None, errors[0] if errors else None, failure, None,
        ("failed" if bounds else "incomplete") if failure else None, 0, (), tuple(unread), cfg.get("minimum_bytes"),
        _step(cfg))


def _step(cfg: dict[str, Any]) -> tuple[int, str] | None:
    """The sweep's step as the text header says it (util.cu writes step_factor or step_bytes)."""
    for key, how in (("step_factor", "factor"), ("step_bytes", "bytes")):
        if isinstance(cfg.get(key), int):
            return cfg[key], how
    return None


def _unmeasured(row: Row, cpu_time: bool) -> str | None:
    """What makes a result no measurement: a size or count below 0, no placement, a time, algbw, busbw or nwrong that is nan, inf or negative, a
    nwrong that is not a whole count, or numbers that cannot be one measurement (nccl_measured, the rule
    the text reader applies too)."""
    if row.size < 0 or row.count < 0:
        return f"size {row.size} count {row.count}: below 0, no size nccl-tests runs"
    if not row.placements():
        return f"size {row.size} B: out_of_place and in_place both null, nothing was measured"
    for name, p in row.placements():
        place = name.replace("_", "-")
        for what, value in (("time", p.time_us), ("algbw", p.algbw), ("busbw", p.busbw), ("nwrong", p.wrong)):
            if value is not None and not (math.isfinite(value) and value >= 0):
                return f"{place} {what} {value} is not a number any tool measured"
        if p.wrong is not None and p.wrong != int(p.wrong):
            return f"{place} nwrong {p.wrong:g} is not a whole count of elements"
        why = implausible(place, p, row.size, as_table(p), cpu_time)
        if why:
            return why
    return None
