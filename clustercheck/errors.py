"""User-facing errors: one line naming file, line and key."""

from __future__ import annotations

import re
import reprlib

MAX_KEY = 200  # characters of a key path shown in a message; a longer one is cut
# Characters that break a line or drive a terminal (str.splitlines() breaks at \v \f \x1c-\x1e \x85 too).
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def _escape(char: re.Match[str]) -> str:
    return ascii(char.group())[1:-1]  # '\n', '\x0c', '\u2028'


class ClusterCheckError(Exception):
    """Base of clustercheck's own exceptions: the plugin prints their message, never a traceback."""


class UserError(ClusterCheckError):
    """A mistake in a suite, threshold file or option; printed as one line, never as a traceback."""

    def __init__(self, message: str, *, file: str | None = None, line: int | None = None,
                 key: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.file = file
        self.line = line
        self.key = key

    def __str__(self) -> str:
        where = ""
        if self.file:
            where = self.file + (f":{self.line}" if self.line else "") + ": "
        key = ""
        if self.key:
            key = (self.key if len(self.key) <= MAX_KEY else self.key[:MAX_KEY] + "...") + ": "
        text = f"{where}{key}{self.message}"
        return _CONTROL.sub(_escape, text)  # always one line, whatever a key holds


class _Repr(reprlib.Repr):
    """reprlib with room for a readable value, and integers of any size (repr() refuses > 4300 digits)."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.maxstring = self.maxother = self.maxlong = width
        self.maxlist = self.maxtuple = self.maxdict = self.maxset = self.maxfrozenset = 4
        self.maxlevel = 2

    def repr_int(self, x: int, level: int) -> str:
        if x.bit_length() > 128:
            return f"<a number of about {int(x.bit_length() * 0.30103) + 1} digits>"
        return super().repr_int(x, level)


_SHOW = {60: _Repr(60)}


def show(value: object, width: int = 60) -> str:
    """A user's value quoted in a message: repr(), but bounded whatever it holds (a 5,000-digit number,
    a megabyte of text, lists nested through YAML aliases) and always one line."""
    shower = _SHOW.get(width) or _SHOW.setdefault(width, _Repr(width))
    text = _CONTROL.sub(_escape, shower.repr(value))
    return text if len(text) <= 2 * width else text[:2 * width] + "..."  # wide nested containers


def escape(text: str) -> str:
    """Text from a user or a tool, safe to print: control characters (ESC, NUL, backspace, newline,
    DEL, C1) written as escapes, so it can neither drive the terminal nor break the line."""
    return _CONTROL.sub(_escape, text)


class HarnessError(ClusterCheckError):
    """The harness could not measure (a rank died, hung or raised; no threshold; nothing to judge): an
    *error* outcome, never *failed*, so it never excludes a node."""


class Unreachable(HarnessError):
    """A check that could not finish because nodes stopped answering (no heartbeat: their link is down, or
    the host died): still an error, but `nodes` go on the exclusion list, and only they, since the
    alive ranks that timed out waiting for them are not to blame. `nodes` has a default so that copy.copy
    (each item of a check that errored whole raises its own copy) rebuilds it from its message."""

    def __init__(self, message: str, nodes: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.nodes = nodes


class NeverJoined(HarnessError):
    """A check not run for want of nodes whose agents never joined (they would have made enough): an error
    whose `nodes` the result names (`absent`), so the reports count it among what the absent nodes cost.
    `nodes` has a default so that copy.copy (each item raises its own copy) rebuilds it from its message."""

    def __init__(self, message: str, nodes: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.nodes = nodes


class NoThreshold(HarnessError):
    """The platform profile has no limit for this check: an error, never a silent pass."""


class SizeTooSmall(HarnessError):
    """A size that moves no data with this many ranks: a harness error naming the suite line."""


class NotMeasured(HarnessError):
    """A limit names a metric the measurement did not produce here."""


class Skip(ClusterCheckError):
    """Hardware or layout absent: the check does not apply here (outcome *skipped*)."""
