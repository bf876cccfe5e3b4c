"""Two small plugins the clustercheck plugin registers beside itself, against what pytest or another plugin
does around it: why pytest was interrupted, and a run finished whole whatever another sessionfinish raised;
and how a run that could not start stops, in clustercheck's words."""

from __future__ import annotations

import sys
import traceback
from typing import Callable, Generator, NoReturn

import pytest
from _pytest.outcomes import Exit as PytestExit  # pytest.exit.Exception, as a base class mypy can read

from clustercheck.errors import HarnessError, escape
from clustercheck.exitcodes import SEVERITY, Exit, worst
from clustercheck.run.signals import stopped_by


class InterruptWitness:
    """Keeps why pytest was interrupted (pytest_keyboard_interrupt is given no config): SIGTERM while the
    suites are collected is named as such, not as a bare "interrupted"."""

    def __init__(self, stash: pytest.Stash, key: pytest.StashKey[str]) -> None:
        self.stash, self.key = stash, key

    def pytest_keyboard_interrupt(self, excinfo: pytest.ExceptionInfo[BaseException]) -> None:
        exc = excinfo.value
        self.stash[self.key] = stopped_by(exc) if isinstance(exc, KeyboardInterrupt) else "interrupted"


class RecordCloser:
    """The run record gets its end line and the reports are written even where another plugin's
    sessionfinish, called before clustercheck's, raises: this wrapper finishes the run then. Another
    plugin's sessionfinish that raised (before or after clustercheck's) is said in one line, and the exit
    code is the worse of the run's and a harness error's: a FAIL or INCOMPLETE run never reads as 3."""

    def __init__(self, finish: Callable[[pytest.Session, int], None], done: pytest.StashKey[bool]) -> None:
        self.finish, self.done = finish, done

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> Generator[None, None, None]:
        raised: Exception | None = None
        try:
            yield
        except Exception as exc:  # pytest would end in an internal error, exit 3, whatever the run's verdict
            raised = exc
        finally:
            if not session.config.stash.get(self.done, False):
                self.finish(session, exitstatus)
        if raised is not None:
            frame = traceback.extract_tb(raised.__traceback__)[-1]
            print(f"clustercheck: ERROR: a plugin's pytest_sessionfinish raised ({frame.filename}:{frame.lineno}: "
                  f"{type(raised).__name__}: {escape(str(raised))}); the run's record and reports stand",
                  file=sys.stderr)
            now = Exit(session.exitstatus) if session.exitstatus in list(SEVERITY) else Exit.PASSED
            session.exitstatus = int(worst(now, Exit.ERROR))


class NothingMeasured(PytestExit):
    """pytest.exit's exception, for a run the harness could not start. pytest names an Exit raised while it
    configures or collects by its type (`Exit: ...` on stderr, `_pytest.outcomes.Exit: ...` in the summary's
    interrupt line): this one is named so that the line reads as clustercheck's others do."""


NothingMeasured.__name__ = NothingMeasured.__qualname__ = "clustercheck"
NothingMeasured.__module__ = "builtins"  # how a traceback's last line leaves a type's module out


def nothing_measured(exc: HarnessError, *, collecting: bool = False) -> NoReturn:
    """Stop the run, exit 3: the harness could not start it (no input at fault), and nothing was measured.
    pytest writes the line to stderr while it configures; once it collects, only to the summary (stdout)."""
    said = f"ERROR: {exc}; nothing was measured"
    if collecting:
        print(f"clustercheck: {said}", file=sys.stderr, flush=True)
    raise NothingMeasured(said, returncode=int(Exit.ERROR))
