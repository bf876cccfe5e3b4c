"""Readers of native benchmark output: nccl-tests / rccl-tests tables and nvbandwidth matrices.

Pure text in, frozen dataclasses out; standard library only (no torch), so the same readers serve the
offline probes (`clustercheck probe nccl-tests --input FILE`) and the measure kinds that run the binaries.
A text that is not the tool's output raises `NotToolOutput`; a run that crashed or was cut off is still
parsed, with its `failure` set to the line that says so (never read as a pass).
"""

from __future__ import annotations

import math
import re

__all__ = ["NotFinite", "NotToolOutput", "clean_lines", "count", "evidence_lines", "number"]

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def evidence_lines(text: str) -> list[str]:
    """Lines of tool output: ANSI escapes removed, trailing spaces dropped, and a fixture's
    '# source: ...' line plus the blank line after it skipped (captured evidence carries its origin)."""
    lines = [_ANSI.sub("", line).rstrip() for line in text.replace("\r\n", "\n").split("\n")]
    if lines and lines[0].startswith("# source:"):
        lines = lines[2:] if len(lines) > 1 and not lines[1].strip() else lines[1:]
    return lines


class NotToolOutput(ValueError):
    """The text is not this tool's output; the message says what was expected."""


# `srun --label` prefixes every line with the task number (" 0: "), an empty line too (" 0: ", which a
# capture that drops trailing spaces keeps as " 0:"); `mpirun --tag-output` with "[1,0]<stdout>:".
_LABEL = re.compile(r"^\s{0,8}\d{1,6}:(?: |$)|^\[\d+,\d+\]<std(?:out|err)>:\s?")


def clean_lines(text: str) -> list[str]:
    """Lines of tool output: a fixture's source note, ANSI escapes, trailing spaces and per-task launcher
    labels removed (only the labels: the text after them is what the tool printed)."""
    return [_LABEL.sub("", line, count=1) for line in evidence_lines(text)]


_NUMBER = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?")


class NotFinite(ValueError):
    """A printed number that is not one: nan, inf, or beyond a double (1e400 reads as inf)."""


def reading(token: str) -> float | None:
    """A printed rate, time or count: a finite number >= 0, else None (N/A, "1.2.3", "-1", nan), for the
    caller to refuse naming its line."""
    try:
        value = number(token)
    except ValueError:
        return None
    return value if value is not None and value >= 0 else None


def number(token: str) -> float | None:
    """A printed number, None for `N/A`; ValueError for anything else (never read as zero), NotFinite for
    nan, inf and 1e400, which no tool measured. nccl-tests' `%g` can print 1e+06; rccl-tests marks errors
    over its threshold with a trailing '*'."""
    if token.upper() == "N/A":
        return None
    text = token.rstrip("*")
    if not _NUMBER.fullmatch(text):  # float() would also take "1_0", " 1" and "infinity"
        if text.lower().lstrip("+-") in ("nan", "inf", "infinity"):
            raise NotFinite(f"{token!r} is not a finite number")
        raise ValueError(f"{token!r} is not a number")
    value = float(text)
    if not math.isfinite(value):
        raise NotFinite(f"{token!r} is not a finite number")
    return value


def count(text: str | None, digits: int = 12) -> int | None:
    """A whole count printed in ASCII digits ("16", " 8 "), None for anything else: a sign, a fraction,
    "N/A", a superscript (str.isdigit takes "²", int() does not) or more digits than any count a tool prints
    (int() of thousands of digits raises)."""
    t = (text or "").strip()
    return int(t) if t and len(t) <= digits and t.isascii() and t.isdigit() else None
