"""Readers of native benchmark output: nccl-tests / rccl-tests tables and nvbandwidth matrices.

Pure text in, frozen dataclasses out; standard library only (no torch), so the same readers serve the
offline probes (`clustercheck probe nccl-tests --input FILE`) and the measure kinds that run the binaries.
A text that is not the tool's output raises `NotToolOutput`; a run that crashed or was cut off is still
parsed, with its `failure` set to the line that says so (never read as a pass).
"""

from __future__ import annotations

import re

__all__ = ["NotToolOutput", "clean_lines", "evidence_lines", "number"]

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


# `srun --label` prefixes every line with the task number (" 0: "); `mpirun --tag-output` with "[1,0]<stdout>:".
_LABEL = re.compile(r"^\s{0,8}\d{1,6}: |^\[\d+,\d+\]<std(?:out|err)>:\s?")


def clean_lines(text: str) -> list[str]:
    """Lines of tool output: a fixture's source note, ANSI escapes, trailing spaces and per-task launcher
    labels removed (only the labels: the text after them is what the tool printed)."""
    return [_LABEL.sub("", line, count=1) for line in evidence_lines(text)]


def number(token: str) -> float | None:
    """A printed number, None for `N/A`; ValueError for anything else (never read as zero).
    nccl-tests' `%g` can print 1e+06; rccl-tests marks errors over its threshold with a trailing '*'."""
    if token.upper() == "N/A":
        return None
    return float(token.rstrip("*"))
