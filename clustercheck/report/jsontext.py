"""The JSON reports' text (results.json, sla.json, ctrf.json): strict JSON that every reader parses.

A measurement that failed holds NaN or an infinity (its measured value, its margin); Python's json writes
those as bare `NaN` / `Infinity`, which is not JSON: JavaScript's JSON.parse (CTRF's readers), jq and
strict parsers refuse the whole file, on exactly the run that failed. Each is written as the string
"NaN", "Infinity" or "-Infinity" instead: never a number, so no reader can take it for a passing value,
and the verdict beside it (`passed: false`) says what it means.

A lone surrogate in a string (a rank's message decoded with surrogateescape, a tool's broken UTF-16) would
be written as "\\ud800", which jq and strict parsers refuse (no character it pairs with): each is written
as backslash text instead (`\\ud800` as six characters), as junit.xml's _clean does."""

from __future__ import annotations

import json
import math
import re
from typing import Any, BinaryIO


_SURROGATE = re.compile("[\ud800-\udfff]")


def _text(value: str) -> str:
    """`value` with each surrogate as backslash text; the very string where it holds none."""
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", value) if _SURROGATE.search(value) else value


def _finite(value: Any) -> Any:
    """`value` with each non-finite float as its string and each surrogate in a string or a key as backslash
    text; the very object where it holds none (a large run's results are never copied only to be written)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else "NaN" if math.isnan(value) else (
            "Infinity" if value > 0 else "-Infinity")
    if isinstance(value, str):
        return _text(value)
    if isinstance(value, dict):
        changed = {k: f for k, v in value.items() if (f := _finite(v)) is not v}
        out = {**value, **changed} if changed else value
        if any(isinstance(k, str) and _text(k) is not k for k in value):
            out = {_text(k) if isinstance(k, str) else k: v for k, v in out.items()}
        return out
    if isinstance(value, (list, tuple)):
        items = [_finite(v) for v in value]
        return items if any(f is not v for f, v in zip(items, value)) else value
    return value


def _encoder() -> json.JSONEncoder:
    return json.JSONEncoder(indent=1, sort_keys=True, default=str, allow_nan=False)


def json_bytes(doc: Any) -> bytes:
    """`doc` as indented, key-sorted UTF-8 JSON; anything json has no type for as its str()."""
    return (_encoder().encode(_finite(doc)) + "\n").encode("utf-8")


def write_json(doc: Any, out: BinaryIO) -> None:
    """json_bytes(doc), written to `out` as it is encoded: a large run's results.json is never one string."""
    for chunk in _encoder().iterencode(_finite(doc)):
        out.write(chunk.encode("utf-8"))
    out.write(b"\n")
