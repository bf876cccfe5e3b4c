"""One line of a run record, read and checked: UTF-8 text, one JSON object without a repeated key, and the
shape its readers (the reports, compare, --compare, sign, verify) index without checking again. Each
refusal is a RecordError naming the line and the key. Linear in the line's size.

A NaN or infinity is how a measurement that measured nothing is recorded (a collective timed at 0 s, an
nvbandwidth cell the tool could not measure: judging fails it, and the verdict says why), so the record
holds them where measurements go (`metrics`, `rows`, a verdict's `measured` and `margin`). Elsewhere a
reader needs a finite number: a duration, a limit. And judging never passes a value that is not a finite
number (judging/limits.py), so a verdict that says it passed on one is a record edited by hand."""

from __future__ import annotations

import json
import math
import sys
from typing import Any

from clustercheck.record.schema import MOST_DESELECTED, OUTCOMES, SCHEMA_VERSION
from clustercheck.units import is_finite_number, is_number, out_of_domain


class RecordError(ValueError):
    """The file is not a run record this clustercheck can read; the message names the line."""


class NotText(RecordError):
    """A line is not UTF-8 text (a binary file, or one in another encoding)."""


class _Repeated(Exception):
    def __init__(self, key: str) -> None:
        self.key = key


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object whose keys are each given once: with `{"type": "end", ..., "type": "run"}` one JSON reader
    takes the first and another the last, so what the record says would depend on who reads it."""
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _Repeated(key)
            seen.add(key)
    return out


_DECODER = json.JSONDecoder(object_pairs_hook=_unique)  # one for every line: json.loads with a hook builds one per call


def parse(raw: bytes, number: int, last: bool) -> dict[str, Any] | None:
    """The object on line `number` (`raw` without its newline); None for a blank line, and for the last
    line torn by a kill (`last`: the file ends in it, without a newline): what came before stands, and the
    missing end line says INCOMPLETE."""
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        if last and exc.reason == "unexpected end of data":
            return None  # a character cut in two by the kill
        raise NotText(f"line {number} is not text: byte 0x{raw[exc.start]:02x} at column {exc.start + 1} is not "
                      "UTF-8") from None
    if not line.strip():
        return None
    try:
        entry = _DECODER.decode(line)
    except _Repeated as exc:
        raise RecordError(f"line {number}: key {str(exc.key)[:40]!r} given twice in one object (JSON readers "
                          "differ on which one counts)") from None
    except json.JSONDecodeError:
        if last:
            return None
        raise RecordError(f"line {number}: not JSON (JSONDecodeError)") from None
    except ValueError:  # json reads an int with int(), which refuses more than sys.get_int_max_str_digits() digits
        if last:
            return None
        raise RecordError(f"line {number}: a number too long to read (over {sys.get_int_max_str_digits()} digits; "
                          "the writer writes none)") from None
    except RecursionError:
        if last:
            return None
        raise RecordError(f"line {number}: nested too deep to read (deeper than Python's recursion limit); the writer "
                          "nests a few levels") from None
    if not isinstance(entry, dict):
        raise RecordError(f"line {number}: expected a JSON object, got {type(entry).__name__}")
    return entry


def check_schema(entry: dict[str, Any], number: int) -> None:
    schema = entry.get("schema")
    if type(schema) is not int or schema != SCHEMA_VERSION:  # bool is an int to isinstance
        found = "none" if "schema" not in entry else str(schema)[:40]
        raise RecordError(f"line {number}: run record schema {found}; this clustercheck reads schema {SCHEMA_VERSION}")


_STR, _OPT_STR, _NUM = (str,), (str, type(None)), (int, float)
# line type -> key -> (required, allowed types): what the readers index without checking
_SHAPES: dict[str, dict[str, tuple[bool, tuple[type, ...]]]] = {
    "run": {"platform": (False, _STR), "nodes": (False, (list,)), "ranks": (False, (int,)), "facts": (False, (dict,)),
            "argv": (False, (list,)), "suites": (False, (list,)), "thresholds": (False, (dict,)),
            "started": (False, _STR), "schema": (False, (int,)), "repeat": (False, (dict,)),
            "absent": (False, (dict,))},
    "result": {"name": (True, _STR), "check": (True, _STR), "suite_file": (True, _STR), "outcome": (True, _STR),
               "measure": (False, _STR), "scope": (False, _STR), "node": (False, _OPT_STR), "nodes": (False, (list,)),
               "line": (False, (int,)), "message": (False, _STR), "duration": (False, _NUM),
               "verdicts": (False, (list,)), "metrics": (False, (dict,)), "rows": (False, (list,)),
               "params": (False, (dict,)), "description": (False, _STR), "worst": (False, _OPT_STR),
               "figure": (False, _STR), "pool": (False, (dict,)), "comm": (False, (dict,)), "repeat": (False, (int,)),
               "unreachable": (False, (list,)), "absent": (False, (list,)), "notes": (False, (list,)),
               "finished": (False, _STR), "judged_at": (False, (*_NUM, type(None)))},
    "plan": {"items": (True, (list,)), "selection": (False, (dict,))},
    "exclude": {"hostlist": (False, _STR), "reasons": (False, (dict,)), "drain": (False, (list,)),
                "unmeasured": (False, (dict,)), "untested": (False, (list,)), "breaker": (False, _STR),
                "taint": (False, (list,))},
    "end": {"counts": (False, (dict,)), "interrupted": (False, (bool,)), "signal": (False, _OPT_STR),
            "stopped": (False, _STR), "finished": (False, _STR), "pool_starts": (False, (int,)),
            "repetitions": (False, (int,)), "compare": (False, (dict,))},
}
# objects inside a line that the readers index as such: (line type, key, inner key) -> allowed types
_NESTED: dict[tuple[str, str, str], tuple[type, ...]] = {
    ("run", "facts", "versions"): (dict,), ("run", "facts", "identity"): (dict,), ("result", "pool", "ranks"): (list,),
    ("result", "pool", "env"): (dict,), ("end", "compare", "not_judged"): (list,), ("end", "compare", "incomplete"): _STR,
}
# lists whose elements the readers use as one type: (line type, key) -> the element's types
_ELEMENTS: dict[tuple[str, str], tuple[type, ...]] = {
    ("run", "nodes"): _STR, ("run", "suites"): (dict,), ("result", "nodes"): _STR, ("result", "notes"): _STR,
    ("result", "unreachable"): _STR, ("result", "absent"): _STR, ("exclude", "untested"): _STR,
}
_VERDICT: dict[str, tuple[bool, tuple[type, ...]]] = {
    "metric": (True, _STR), "passed": (True, (bool,)), "unit": (False, _STR), "op": (False, _STR),
    "kind": (False, _STR), "expression": (False, _STR), "source": (False, _STR), "origin": (False, _STR),
    "measured": (False, (int, float, str, type(None))), "limit": (False, (int, float, str, type(None))),
    "margin": (False, (int, float, type(None))), "worst": (False, _OPT_STR), "subject": (False, _OPT_STR),
    "detail": (False, _OPT_STR), "spec_sources": (False, (list,)),
}
_OPS = (">=", ">", "<=", "<", "==")


def _typed(value: Any, types: tuple[type, ...]) -> bool:
    return isinstance(value, types) and not (isinstance(value, bool) and bool not in types)


def check(entry: dict[str, Any], number: int) -> None:
    """The shape of one line its readers rely on; RecordError naming the line and the key otherwise."""
    kind = entry.get("type")
    shape = _SHAPES.get(kind) if isinstance(kind, str) else None
    if shape is None:
        return  # pool lines and lines of later versions: no reader indexes them
    for key, (required, types) in shape.items():
        if key not in entry:
            if required:
                raise RecordError(f"line {number}: {entry['type']} line without {key!r}")
            continue
        if not _typed(entry[key], types):
            raise RecordError(f"line {number}: {entry['type']}.{key}: unexpected {type(entry[key]).__name__}")
    for (line_type, key, inner), types in _NESTED.items():
        if line_type == kind and inner in (entry.get(key) or {}) and not _typed(entry[key][inner], types):
            raise RecordError(f"line {number}: {kind}.{key}.{inner}: unexpected {type(entry[key][inner]).__name__}")
    for (line_type, key), types in _ELEMENTS.items():
        if line_type == kind and not all(_typed(x, types) for x in entry.get(key) or ()):
            raise RecordError(f"line {number}: {kind}.{key}: every element must be "
                              f"{'text' if types == _STR else 'an object'}")
    if kind == "result":
        _result(entry, number)
    for name, count in (entry.get("counts") or {}).items() if kind == "end" else ():
        if not _typed(count, (int,)):
            raise RecordError(f"line {number}: end.counts.{str(name)[:40]}: {json.dumps(count)[:40]} is not a count")
    for key in ("verdicts", "items"):
        if not all(isinstance(x, dict) for x in entry.get(key) or ()):
            raise RecordError(f"line {number}: {entry['type']}.{key}: every element must be an object")
    for item in entry.get("items") or ():
        if not isinstance(item.get("name"), str) or not isinstance(item.get("suite_file"), str):
            raise RecordError(f"line {number}: a plan item without a name or suite_file")
    if kind == "plan" and "selection" in entry:
        _selection(entry["selection"], len(entry["items"]), number)
    for key in ("drain", "taint") if kind == "exclude" else ():
        for i, act in enumerate(entry.get(key) or ()):
            _act(act, f"line {number}: exclude.{key}[{i}]")


def _act(act: Any, where: str) -> None:
    """A --drain or --taint change as record/exclude.py writes it: its rc read as `done` when 0 (false too,
    were a bool let through), `would run` when None."""
    if not isinstance(act, dict):
        raise RecordError(f"{where}: unexpected {type(act).__name__}")
    if not isinstance(act.get("command"), list) or not all(isinstance(x, str) for x in act["command"]):
        raise RecordError(f"{where}.command: a list of words expected")
    if "rc" not in act:
        raise RecordError(f"{where}.rc: missing (the writer writes null for a change not made)")
    if not (act["rc"] is None or _typed(act["rc"], (int,))):
        raise RecordError(f"{where}.rc: {json.dumps(act.get('rc'))[:40]} is not an exit code or null")
    if not isinstance(act.get("output"), str):
        raise RecordError(f"{where}.output: unexpected {type(act.get('output')).__name__}")


def _selection(sel: dict[str, Any], planned: int, number: int) -> None:
    """The plan's `selection`, whose counts every report states (`a selection: N of M planned items`) and whose
    `deselected` results.json, sla.json and ctrf.json copy: the counts the writer (schema.selection) makes of
    the plan it writes beside them, and no more ids than it keeps."""
    at = f"line {number}: plan.selection"
    for key in ("selected", "collected", "more"):
        if not _typed(sel.get(key), (int,)) or sel[key] < 0:
            raise RecordError(f"{at}.{key}: {json.dumps(sel.get(key))[:40]} is not a count")
    if not isinstance(sel.get("deselected"), list) or not all(isinstance(x, str) for x in sel["deselected"]):
        raise RecordError(f"{at}.deselected: every element must be text")
    selected, collected, named, more = sel["selected"], sel["collected"], len(sel["deselected"]), sel["more"]
    if selected > planned:  # the plan holds more where nodes never joined: their items, planned and not run
        raise RecordError(f"{at}.selected: {selected}, but the plan holds only {planned} item(s)")
    if selected >= collected:
        raise RecordError(f"{at}.collected: {str(collected)[:40]}, not more than the {selected} selected: no selection")
    if named > MOST_DESELECTED:
        raise RecordError(f"{at}.deselected: {named} ids; the writer keeps the first {MOST_DESELECTED} and counts "
                          "the rest in `more`")
    if selected + named + more != collected:
        raise RecordError(f"{at}.more: {str(more)[:40]}, but {selected} selected + {named} named + {str(more)[:40]} "
                          f"more is not the {str(collected)[:40]} collected")


def _result(entry: dict[str, Any], number: int) -> None:
    if entry["outcome"] not in OUTCOMES:
        raise RecordError(f"line {number}: result.outcome {str(entry['outcome'])[:40]!r} is not one of "
                          f"{', '.join(OUTCOMES)}")
    for key, what in (("duration", "a number of seconds"), ("judged_at", "a size in bytes")):
        if is_number(entry.get(key)) and not is_finite_number(entry[key]):  # NaN, or an int too large for a float
            raise RecordError(f"line {number}: result.{key}: {json.dumps(entry[key])} is not {what}")
    for name, metric in (entry.get("metrics") or {}).items():
        if not isinstance(metric, dict):
            raise RecordError(f"line {number}: result.metrics.{str(name)[:40]}: unexpected {type(metric).__name__}")
    if not all(isinstance(r, dict) for r in (entry.get("pool") or {}).get("ranks") or ()):
        raise RecordError(f"line {number}: result.pool.ranks: every element must be an object")
    for i, v in enumerate(entry.get("verdicts") or ()):
        if isinstance(v, dict):
            _verdict(v, f"line {number}: result.verdicts[{i}]")


def _verdict(v: dict[str, Any], where: str) -> None:
    for key, (required, types) in _VERDICT.items():
        if key not in v:
            if required:
                raise RecordError(f"{where}: no {key!r}")
        elif not _typed(v[key], types):
            raise RecordError(f"{where}.{key}: unexpected {type(v[key]).__name__}")
    for key in ("measured", "limit", "margin"):  # NaN and infinities are floats: said below, where they matter
        if isinstance(v.get(key), int) and not is_finite_number(v[key]):
            raise RecordError(f"{where}.{key}: a number too large for a float ({len(str(abs(v[key])))} digits; "
                              "judging writes none)")
    if not v.get("op"):
        return  # a probe's expectation: what was found and what was expected, as text
    if v["op"] not in _OPS:
        raise RecordError(f"{where}.op: {str(v['op'])[:20]!r} is not one of {', '.join(_OPS)}")
    for key in ("unit", "measured", "limit"):
        if key not in v:
            raise RecordError(f"{where}: a limit's verdict without {key!r}")
    limit, measured = v["limit"], v["measured"]
    if not is_finite_number(limit):
        raise RecordError(f"{where}.limit: {str(limit)[:40]!r} is not a finite number")
    if v["passed"] and isinstance(measured, float) and not math.isfinite(measured):
        raise RecordError(f"{where}: passed with measured {json.dumps(measured)}, which judging never passes (a "
                          "record edited by hand?)")
    # judging never passes a number out of its unit's domain either (Limit.passes: a negative bandwidth)
    if v["passed"] and is_number(measured) and (why := out_of_domain(measured, v["unit"])):
        raise RecordError(f"{where}: passed with measured {json.dumps(measured)}: {why}, which judging never passes "
                          "(a record edited by hand?)")
    # a number judged against its own limit passed exactly when the operator holds (judging/limits.py passes);
    # a --compare verdict within the baseline's spread passes beyond its bound, and says so
    held = _holds(measured, v["op"], limit)
    if v["passed"] and held is False and not str(v.get("origin") or "").startswith("--compare "):
        raise RecordError(f"{where}: passed with measured {json.dumps(measured)} against {v['op']} {json.dumps(limit)}, "
                          "which judging never passes (a record edited by hand?)")


def _holds(measured: Any, op: str, limit: float) -> bool | None:
    """Whether a finite number meets `op limit`; None for what is no number (text, NaN: said above)."""
    if not is_finite_number(measured):
        return None
    return {">=": measured >= limit, ">": measured > limit, "<=": measured <= limit, "<": measured < limit,
            "==": measured == limit}[op]
