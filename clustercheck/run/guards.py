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
from clustercheck.run.signals import Stopper, stopped_by


class InterruptWitness:
    """Keeps why pytest was interrupted (pytest_keyboard_interrupt is given no config): SIGTERM while the
    suites are collected is named as such, not as a bare "interrupted"."""

    def __init__(self, stash: pytest.Stash, key: pytest.StashKey[str]) -> None:
        self.stash, self.key = stash, key

    def pytest_keyboard_interrupt(self, excinfo: pytest.ExceptionInfo[BaseException]) -> None:
        exc = excinfo.value
        # pytest.exit's (pdb's "Quitting debugger", a conftest's) says why in its msg
        self.stash[self.key] = stopped_by(exc) if isinstance(exc, KeyboardInterrupt) else (
            str(getattr(exc, "msg", "")) or "interrupted")


def unsignalled(interrupted: bool, stopper: Stopper | None, witnessed: str) -> str | None:
    """Why pytest stopped a run no signal stopped (`--sw`'s first failure, pdb's quit, a conftest's
    pytest.exit), as InterruptWitness kept it: the record's end then says so, never "interrupted (SIGINT)"
    for a signal that never came."""
    if not interrupted or stopper is not None and stopper.first:
        return None
    return f"pytest stopped the session ({witnessed or 'interrupted'})"


hook_raised_key = pytest.StashKey[set[tuple[str, str]]]()  # (plugin, hook) whose implementation raised, said once


def call_each(config: pytest.Config, name: str, /, **kwargs: object) -> None:
    """Call clustercheck's hook `name` plugin by plugin, in pluggy's order: one plugin's exception neither
    stops the run (pytest's INTERNALERROR, every item after it never run) nor the plugins after it (a
    Prometheus file never written). Each plugin that raised is said once per hook, not once per item, in
    one line naming it and where it raised; the run then exits with at least a harness error's code
    (RecordCloser), as for a plugin's sessionfinish that raised."""
    pm = config.pluginmanager
    plugins: list[object] = []
    for impl in reversed(getattr(pm.hook, name).get_hookimpls()):  # pluggy calls the last of the list first
        if not any(impl.plugin is p for p in plugins):
            plugins.append(impl.plugin)
    said = config.stash.setdefault(hook_raised_key, set())
    for plugin in plugins:
        try:
            pm.subset_hook_caller(name, [p for p in plugins if p is not plugin])(**kwargs)
        except Exception as exc:
            who = pm.get_name(plugin) or repr(plugin)
            if (who, name) not in said:
                said.add((who, name))
                print(f"clustercheck: ERROR: plugin {escape(who)}'s {name} raised ({where_raised(exc)})",
                      file=sys.stderr, flush=True)


def where_raised(exc: BaseException) -> str:
    """`file:line: Type: message` of the frame that raised, the message escaped (a plugin's text)."""
    frame = traceback.extract_tb(exc.__traceback__)[-1]
    return f"{frame.filename}:{frame.lineno}: {type(exc).__name__}: {escape(str(exc))}"


def harness_error(session: pytest.Session) -> None:
    """The run's code becomes the worse of its own and a harness error's: a FAIL or INCOMPLETE run never reads as 3."""
    now = Exit(session.exitstatus) if session.exitstatus in list(SEVERITY) else Exit.PASSED
    session.exitstatus = int(worst(now, Exit.ERROR))


sessionfinish_raised_key = pytest.StashKey[Exception]()  # another plugin's sessionfinish raised: said at the end


class RecordCloser:
    """The run record gets its end line and the reports are written even where another plugin's
    sessionfinish, called before clustercheck's, raises: this wrapper finishes the run then. Another
    plugin's sessionfinish that raised (before or after clustercheck's) is said in one line, and the exit
    code is the worse of the run's and a harness error's: a FAIL or INCOMPLETE run never reads as 3.

    Two wrappers: `inner` (trylast, inside every other wrapper) catches what a plain sessionfinish raised and
    finishes the run, so that the terminal reporter's wrapper, around it, still prints clustercheck's summary
    (an exception through it loses the verdict table, FAILURES and the list of reports); this one
    (tryfirst, outside all) catches what another wrapper raised, says it and sets the code."""

    def __init__(self, finish: Callable[[pytest.Session, int], None], done: pytest.StashKey[bool]) -> None:
        self.finish, self.done = finish, done
        self.inner = _Innermost(self)

    def register(self, pm: pytest.PytestPluginManager) -> None:
        pm.register(self, "clustercheck-record-closer")
        pm.register(self.inner, "clustercheck-sessionfinish-catcher")

    def close(self, session: pytest.Session, exitstatus: int) -> None:
        if not session.config.stash.get(self.done, False):
            self.finish(session, exitstatus)

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> Generator[None, None, None]:
        try:
            yield
        except Exception as exc:  # pytest would end in an internal error, exit 3, whatever the run's verdict
            session.config.stash.setdefault(sessionfinish_raised_key, exc)
        finally:
            self.close(session, exitstatus)
        raised = session.config.stash.get(sessionfinish_raised_key, None)
        if raised is not None:
            print(f"clustercheck: ERROR: a plugin's pytest_sessionfinish raised ({where_raised(raised)}); the run's "
                  "record and reports stand", file=sys.stderr)
            harness_error(session)
        elif session.config.stash.get(hook_raised_key, None):  # said where it raised (call_each)
            harness_error(session)


class _Innermost:
    """RecordCloser's inner wrapper: a plain sessionfinish's exception stops here, kept for the outer one."""

    def __init__(self, closer: RecordCloser) -> None:
        self.closer = closer

    @pytest.hookimpl(wrapper=True, trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> Generator[None, None, None]:
        try:
            yield
        except Exception as exc:
            session.config.stash.setdefault(sessionfinish_raised_key, exc)
        finally:
            self.closer.close(session, exitstatus)


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
