"""clustercheck results as a Prometheus text file, for node_exporter's textfile collector.

    clustercheck run -p clustercheck_prometheus --prometheus-textfile=/var/lib/node_exporter/textfile/clustercheck.prom

At the end of a run it writes (atomically: a temporary file renamed into place, as the collector
requires) one sample per item and outcome, one per measured metric, one per excluded node, one per node
with items that could not be measured, the run's verdict and its time, so that dashboards and alerts see
the last verdict of every node, GPU and link, and, for a run of a selection (-k, -m, --deselect, ...),
how many of the items its suites hold it measured (the verdict is the selection's only; absent for a run
of every item):

    clustercheck_outcome{check="allreduce-sweep",item="allreduce-sweep[vm]",nodes="vm",outcome="passed",suite="cpu-smoke"} 1.0
    clustercheck_measured{check="allreduce-sweep",item="allreduce-sweep[vm]",metric="busbw",nodes="vm",suite="cpu-smoke",unit="GB/s"} 1.1822587311617827
    clustercheck_excluded{node="node7"} 1.0
    clustercheck_verdict{verdict="PASS"} 1.0
    clustercheck_selection{collected="2",selected="1"} 1.0
    clustercheck_last_run_timestamp_seconds 1.7953337201430738e+09

(the first, second and last lines from `clustercheck run` of cpu-smoke on a 2-vCPU VM, the selection's
from one of `-k`; `suite` is the suite
file's stem, the first half of an item's id `<suite>::<check>[<node>]`, so that two suites' checks of one id
stay apart.) Needs prometheus-client (`pip install 'clustercheck[prometheus]'`). Uses clustercheck's
`pytest_clustercheck_run_finished` hook (clustercheck/hookspecs.py).

Fail closed, as every report of clustercheck:
- a repeated run (`--repeat`, `--duration`) has one outcome per item, its worst repetition, with that
  repetition's values (clustercheck.record.burnin.folded, as junit.xml and the terminal), never one
  sample per repetition's outcome with the last repetition's values;
- a run that never reached that hook still replaces the file, with its time and no item, node or metric
  samples, so that the previous run's verdict is not left standing as this run's, and the verdict its exit
  code says: stopped before any check ran `clustercheck_verdict{verdict="INCOMPLETE"} 1` and
  `clustercheck_incomplete 1`; a suite or an option refused (exit 4) `verdict="BAD_INPUT"` and
  `clustercheck_incomplete 1` (nothing ran); the record unreadable (exit 3) `verdict="ERROR"` and
  `clustercheck_incomplete 1`; nothing selected or collected (`-k nomatch`, exit 5) `verdict="SKIPPED"` and
  `clustercheck_incomplete 0`, as for a run whose every item skipped: nothing was measured, nothing is
  cleared;
- a file that cannot be written (a full disk, a directory gone, a read-only file system) is one line on
  stderr, `clustercheck: prometheus: cannot write PATH: REASON`, never a traceback; the run's reports and
  verdict stand, and a run that would have exited 0 (or 5, nothing to judge) exits 3, a harness error:
  a monitoring file silently left stale is a pass nobody measured."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import pytest

from clustercheck.exitcodes import Exit

LABELS = ("suite", "check", "item", "nodes")  # the suite file's stem: two suites' checks may share an id
written_key = pytest.StashKey[Path]()  # where the text file went, for the terminal's list of files
armed_key = pytest.StashKey[Path]()  # the text file to replace, once this plugin's own checks passed
ended_key = pytest.StashKey[bool]()  # clustercheck's end hook ran: it wrote the file, or said why it could not
unwritten_key = pytest.StashKey[str]()  # why the text file could not be written


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.getgroup("clustercheck").addoption(
        "--prometheus-textfile", type=Path, default=None, metavar="PATH",
        help="write the run's outcomes, metrics and excluded nodes to PATH in Prometheus text format "
             "(for node_exporter's textfile collector; replaced atomically at the end of the run)")


@pytest.hookimpl(tryfirst=True)  # armed before clustercheck refuses an option (-n, --setup-only): BAD_INPUT is said
def pytest_configure(config: pytest.Config) -> None:
    path = config.getoption("prometheus_textfile")
    if path is not None and not path.parent.is_dir():
        raise pytest.UsageError(f"--prometheus-textfile {path}: directory {path.parent} does not exist")
    try:  # before anything is measured, not in a traceback after the whole run
        import prometheus_client  # noqa: F401
    except ImportError:
        raise pytest.UsageError("-p clustercheck_prometheus needs prometheus-client: pip install "
                                "'clustercheck[prometheus]'") from None
    if path is not None and not (config.option.help or config.option.collectonly):
        config.stash[armed_key] = path


def pytest_clustercheck_run_finished(run_dir: Path, results: list[dict[str, Any]], exclusion: dict[str, Any],
                                     incomplete: str | None, verdict: str, selection: dict[str, Any] | None,
                                     config: pytest.Config) -> None:
    path = config.stash.get(armed_key, None)
    if path is not None:
        config.stash[ended_key] = True
        write(config, path, registry(results, exclusion, incomplete, verdict, selection))


@pytest.hookimpl(wrapper=True)
def pytest_sessionfinish(session: pytest.Session) -> Any:
    """After clustercheck's own sessionfinish (which calls the end hook and sets the exit code from the
    verdict): a run that never reached the end hook (`-k nomatch`, a suite refused) replaces the file here,
    while its code can still say so; a run that passed, or judged nothing, but left no monitoring file is a
    harness error."""
    result = yield
    fallback(session.config, session.exitstatus)
    if session.config.stash.get(unwritten_key, None) is not None:
        if session.exitstatus in (Exit.PASSED, Exit.NOTHING):
            session.exitstatus = int(Exit.ERROR)
    return result


def pytest_unconfigure(config: pytest.Config) -> None:
    """A session that never finished (pytest stopped while it configured: an option refused) replaces the file
    too, with the code pytest's session ended with (the session registers itself as a plugin)."""
    fallback(config, getattr(config.pluginmanager.get_plugin("session"), "exitstatus", None))


