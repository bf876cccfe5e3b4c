"""The standard streams of the `clustercheck` command once their reader left (`clustercheck run | head -1`):
what is still written goes to /dev/null and the command goes on to its real exit code. A closed pipe is no
verdict: a run whose reader left still measures, writes its record and reports, and exits as they say (a
FAIL exits 1, never 0 because `head` stopped reading)."""

from __future__ import annotations

import os
import sys
from typing import Any, TextIO


class ClosedPipeSafe:
    """A text stream that writes to `stream` until its reader leaves, then to /dev/null (the descriptor
    too, so what writes to it directly, pytest's capture restoring it, finds it open)."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self.reader_left = False

    def _gone(self) -> None:
        self.reader_left = True
        try:
            null = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(null, self._stream.fileno())
            finally:
                os.close(null)
        except (OSError, ValueError):  # no descriptor (a test's StringIO): writes are dropped below
            pass

    def write(self, text: str) -> int:
        if not self.reader_left:
            try:
                return self._stream.write(text)
            except BrokenPipeError:
                self._gone()
        try:
            return self._stream.write(text)
        except (BrokenPipeError, ValueError):
            return len(text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._gone()
            try:
                self._stream.flush()
            except (BrokenPipeError, ValueError):
                pass

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def guard() -> None:
    """From here on, stdout and stderr survive their reader leaving (see ClosedPipeSafe)."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is not None and not isinstance(stream, ClosedPipeSafe):
            setattr(sys, name, ClosedPipeSafe(stream))
