"""pytest wiring only: options, collection of suite files, outcomes, record, summary."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from clustercheck.comm import NCCL_LOG_HELP, NCCL_LOG_MODES
from clustercheck.errors import UserError
from clustercheck.paths import data_dir, display
from clustercheck.pool import HarnessError
from clustercheck.results import NotMeasured, now
from clustercheck.session import CheckSession, NoThreshold, Options, Outcome, SizeTooSmall, Skip
from clustercheck.pairs import pair_name, schedule
from clustercheck.suite import CheckSpec, is_suite_file, load_suite

session_key = pytest.StashKey[CheckSession]()


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    from clustercheck import hookspecs

    pluginmanager.add_hookspecs(hookspecs)


def pytest_addoption(parser: pytest.Parser) -> None:
    g = parser.getgroup("clustercheck", "clustercheck (GPU cluster acceptance)")
    g.addoption("--platform", default=None,
                help="threshold profile to judge against (a file name in --thresholds without .yaml); "
                     "default: detected from the hardware")
    g.addoption("--thresholds", default=None, type=Path, metavar="DIR",
                help="directory of threshold profiles (default: the shipped thresholds/)")
    g.addoption("--ranks", default=None, type=int, metavar="N",
                help="rank processes on this node (default: one per GPU; 2 without GPUs)")
    g.addoption("--backend", default="auto", choices=("auto", "gloo", "nccl"),
                help="torch.distributed backend (default: nccl with GPUs, gloo without)")
    g.addoption("--cc-out", default=Path("clustercheck-out"), type=Path, metavar="DIR",
                help="where each run writes its record and reports, in DIR/<time>-<platform>/ "
                     "(default: clustercheck-out)")
    g.addoption("--launcher", default="local", choices=("local", "slurm", "hosts"),
                help="how ranks start: local (this machine), slurm (srun inside salloc/sbatch), hosts "
                     "(--hosts with --host-command)")
    g.addoption("--hosts", default=None, metavar="HOSTLIST",
                help="nodes for --launcher hosts, in Slurm hostlist syntax (node[01-04],gpu7)")
    g.addoption("--host-command", default="ssh {host} {python}", metavar="TEMPLATE",
                help="how --launcher hosts runs Python on a host; split like a shell would, never run by one; "
                     "{host} and {python} are filled in (default: 'ssh {host} {python}')")
    g.addoption("--pair-strategy", default="rounds", choices=("rounds", "random"),
                help="scope pair: every node pair in rounds of disjoint pairs, or one round of random pairs")
    g.addoption("--pair-seed", default=0, type=int, help="seed of --pair-strategy random")
    g.addoption("--drain", action="store_true",
                help="drain (scontrol) every node on the exclusion list, with reason 'clustercheck: ...'")
    g.addoption("--drain-dry-run", action="store_true",
                help="print the scontrol commands --drain would run, run nothing")
    g.addoption("--compare", default=None, metavar="BASELINE",
                help="judge each item also against the same item of a saved run (a run directory, its run.jsonl, "
                     "or a run name under --cc-out): a metric worse by --compare-tolerance fails the item")
    g.addoption("--compare-tolerance", default="5%", metavar="FRACTION",
                help="how much worse than the baseline a metric may get, e.g. 0.05 or 5%% (default 5%%)")
    g.addoption("--nccl-log", default="full", choices=NCCL_LOG_MODES, help=NCCL_LOG_HELP)
    g.addoption("--cc-progress", action="store_true", default=None,
                help="print a progress line per check (current check, node, done/total, time left) on stderr; "
                     "default: on when stderr is a terminal")
    g.addoption("--cc-inject-fault", action="append", default=[], metavar="CHECK:KIND[@RANK]",
                help="for testing clustercheck itself: make a rank hang, crash, raise or corrupt its "
                     "result in CHECK (KIND: hang, crash, raise, corrupt; default rank: the last), or make "
                     "every rank wait 2 s before measuring (delay)")


def pytest_configure(config: pytest.Config) -> None:
    _refuse_parallel_workers(config)
    ranks = config.getoption("ranks")
    if ranks is not None and not 1 <= ranks <= 1024:
        raise pytest.UsageError(f"--ranks must be between 1 and 1024, got {ranks}")
    options = Options(platform=config.getoption("platform"),
                      thresholds=config.getoption("thresholds") or data_dir("thresholds"),
                      ranks=ranks, backend=config.getoption("backend"), out=config.getoption("cc_out"),
                      faults=dict(_fault(text) for text in config.getoption("cc_inject_fault")),
                      compare=config.getoption("compare"), tolerance=_tolerance(config.getoption("compare_tolerance")),
                      nccl_log=config.getoption("nccl_log"),
                      launcher=config.getoption("launcher"), hosts=config.getoption("hosts"),
                      host_command=config.getoption("host_command"), pair_strategy=config.getoption("pair_strategy"),
                      pair_seed=config.getoption("pair_seed"), drain=config.getoption("drain"),
                      drain_dry_run=config.getoption("drain_dry_run"))
    try:
        config.stash[session_key] = CheckSession(options, list(sys.argv))
    except UserError as exc:
        raise pytest.UsageError(str(exc)) from None


def _refuse_parallel_workers(config: pytest.Config) -> None:
    """pytest-xdist (-n) would give each worker its own controller and rank pool, measuring the same
    GPUs and links at the same time: every number would be distorted. Suites run in one controller,
    which already measures all nodes at once (docs/multi-node.md)."""
    workers = config.getoption("numprocesses", None)  # None without xdist; 0 for -n 0
    if not workers:
        return
    files = (Path(a.split("::")[0]) for a in config.args)
    suites = [f for f in files if f.suffix in (".yaml", ".yml") and is_suite_file(f)]
    if suites:
        raise pytest.UsageError(f"-n {workers}: clustercheck suites ({suites[0]}) run in one process: parallel "
                                "workers would measure the same hardware at the same time and distort every "
                                "result (all nodes are already measured at once); drop -n")


def _tolerance(text: str) -> float:
    import argparse

    from clustercheck.compare import parse_tolerance

    try:
        return parse_tolerance(text)
    except argparse.ArgumentTypeError as exc:
        raise pytest.UsageError(f"--compare-tolerance: {exc}") from None


FAULTS = ("hang", "crash", "raise", "corrupt", "delay")


def _fault(text: str) -> tuple[str, tuple[str, int | None]]:
    check, _, spec = text.rpartition(":")
    kind, _, rank = spec.partition("@")
    if not check or kind not in FAULTS or rank and not rank.isdigit():
        raise pytest.UsageError(f"--cc-inject-fault {text!r}: expected CHECK:KIND[@RANK], KIND one of {', '.join(FAULTS)}")
    return check, (kind, int(rank) if rank else None)


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    if file_path.suffix not in (".yaml", ".yml"):
        return None
    explicit = parent.session.isinitpath(file_path)
    if (explicit or file_path.parent.name == "suites") and is_suite_file(file_path):
        return SuiteFile.from_parent(parent, path=file_path)
    return None


class SuiteFile(pytest.File):
    def collect(self) -> Iterator[pytest.Item]:
        try:
            suite = load_suite(self.path, display(self.path))
        except UserError as exc:
            raise self.CollectError(str(exc)) from None
        cs = self.config.stash[session_key]
        nodes = list(cs.launcher.nodes)
        for check in suite.checks:
            if check.scope == "cluster":
                yield CheckItem.from_parent(self, name=check.id, check=check, node=None)
            elif check.scope == "pair":
                for pairs in schedule(cs.options.pair_strategy, nodes, cs.options.pair_seed):
                    for pair in pairs:
                        yield CheckItem.from_parent(self, name=f"{check.id}[{pair_name(pair)}]", check=check,
                                                    node=pair_name(pair))
            else:
                for node in nodes:
                    yield CheckItem.from_parent(self, name=f"{check.id}[{node}]", check=check, node=node)


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
        props = self.user_properties
        props.append(("platform", session.profile.name if session.profile else ""))
        for i, v in enumerate(self.outcome.verdicts):
            if i == 0:
                props += [("metric", v.metric), ("measured", v.measured), ("limit", v.limit.value),
                          ("unit", v.unit), ("margin", "" if v.margin is None else round(v.margin, 6))]
            props += [(f"{v.metric}.measured", v.measured), (f"{v.metric}.limit", f"{v.limit.op} {v.limit.value}"),
                      (f"{v.metric}.unit", v.unit)]

    def runtest(self) -> None:
        assert self.outcome is not None
        failed = [v for v in self.outcome.verdicts if not v.passed]
        if failed:
            raise CheckFailed(failure_text(failed))

    def teardown(self) -> None:
        self.outcome = None  # reported and recorded by now; a long burn-in must not keep every measurement

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        if isinstance(excinfo.value, CheckFailed):
            return str(excinfo.value)
        return str(super().repr_failure(excinfo))

    def reportinfo(self) -> tuple[Path, int, str]:
        return self.path, self.check.line - 1, f"{self.check.measure}: {self.name}"


def failure_text(failed: list[Any]) -> str:
    """1-3 lines: metric, measured, limit with unit and margin, worst rank; then where the limit comes from."""
    lines = [v.line() for v in failed]
    lines.append("limit from " + "; ".join(dict.fromkeys(v.limit.provenance() for v in failed)))
    return "\n".join(lines[:3] if len(failed) <= 2 else [lines[0], f"... and {len(failed) - 1} more", lines[-1]])


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    checks = [i for i in items if isinstance(i, CheckItem)]
    if not checks or config.option.collectonly:
        return
    files = list(dict.fromkeys(i.check.file for i in checks))
    try:
        config.stash[session_key].start([i.check for i in checks], files)
    except UserError as exc:
        raise pytest.UsageError(str(exc)) from None
    wanted = config.getoption("cc_progress")
    if wanted or wanted is None and sys.stderr.isatty():
        config.stash[progress_key] = Progress(len(checks))


class Progress:
    """One line per check on stderr: which check, which node, done/total, elapsed and time left
    (mean duration of the checks done so far times those left)."""

    def __init__(self, total: int) -> None:
        self.total, self.done, self.t0 = total, 0, time.monotonic()

    def start(self, item: CheckItem) -> None:
        elapsed = time.monotonic() - self.t0
        left = f", about {_clock(elapsed / self.done * (self.total - self.done))} left" if self.done else ""
        where = f" on {item.node}" if item.node else ""
        capture = item.config.pluginmanager.getplugin("capturemanager")
        with capture.global_and_fixture_disabled():  # the line is for the person watching, not the report
            sys.stderr.write(f"clustercheck [{self.done + 1}/{self.total}] {item.check.id}{where}, "
                             f"elapsed {_clock(elapsed)}{left}\n")
            sys.stderr.flush()


def _clock(seconds: float) -> str:
    m, s = divmod(int(seconds), 60)
    return f"{m // 60}:{m % 60:02d}:{s:02d}" if m >= 60 else f"{m}:{s:02d}"


progress_key = pytest.StashKey[Progress]()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    progress = item.config.stash.get(progress_key, None)
    if progress is not None and isinstance(item, CheckItem):
        progress.start(item)


def pytest_runtest_teardown(item: pytest.Item) -> None:
    progress = item.config.stash.get(progress_key, None)
    if progress is not None and isinstance(item, CheckItem):
        progress.done += 1


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    report: pytest.TestReport = yield
    if not isinstance(item, CheckItem):
        return report
    exc = call.excinfo.value if call.excinfo else None
    if isinstance(exc, (HarnessError, NoThreshold, SizeTooSmall, NotMeasured)):
        report.longrepr = str(exc)  # a harness message, not a traceback of the harness
    if call.when == "setup" and not report.passed or call.when == "call":
        entry = _entry(item, report)
        item.config.stash[session_key].add_result(entry)
        item.config.hook.pytest_clustercheck_result(entry=entry, config=item.config)
    return report


def _entry(item: CheckItem, report: pytest.TestReport) -> dict[str, Any]:
    outcome = "error" if report.when == "setup" and report.failed else report.outcome
    message = ""
    if report.skipped and isinstance(report.longrepr, tuple):
        message = str(report.longrepr[2]).removeprefix("Skipped: ")
    elif report.failed:
        message = str(report.longrepr)
    entry: dict[str, Any] = {
        "type": "result", "nodeid": item.nodeid, "name": item.name, "check": item.check.id,
        "measure": item.check.measure, "scope": item.check.scope, "node": item.node,
        "nodes": item.node.split(",") if item.node else list(item.config.stash[session_key].nodes),
        "suite_file": item.check.file, "line": item.check.line, "description": item.check.description,
        "params": item.check.params, "outcome": outcome, "message": message,
        "duration": round(time.monotonic() - item.t0, 3) if item.t0 else 0.0, "finished": now(),
    }
    if item.outcome is not None:
        m = item.outcome.measurement
        entry.update(metrics={k: {"value": v, "unit": m.units[k]} for k, v in m.metrics.items()},
                     verdicts=[v.as_dict() for v in item.outcome.verdicts], rows=m.rows, worst=m.worst,
                     judged_at=m.judged_at, pool=item.outcome.pool)
        if m.comm:
            entry["comm"] = m.comm
    return entry


def pytest_report_collectionfinish(config: pytest.Config) -> list[str] | None:
    cs = config.stash[session_key]
    if not cs.started or cs.facts is None or cs.profile is None:
        return None
    how = "given with --platform" if cs.options.platform else "detected"
    return [f"clustercheck: platform {cs.profile.name} ({how}; {cs.facts.gpu_count} GPU(s), host {cs.facts.host}); "
            f"{cs.nranks} {cs.backend} rank(s); run dir {display(cs.run_dir) if cs.run_dir else '-'}"]


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    cs = session.config.stash[session_key]
    cs.finish(interrupted=exitstatus == pytest.ExitCode.INTERRUPTED)
    if cs.started and cs.run_dir is not None:
        session.config.hook.pytest_clustercheck_run_finished(run_dir=cs.run_dir, results=cs.results,
                                                      exclusion=cs.exclusion, config=session.config)


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    cs = config.stash[session_key]
    if not cs.started or cs.run_dir is None:
        return
    from clustercheck.report.terminal import summary_lines

    terminalreporter.section("clustercheck")
    for line in summary_lines(cs.results):
        terminalreporter.write_line(line)
    terminalreporter.write_line("")
    ex = cs.exclusion
    if ex.get("hostlist"):
        terminalreporter.write_line(f"exclude: {ex['hostlist']}   (sbatch --exclude={ex['hostlist']})", red=True)
        for node, why in ex["reasons"].items():
            terminalreporter.write_line(f"  {node}: {why}")
        for d in ex["drain"]:
            import shlex

            state = "would run" if d["rc"] is None else f"ran (exit {d['rc']})"
            terminalreporter.write_line(f"  drain {state}: {shlex.join(d['command'])}")
    elif len(cs.nodes) > 1 or ex:
        terminalreporter.write_line("exclude: none (no node failed a check)")
    if len(cs.nodes) > 1 and ex.get("unmeasured"):
        from clustercheck.exclude import as_hostlist

        unmeasured = ex["unmeasured"]
        terminalreporter.write_line(f"not measured: {as_hostlist(list(unmeasured))}   (harness errors: rerun them; "
                                    "an error never excludes a node)", yellow=True)
        for node, items in unmeasured.items():
            terminalreporter.write_line(f"  {node}: {', '.join(items)}")
    for name in ("run.jsonl", "junit.xml", "results.json", "report.html", "exclude.txt"):
        terminalreporter.write_line(f"  {name:<13} {display(cs.run_dir / name)}")
