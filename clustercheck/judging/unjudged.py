"""What a judge could not judge, beside what it did: the one fail-closed rule the kinds share. Alone (no
verdict failed) it is the item's error, never a pass on the rest nor a skip; beside a failure the failure
stands, and what went unjudged is still said, in the item's notes, never dropped. Spelled once here so the
collectives, ib_write_bw and the probe kind cannot drift apart on it."""

from __future__ import annotations

from typing import Callable, Iterable, Sequence

from clustercheck.errors import HarnessError


def notes_or_error(passed: Iterable[bool], unjudged: Sequence[str], error: str | Callable[[], str]) -> tuple[str, ...]:
    """`unjudged` for the item's notes when a verdict failed (`passed`: each verdict's); when none failed and
    something went unjudged, HarnessError(`error`), the message naming it (a callable: built only then)."""
    if unjudged and all(passed):
        raise HarnessError(error() if callable(error) else error)
    return tuple(unjudged)