# a run that never reached clustercheck's end hook, by its exit code: its verdict, and whether it is incomplete
NOT_ENDED: dict[int, tuple[str, bool]] = {
    Exit.NOTHING: ("SKIPPED", False),  # nothing selected or collected: nothing was measured, nothing is cleared
    Exit.BAD_INPUT: ("BAD_INPUT", True),  # a suite or an option refused: nothing ran
    Exit.ERROR: ("ERROR", True),  # a harness error (the record unreadable): what ran is not judged
}


def fallback(config: pytest.Config, exitstatus: int | None) -> None:
    """A run that never reached clustercheck's end hook replaces the file too, with no item, node or metric
    sample, so that nothing of the previous run is left standing, and the verdict its exit code says: nothing
    selected (exit 5) SKIPPED, a suite or option refused (4) BAD_INPUT, a harness error (3) ERROR; interrupted
    before any check ran, or any other code, INCOMPLETE."""
    path = config.stash.get(armed_key, None)
    if path is not None and not config.stash.get(ended_key, False):
        config.stash[ended_key] = True
        verdict, unfinished = NOT_ENDED.get(int(exitstatus) if exitstatus is not None else -1, ("INCOMPLETE", True))
        write(config, path, registry([], {}, "the run did not reach its end" if unfinished else None, verdict))


def write(config: pytest.Config, path: Path, reg: Any) -> None:
    """Replace the text file atomically; a file that cannot be written is one line on stderr, not a traceback."""
    from prometheus_client import write_to_textfile

    try:
        write_to_textfile(str(path), reg)
    except OSError as exc:
        why = exc.strerror or str(exc)
        config.stash[unwritten_key] = why
        print(f"clustercheck: prometheus: cannot write {path}: {why}", file=sys.stderr, flush=True)
        return
    config.stash[written_key] = path.resolve()


