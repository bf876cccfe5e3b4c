"""The JSON reports' text (results.json, sla.json, ctrf.json): strict JSON that every reader parses.

A measurement that failed holds NaN or an infinity (its measured value, its margin); Python's json writes
those as bare `NaN` / `Infinity`, which is not JSON: JavaScript's JSON.parse (CTRF's readers), jq and
strict parsers refuse the whole file, on exactly the run that failed. Each is written as the string
"NaN", "Infinity" or "-Infinity" instead: never a number, so no reader can take it for a passing value,
and the verdict beside it (`passed: false`) says what it means."""

from __future__ import annotations

import json
import math
from typing import Any


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def json_bytes(doc: Any) -> bytes:
    """`doc` as indented, key-sorted UTF-8 JSON; anything json has no type for as its str()."""
    return (json.dumps(_finite(doc), indent=1, sort_keys=True, default=str, allow_nan=False) + "\n").encode("utf-8")
