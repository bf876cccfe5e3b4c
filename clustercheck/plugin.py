"""pytest wiring only: options, collection of suite files, outcomes, record, summary."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any, Generator, Iterator

import pytest

from clustercheck.run import options as run_options, scopes
from clustercheck.kinds import KINDS
from clustercheck.errors import ClusterCheckError, HarnessError, NeverJoined, Skip, Unreachable, UserError
from clustercheck.exitcodes import Exit, for_verdict
from clustercheck.judging.measurement import Outcome
from clustercheck.paths import display, shipped_name, shown
from clustercheck.progress import Progress, for_run
from clustercheck.record.io import RecordWriteError
from clustercheck.run.rundir import latest_problem
from clustercheck.record.keys import SIGN_FLAGS, redact_argv
from clustercheck.record.entries import plan_item, result_entry
from clustercheck.record.schema import ResultEntry, item_name, selection
from clustercheck.run.session import CheckSession
from clustercheck.run.guards import InterruptWitness, RecordCloser, call_each, nothing_measured, unsignalled
from clustercheck.run.signals import Stopper, not_started, stopped_by
from clustercheck.run.timings import TIMINGS, wanted
from clustercheck.suite.load import found_suite, is_yaml_name, load_suite, one_stem_each
from clustercheck.run.pytestconfig import listing as _listing, refuse_unfit_options
from clustercheck.run.pytestconfig import suite_files as _suite_files
from clustercheck.kinds.base import CheckSpec
from clustercheck.judging.verdicts import failure_text

session_key = pytest.StashKey[CheckSession]()
progress_key = pytest.StashKey[Progress]()
stopper_key = pytest.StashKey[Stopper]()
incomplete_key = pytest.StashKey["str | None"]()  # the summary's INCOMPLETE line, None when the run finished
bad_suites_key = pytest.StashKey[list[str]]()  # suite files that could not be read: the run does not start
interrupt_key = pytest.StashKey[str]()  # what stopped pytest before the session's own handler was installed
finishing_key = pytest.StashKey[bool]()  # clustercheck's sessionfinish has begun (once, whatever raised before it)
collected_key = pytest.StashKey[int]()  # the CheckItems the suite files yielded, before any deselection
deselected_key = pytest.StashKey[list[str]]()  # the node ids of the CheckItems deselected (-k, -m, --deselect, ...)


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    from clustercheck import hookspecs

    pluginmanager.add_hookspecs(hookspecs)


def pytest_addoption(parser: pytest.Parser) -> None:
    run_options.add_to(parser.getgroup("clustercheck", "clustercheck (GPU cluster acceptance)"), cli=False)


def pytest_configure(config: pytest.Config) -> None:
    TIMINGS.mark("pytest start-up and plugins")
    refuse_unfit_options(config)  # -n, --setup-only: before anything starts
    config.pluginmanager.register(InterruptWitness(config.stash, interrupt_key), "clustercheck-interrupt-witness")
    RecordCloser(pytest_sessionfinish, finishing_key).register(config.pluginmanager)
    try:
        options = run_options.resolve(config.getoption)
        # the private key's path never reaches the record, nor so any report
        config.stash[session_key] = CheckSession(options, redact_argv(list(sys.argv), SIGN_FLAGS))
    except UserError as exc:
        raise pytest.UsageError(str(exc)) from None
    except HarnessError as exc:  # the launcher's cluster failed it (an API server's 500): no bad input, exit 3
        nothing_measured(exc)
    except KeyboardInterrupt as exc:  # ranks starting or node agents awaited: pytest would end silently
        print(not_started(stopped_by(exc)), file=sys.stderr, flush=True)
        raise
    local = not config.stash[session_key].launcher.remote
    # not for a run the session will refuse for its --out (run/rundir.py): ranks would import torch for nothing
    if local and _suite_files(config) and not (_listing(config) or config.option.help) and \
            latest_problem(options.out / "latest") is None:
        from clustercheck.run import prestart  # the first pool's ranks start while pytest collects

        prestart.begin(options.out, options.backend, options.ranks, options.nccl_log)


def pytest_unconfigure(config: pytest.Config) -> None:
    from clustercheck.run import prestart

    prestart.end()  # a pool started for a run that never began (a collection error, nothing selected)
    stopper = config.stash.get(stopper_key, None)
    if stopper is not None:  # finishing since sessionfinish: a signal in the summary no longer unsays the verdict
        stopper.restore()
    cs = config.stash.get(session_key, None)
    if cs is not None:  # a run that never started (bad profile, -x at collection) still lets its agents go
        cs.release()


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    if not is_yaml_name(file_path):  # .YAML and .YML too
        return None
    explicit = parent.session.isinitpath(file_path)  # a file named on the command line is loaded, and judged
    if explicit or found_suite(file_path):  # by load_suite
        shipped = shipped_name(file_path)  # by name: node ids and results never carry a venv's path
        if shipped:
            return SuiteFile.from_parent(parent, path=file_path, nodeid=shipped)
        return SuiteFile.from_parent(parent, path=file_path)
    return None


class SuiteFile(pytest.File):
    def collect(self) -> Iterator[pytest.Item]:
        try:
            suite = load_suite(self.path, shown(self.path))
        except UserError as exc:
            self.config.stash.setdefault(bad_suites_key, []).append(str(exc))
            raise self.CollectError(str(exc)) from None
        cs = self.config.stash[session_key]
        for check in suite.checks:
            for items in scopes.rounds(check.scope, cs.nodes, cs.options.pair_strategy, cs.options.pair_seed):
                for where in items:
                    self.config.stash[collected_key] = self.config.stash.get(collected_key, 0) + 1
                    yield CheckItem.from_parent(self, name=item_name(check.id, where), check=check, node=where)


def pytest_deselected(items: list[pytest.Item]) -> None:  # by -k, -m, --deselect, --lf, --sw, a conftest
    for item in items:
        if isinstance(item, CheckItem):
            item.config.stash.setdefault(deselected_key, []).append(f"{Path(item.check.file).stem}::{item.name}")


class CheckFailed(Exception):
    """The hardware missed a limit (outcome *failed*)."""


class CheckItem(pytest.Item):
    def __init__(self, *, check: CheckSpec, node: str | None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.check = check
        self.node = node
        self.outcome: Outcome | None = None
        self.t0 = 0.0

    def setup(self) -> None:
        """Measuring happens in setup, so that a harness problem is a pytest *error*, not a failure."""
        session = self.config.stash[session_key]
        self.t0 = time.monotonic()
        try:
            self.outcome = session.measure(self.check, f"{self.path.stem}::{self.name}", self.node)
        except Skip as exc:
            # report the suite line, not this file, as where the skip comes from (-rs)
            raise pytest.skip.Exception(str(exc), _use_item_location=True) from None

    def runtest(self) -> None:
        assert self.outcome is not None
        failed = [v for v in self.outcome.verdicts if not v.passed]
        if failed:
            raise CheckFailed(failure_text(failed))

    def teardown(self) -> None:
        self.outcome = None  # reported and recorded by now; a long burn-in must not keep every measurement

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        if isinstance(excinfo.value, CheckFailed):  # the record keeps it as is; makereport escapes what is shown
            return str(excinfo.value)
        return str(super().repr_failure(excinfo))

    def reportinfo(self) -> tuple[Path, int, str]:
        return self.path, self.check.line - 1, f"{self.check.measure}: {self.name}"


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    checks = [i for i in items if isinstance(i, CheckItem)]
    if config.stash.get(bad_suites_key, None) and not _listing(config):
        # a bad suite file is refused (exit 4) before any rank starts, and the good files' items never run
        # either, whatever --continue-on-collection-errors says
        items[:] = [i for i in items if not isinstance(i, CheckItem)]
    if not checks or _listing(config) or config.stash.get(bad_suites_key, None):
        return
    TIMINGS.mark("collection")
    files = list(dict.fromkeys((i.check.file, i.path) for i in checks))  # as shown, and where the bytes are
    cs = config.stash[session_key]
    plan = [plan_item(i.check, i.node, cs.nodes, nodeid=i.nodeid, name=i.name) for i in checks]
    # fewer items than the suites hold, by any means (-k, --deselect, addopts, a conftest): every report says so
    deselected: list[str] = config.stash.setdefault(deselected_key, [])
    cs.selection = selection(len(checks), config.stash.get(collected_key, 0), deselected)
    try:  # `pytest a/s.yaml b/s.yaml` as `clustercheck run` refuses it (run/command.py): their items collide
        one_stem_each([(file, path, {i.check.id for i in checks if i.path == path}) for file, path in files])
        cs.start([i.check for i in checks], files, plan)
    except UserError as exc:
        raise pytest.UsageError(str(exc)) from None
    except HarnessError as exc:  # the nodes could not be asked (ranks that crashed): no bad input, exit 3
        if (over := cs.launcher.over()) is not None:  # unless the job's step ended under them: stopped (2)
            raise KeyboardInterrupt(over.said()) from None
        nothing_measured(exc, collecting=True)
    TIMINGS.mark("platform, profile and run record")
    stopper = Stopper(cs.kill_ranks)
    stopper.install()
    config.stash[stopper_key] = stopper
    if not (opts := cs.options).no_progress:  # on by default: a live line on a terminal, a line per item in a log
        progress = for_run(len(checks), opts.repeat, opts.repeating, opts.duration,
                           config.pluginmanager.getplugin("terminalreporter"))
        if cs.pools is not None:
            progress.detail = cs.pools.progress  # the running sweep's size, as its ranks post it
        config.stash[progress_key] = progress


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    progress = item.config.stash.get(progress_key, None)
    if progress is not None and isinstance(item, CheckItem):
        capture = item.config.pluginmanager.getplugin("capturemanager")
        stopper = item.config.stash.get(stopper_key, None)
        if stopper is not None:  # an interrupt skips teardown: the live line's thread stops by itself
            progress.stopped = lambda: bool(stopper.received)
        with capture.global_and_fixture_disabled():  # the line is for the person watching, not the report
            progress.start(item.check.id, item.node)


def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    cs = item.config.stash.get(session_key, None)
    over = cs.over if cs is not None else None  # the launch plane ended (Launcher.over): once its check's
    if over and not (isinstance(nextitem, CheckItem) and nextitem.check.id == over[0]):  # items are said, stop
        item.session.shouldstop = over[1].why
    progress = item.config.stash.get(progress_key, None)
    if progress is not None and isinstance(item, CheckItem):
        progress.finished_one()
        if progress.done >= progress.total and not item.config.stash[session_key].options.duration:
            progress.stop()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]
                               ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if not isinstance(item, CheckItem):
        return report
    exc = call.excinfo.value if call.excinfo else None
    if isinstance(exc, ClusterCheckError) and not isinstance(exc, Skip):
        report.longrepr = str(exc)  # a harness message, not a traceback of the harness
    if call.when == "setup" and not report.passed or call.when == "call":
        entry = _entry(item, report)
        if isinstance(exc, Unreachable):  # nodes that stopped answering: the exclusion list names them
            entry["unreachable"] = list(exc.nodes)
        elif item.outcome is not None and item.outcome.unreachable:  # and failed by another's window (an Xid)
            entry["unreachable"] = list(item.outcome.unreachable)
        elif isinstance(exc, NeverJoined):  # not run for want of nodes that never joined: the reports count it
            entry["absent"] = list(exc.nodes)
        from clustercheck.report.junit import properties

        cs = item.config.stash[session_key]
        # `--junitxml` writes the properties junit.xml has (pytest reads them from the teardown report); only
        # then: each report pytest keeps copies them, about 1 KiB a check over a burn-in's hours (docs/soak.md)
        if item.config.option.xmlpath:
            item.user_properties[:] = properties(entry, {"platform": cs.profile.name, "thresholds": {
                "file": cs.profile.file, "sha256": ""}} if cs.profile else {})
        try:
            cs.add_result(entry)
        except RecordWriteError as exc:  # a full disk: stop at once, INCOMPLETE; what was recorded stands
            if not item.session.shouldstop:
                item.session.shouldstop = f"the run record cannot be written: {exc}"
                cs.kill_ranks()
        call_each(item.config, "pytest_clustercheck_result", entry=entry, config=item.config)
    from clustercheck.report.terminal import lines_shown

    # recorded as said; shown (FAILURES, ERRORS, the short summary, -rs) with each line escaped: a tool's or a
    # rank's text (a NIC name, a profile's source) cannot drive the terminal, as `clustercheck probe` shows it
    if isinstance(report.longrepr, str):
        report.longrepr = lines_shown(report.longrepr)
    elif isinstance(report.longrepr, tuple) and len(report.longrepr) == 3:
        report.longrepr = (*report.longrepr[:2], lines_shown(str(report.longrepr[2])))
    return report


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session: pytest.Session) -> bool | None:
    """Burn-in (--repeat N, --duration T): run/repeat.py's loop. Without those options pytest's own runs."""
    cs = session.config.stash.get(session_key, None)
    if cs is None or not cs.started or not cs.options.repeating or _listing(session.config):
        return None
    if session.testsfailed and not session.config.option.continue_on_collection_errors:
        return None  # pytest's loop reports the collection errors
    from clustercheck.run import repeat

    repeat.loop(session, cs, session.config.stash.get(progress_key, None))
    return True


def _entry(item: CheckItem, report: pytest.TestReport) -> ResultEntry:
    outcome = "error" if report.when == "setup" and report.failed else report.outcome
    message = ""
    if report.skipped and isinstance(report.longrepr, tuple):
        message = str(report.longrepr[2]).removeprefix("Skipped: ")
    elif report.failed:
        message = str(report.longrepr)
    cs = item.config.stash[session_key]
    entry = result_entry(item.check, item.node, cs.nodes, nodeid=item.nodeid,
                         name=item.name, outcome=outcome, message=message,
                         duration=time.monotonic() - item.t0 if item.t0 else 0.0, measured=item.outcome,
                         figure=KINDS[item.check.measure].figure)
    if cs.options.repeating and cs.runner is not None:
        entry["repeat"] = cs.runner.repetition
    TIMINGS.check(item.check.id, entry["duration"])
    return entry


def pytest_report_collectionfinish(config: pytest.Config) -> list[str] | None:
    cs = config.stash[session_key]
    if not cs.started or cs.facts is None or cs.profile is None:
        return None
    how = "given with --platform" if cs.options.platform else "detected"
    return [f"clustercheck: platform {cs.profile.name} ({how}; {cs.facts.gpu_count} GPU(s), host {cs.facts.host}); "
            f"{cs.nranks} {cs.backend} rank(s); run dir {display(cs.run_dir) if cs.run_dir else '-'}"]


@pytest.hookimpl(tryfirst=True)  # before LogXML's, which writes the user's --junitxml from what this adds
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if session.config.stash.get(finishing_key, False):
        return
    session.config.stash[finishing_key] = True
    cs = session.config.stash[session_key]
    stopper = session.config.stash.get(stopper_key, None)
    if stopper is not None:
        stopper.finishing = True  # from here a signal kills the ranks but never cuts the record short
    interrupted = exitstatus == pytest.ExitCode.INTERRUPTED or bool(stopper and stopper.received)
    TIMINGS.mark("checks")
    cs.finish(interrupted=interrupted, signal=stopper.first if stopper else None, stopped=cs.stopped or (cs.record.broken
              if cs.record else None) or unsignalled(interrupted, stopper, session.config.stash.get(interrupt_key, "")))
    TIMINGS.mark("exclusion list")
    if session.config.stash.get(bad_suites_key, None) and not cs.started:
        session.exitstatus = int(Exit.BAD_INPUT)  # pytest says "interrupted" for a collection error
    elif interrupted and not cs.started:  # Ctrl-C or SIGTERM while collecting: no record to say it in
        why = stopper.first if stopper and stopper.first else session.config.stash.get(interrupt_key, "interrupted")
        print(not_started(why), file=sys.stderr)
        session.exitstatus = int(Exit.INCOMPLETE)
    if cs.started and cs.run_dir is not None:
        from clustercheck.report.status import run_status
        from clustercheck.report.terminal import incomplete_line

        rec = cs.read_back()  # once: the reports, the summary and the hooks all use it
        if rec is None:
            session.exitstatus = int(Exit.ERROR)
            return
        from clustercheck.evidence.signing import render_and_sign

        unwritten = None
        broken = cs.record.broken if cs.record is not None else None
        try:
            if cs.options.sign:
                cs.release()  # each rank's log is whole before the run directory is digested
            unsigned = render_and_sign(rec, cs.run_dir, cs.options.sign)
        except UserError as exc:  # a full disk: the record stands, `clustercheck report` renders it later
            unsigned, unwritten = None, str(exc)
        if broken:  # said once, whichever write failed first (a result, the exclusion list or the end line)
            print(f"clustercheck: {broken}" + ("; no report written" if unwritten else ""), file=sys.stderr)
        elif unwritten:
            print(f"clustercheck: {unwritten}; clustercheck report {display(cs.run_dir)} renders them once there is "
                  "room", file=sys.stderr)
        if unsigned:  # the run's verdict stands; a run that should be signed and is not is a harness error
            print(f"clustercheck: the run is not signed: {unsigned}", file=sys.stderr)
        TIMINGS.mark("reports")
        cs.release()
        TIMINGS.mark("ranks stopped")
        # why it did not finish, the same for the terminal, the user's --junitxml and the end hook's plugins
        unfinished = broken or rec.incomplete() or (f"the reports could not be written ({unwritten})" if unwritten
                                                    else None)
        session.config.stash[incomplete_key] = (f"INCOMPLETE: {broken}" if broken else incomplete_line(rec)) or (
            f"INCOMPLETE: {unfinished}" if unfinished else None)
        if said := session.config.stash[incomplete_key]:  # the user's own --junitxml says it too
            from clustercheck.report.user_junit import mark_incomplete

            mark_incomplete(session.config, rec, said)
        # the run's verdict decides (clustercheck.exitcodes), whatever pytest made of it; a non-zero
        # pytest status of other items in the same session (plain Python tests) is never hidden
        # evidence that could not be written is not a finished run
        verdict = "INCOMPLETE" if unwritten or broken else str(run_status(rec)["verdict"])
        code = for_verdict(verdict)
        session.exitstatus = int(code) or session.exitstatus or (int(Exit.ERROR) if unsigned else 0)
        call_each(session.config, "pytest_clustercheck_run_finished", config=session.config, run_dir=cs.run_dir,
                  results=cs.results, exclusion=cs.exclusion, incomplete=unfinished, verdict=verdict, selection=cs.selection)


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    cs = config.stash[session_key]
    if not cs.started or cs.run_dir is None:
        return
    from clustercheck.record.compare import software_since
    from clustercheck.report.status import selection_text
    from clustercheck.report.terminal import lines_shown, run_summary

    terminalreporter.section("clustercheck")
    for line, colour in run_summary(cs.results, cs.exclusion, len(cs.nodes), config.stash.get(incomplete_key, None),
                                    cs.options.counters, cs.run_dir, bool(getattr(terminalreporter, "isatty", False))):
        terminalreporter.write_line(lines_shown(line), **({colour: True} if colour else {}))  # whatever built it
    for said in [*([selection_text(cs.selection)] if cs.selection else []), *cs.warnings]:  # a selection's PASS says
        terminalreporter.write_line(lines_shown(said), yellow=True)  # so where the verdict is read; ids escaped
    if cs.baseline is not None:  # --compare: what the baseline is, where it is no like-for-like reference
        for line in cs.baseline.said(cs.profile.name if cs.profile else "", cs.results):
            terminalreporter.write_line(lines_shown(line), yellow=True)  # a path, a platform: the user's text
        if software := software_since(cs.baseline.run, cs.run_dir / "run.jsonl"):
            terminalreporter.write_line(lines_shown(software))  # a regression that comes with a new NCCL is that first
    if wanted(cs.options.timings):
        terminalreporter.section("clustercheck timings")
        for line in TIMINGS.lines():
            terminalreporter.write_line(line)
