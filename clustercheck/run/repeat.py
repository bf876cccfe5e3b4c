"""Burn-in (--repeat N, --duration T): the collected items, run again and again in one pytest session (the
rank pools stay up), each result marked with its repetition. A repetition always runs whole: the next
starts only while time is left. A stop before what was asked was done (-x or --maxfail after a failure,
a full disk) is said in the record's end line, so every report reads the run INCOMPLETE."""

from __future__ import annotations

import sys
import time
from typing import Any

import pytest

from clustercheck.run.rundir import space_problem
from clustercheck.run.session import CheckSession


def loop(session: pytest.Session, cs: CheckSession, progress: Any) -> None:
    deadline = time.monotonic() + cs.options.duration if cs.options.duration else None
    if progress is not None and deadline is not None:
        progress.deadline = deadline  # the line counts down to the deadline this loop keeps
    repetition = 0
    started = time.monotonic()
    # pytest's terminal keeps every report it logs; the passed setups' and teardowns' (category "") are read
    # by nothing, and over a burn-in's hours they were most of the controller's growth (docs/soak.md)
    terminal = session.config.pluginmanager.get_plugin("terminalreporter")
    while True:
        repetition += 1
        if cs.options.repeat and repetition > cs.options.repeat or deadline and repetition > 1 and \
                time.monotonic() >= deadline:
            return
        assert cs.runner is not None
        cs.runner.repetition = repetition
        for i, item in enumerate(session.items):
            nextitem = session.items[i + 1] if i + 1 < len(session.items) else None
            item.config.hook.pytest_runtest_protocol(item=item, nextitem=nextitem)
            if terminal is not None:
                terminal.stats.pop("", None)
            if session.shouldfail or session.shouldstop:
                _stopping(cs, repetition, whole=nextitem is None, deadline=deadline)
            if session.shouldfail:
                raise session.Failed(session.shouldfail)
            if session.shouldstop:
                raise session.Interrupted(session.shouldstop)
        cs.repetitions = repetition
        if repetition == 1 and cs.run_dir is not None:  # the first repetition shows how fast the evidence grows
            left = (cs.options.repeat - 1 if cs.options.repeat else
                    (deadline - time.monotonic()) / max(time.monotonic() - started, 1e-3) if deadline else 0)
            short = space_problem(cs.run_dir, left)
            if short:
                print(f"clustercheck: stopping after repetition 1: {short}", file=sys.stderr)
                cs.stopped = short
                raise session.Interrupted(f"not enough disk space: {short}")


def _stopping(cs: CheckSession, repetition: int, whole: bool, deadline: float | None) -> None:
    """pytest stops the loop (-x, --maxfail): a repetition cut short leaves planned items without a result,
    which the record reads as INCOMPLETE; one that ended whole, while more were asked for, must say so too
    (with --duration nothing else would: the record knows no count to compare with)."""
    if not whole:
        return
    cs.repetitions = repetition  # it ran whole
    more = cs.options.repeat and repetition < cs.options.repeat or deadline and time.monotonic() < deadline
    if more and not cs.stopped:
        ran = f"{repetition} of {cs.options.repeat} repetitions ran" if cs.options.repeat else \
            f"{repetition} repetition(s) ran before the --duration was up"
        cs.stopped = f"-x or --maxfail after a failure: {ran}"