@pytest.hookimpl(trylast=True)  # after clustercheck's own list of the files the run wrote
def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    path = config.stash.get(written_key, None)
    if path is not None:
        terminalreporter.write_line(f"  {'prometheus':<16} {path}")


def registry(results: list[dict[str, Any]], exclusion: dict[str, Any], incomplete: str | None = None,
             verdict: str | None = None, selection: dict[str, Any] | None = None) -> Any:
    """The samples of one run, in a registry of their own (never the process-wide default); `verdict`, the
    run's (clustercheck's end hook), None for none to say; `selection`, the plan's when the run measured fewer
    items than its suites hold (the verdict is the selection's only), None when it planned them all."""
    from prometheus_client import CollectorRegistry, Gauge

    reg = CollectorRegistry()
    outcome = Gauge("clustercheck_outcome", "1 for the outcome of each item of the last run "
                    "(passed, failed, error, skipped)", [*LABELS, "outcome"], registry=reg)
    measured = Gauge("clustercheck_measured", "each metric an item of the last run reported, in its unit "
                     "(the value judged; bandwidths at the judged size)", [*LABELS, "metric", "unit"], registry=reg)
    excluded = Gauge("clustercheck_excluded", "1 for each node on the last run's exclusion list", ["node"],
                     registry=reg)
    unmeasured = Gauge("clustercheck_unmeasured", "number of items of the last run on each node that ended in "
                       "error (the harness could not measure them; never a reason to exclude)", ["node"],
                       registry=reg)
    untested = Gauge("clustercheck_untested", "1 for each node of the last run that no item measured (every item "
                     "covering it errored, was skipped or never ran): not cleared", ["node"], registry=reg)
    unfinished = Gauge("clustercheck_incomplete", "1 when the last run did not finish (interrupted, killed, "
                       "items never ran, or refused before anything ran): its other samples are a partial picture; "
                       "0 for a run that finished, one that had nothing to measure (SKIPPED) among them",
                       registry=reg)
    overall = Gauge("clustercheck_verdict", "1 for the last run's verdict, as its exit code says it (PASS 0, FAIL 1, "
                    "INCOMPLETE 2, ERROR 3, BAD_INPUT 4: a suite or option refused, nothing ran; SKIPPED 5: nothing "
                    "applied or was selected, nothing measured and nothing cleared), and its results.json where it "
                    "has one", ["verdict"], registry=reg)
    # the file is replaced whole: a selection's PASS must not read as the whole suites' (every report says it too)
    chosen = Gauge("clustercheck_selection", "1 when the last run measured a selection (-k, -m, --deselect, "
                   "addopts, ...): `selected` of the `collected` items its suites hold; its verdict is the "
                   "selection's only, the rest were not measured and nothing about them is cleared; absent when the "
                   "run planned every item", ["selected", "collected"], registry=reg)
    finished = Gauge("clustercheck_last_run_timestamp_seconds", "when the last run ended (Unix time)", registry=reg)
    from clustercheck.record.burnin import folded
    from clustercheck.record.schema import classname

    for r in folded(results):  # a repeated run: each item once, its worst repetition with its values
        where = (classname(r), r["check"], r["name"], ",".join(r.get("nodes") or []))
        outcome.labels(*where, r["outcome"]).set(1)
        for metric, m in (r.get("metrics") or {}).items():
            if isinstance(m.get("value"), (int, float)):
                measured.labels(*where, metric, m.get("unit") or "").set(m["value"])
    for node in exclusion.get("reasons") or {}:
        excluded.labels(node).set(1)
    for node, items in (exclusion.get("unmeasured") or {}).items():
        unmeasured.labels(node).set(len(items))
    for node in exclusion.get("untested") or []:
        untested.labels(node).set(1)
    unfinished.set(1 if incomplete else 0)
    if verdict is not None:
        overall.labels(verdict).set(1)
    if selection:
        chosen.labels(str(selection.get("selected")), str(selection.get("collected"))).set(1)
    finished.set(time.time())
    return reg
