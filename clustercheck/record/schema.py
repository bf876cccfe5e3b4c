"""The run record's shape (`run.jsonl`, docs/run-record.md): its schema version, the typed lines the
writer writes and the readers read, and the identity of an item across runs. A leaf: everything that
writes or reads a record (the session, reports, compare, exclusion, plugins) agrees through it."""

from __future__ import annotations

from pathlib import PurePath
from typing import Any, Mapping, Sequence, TypedDict

from clustercheck.judging.verdicts import VerdictEntry

SCHEMA_VERSION = 1
# What the reports (results.json, sla.json, junit.xml, ctrf.json, report.html) look like when rendered from
# the same record. Bump it with any change to their rendering: `clustercheck verify` compares a run's
# reports with what its record renders to only when the run was rendered in this format by this version,
# and says so in a note otherwise (two builds of one version may render differently).
# tests/test_report_format.py holds each format's digests and fails when the rendering changes without it.
# 3: an unfinished run and each untested node are a failed test of their own (junit, ctrf); sla.json has the verdict
# 4: an item's notes (what its nodes have not got, --counters) in every report; ctrf.json's item has `notes`;
#    a record killed before its plan says so, not "0 of 0 planned item(s) not run"; a burn-in series follows the
#    worst subject, not the first
# 5: results.json's (and sla.json's) `incomplete` has `never_joined` (each absent node -> the items not measured for
#    want of it); a planned item of an absent node (its node items, each pair with it) is `not run: <node> never
#    joined (<why>)` in junit.xml and ctrf.json; a result not run for want of absent nodes names them (`absent`)
# 6: results.json has `lost` (each node lost mid-run, named unreachable by an item -> the items it went unmeasured
#    in) where a node was lost; a scope-cluster item measured after a loss has a note and `nodes` of the nodes left
# 7: a non-finite number (a failed measurement's NaN) is the string "NaN" / "Infinity" / "-Infinity" in
#    results.json, sla.json and ctrf.json, never a bare NaN (not JSON)
# 8: each sla.json metric has its `subject` (GPU / pair / node; `detail` where the verdict has one), and
#    report.html's SLA table names it ("GPU4 h2d")
# 9: report.html draws a NaN p2p cell, per-GPU bar or sweep size as "NaN: measured nothing" (failed where its
#    verdict failed), never as a grey "not measured" cell or left out
# 10: a `--repeat N` run counts what it did not run in item-repetitions, the repetitions it never started among
#    them: results.json's (and sla.json's) `incomplete` has `repetitions` ({asked, started, not_run}) and `planned`
#    counts the plan once per repetition; their `items`, JUnit's and CTRF's not-run testcases and the statement's
#    failedTests list each item of each repetition never started (`<id>#<k>`); report.html's banner says so
# 11: report.html breaks a long unbroken token in a table cell or message (overflow-wrap), and its Checks table
#    shows a message's first line cut to 300 characters, linking to the whole message in the item's
#    section; a burn-in repetition that read NaN is marked on its plot's axis and counted in its row; a note that says
#    something is not judged is an error (not small grey text), counted in the node table's metrics cell; an
#    incomplete run's summary, node table (a `not run` column) and each node's section count its planned items not run;
#    a failed verdict in the node table says FAIL in words, not in colour alone; results.json has `exclude` (the
#    record's exclusion line: hostlist, reasons, drain/taint entries with command, rc, output, untested, ...) and
#    report.html shows it under the banner, each failed drain as `drain failed (exit N: ...)`, styled as an error
#    ; a run that planned a selection (-k, --deselect, addopts, ...) has the plan's `selection` in results.json,
#    sla.json and ctrf.json's extra, and a skipped `selection` testcase in junit.xml and ctrf.json; report.html's
#    banner says `a selection: N of M planned items`
# 12: a `run --compare` whose baseline is no reference for a pass (end.compare.not_judged: another platform, a
#    FAIL/ERROR verdict, no item in common, an item that passed there and is not measured now, an item not
#    compared) is an ERROR at best, INCOMPLETE when the baseline is (end.compare.incomplete); results.json has
#    `compare`, and junit.xml and ctrf.json a failed `compare` test of its own
# 13: report.html lists every node of the run in its network section (one without network facts says why) and has
#    a section of its own for `run --compare`; a --duration run whose last repetition lost its results counts and
#    names that repetition's items not run (Record.reached)
REPORT_FORMAT = 13
OUTCOMES = ("passed", "failed", "error", "skipped")


class SuiteRef(TypedDict):
    file: str
    sha256: str


class RunHeader(TypedDict, total=False):
    """The `run` line: what ran, where, against which profile."""
    type: str
    schema: int
    started: str
    argv: list[str]
    cwd: str
    python: str
    platform: str
    platform_detected: bool
    thresholds: SuiteRef
    suites: list[SuiteRef]
    facts: dict[str, Any]
    launcher: str
    backend: str
    ranks: int
    ranks_per_node: int
    nodes: list[str]
    repeat: dict[str, Any]  # {"count": N} or {"duration_s": S} for a burn-in run
    run_id: str  # a UUID naming this run in its evidence (absent in older records)
    report_format: int  # REPORT_FORMAT of the clustercheck that ran (absent before format 2)
    counters: bool  # --counters: hardware counters read around every check (absent in older records)
    node_facts: dict[str, dict[str, Any]]  # multi-node runs: each node's facts
    absent: dict[str, str]  # node -> why it never joined (--launcher join, k8s): the run is INCOMPLETE
    expect: dict[str, Any]  # --expect given to the run (over the profile's expect: block)
    fabric: dict[str, Any]  # the fabric floor's rule and the line rate the nodes' ports gave


class MetricValue(TypedDict):
    value: float
    unit: str


class PlanItem(TypedDict):
    """One item the run set out to measure (the `plan` line lists them all, before the first result)."""
    name: str
    nodeid: str
    check: str
    measure: str
    scope: str
    node: str | None
    nodes: list[str]
    suite_file: str
    line: int


class ResultEntry(PlanItem, total=False):
    """One item's `result` line (the fields of docs/run-record.md): the item, as planned, and its outcome."""
    type: str
    description: str
    params: dict[str, Any]
    outcome: str
    message: str
    duration: float
    finished: str
    metrics: dict[str, MetricValue]
    verdicts: list[VerdictEntry]
    rows: list[dict[str, Any]]
    worst: str | None
    judged_at: int | None
    pool: dict[str, Any]
    comm: dict[str, Any]
    figure: str
    repeat: int  # the repetition (1, 2, ...) of a repeated run; absent otherwise
    burn_in: dict[str, Any]  # reports only (burnin.folded): the item's summary over the repetitions
    unreachable: list[str]  # nodes that stopped answering (no heartbeat) while the item timed out
    absent: list[str]  # not run for want of these nodes, which never joined (an error: NeverJoined)
    notes: list[str]  # what was not judged because a node has not got it (--counters: `<node>: no ECC ...`)
    answers: list[dict[str, Any]]  # what the ranks answered, as the kind's judge read it (record/rebuild.py)


class Selection(TypedDict):
    """The plan line's `selection`: the run measured fewer items than its suite files hold (-k, -m, --deselect,
    --lf, --sw, PYTEST_ADDOPTS, addopts, a conftest); the rest were not measured and nothing clears them."""
    selected: int  # the items planned
    collected: int  # the items the suite files hold on the run's nodes
    deselected: list[str]  # ids of the items deselected (`<suite stem>::<name>`), the first MOST_DESELECTED
    more: int  # items not selected that `deselected` does not name (past the bound, or dropped without the hook)


MOST_DESELECTED = 100  # a --deselect of thousands of pair items must not make the plan line megabytes


def selection(selected: int, collected: int, deselected: Sequence[str]) -> Selection | None:
    """The plan's `selection` when fewer items than the suites hold were selected, else None."""
    if selected >= collected:
        return None
    # never more ids than items left out: the reader holds selected + named + more == collected (record/lines.py)
    named = list(dict.fromkeys(deselected))[:min(MOST_DESELECTED, collected - selected)]
    return {"selected": selected, "collected": collected, "deselected": named, "more": collected - selected - len(named)}


class DrainEntry(TypedDict):
    command: list[str]
    rc: int | None
    output: str


class ExcludeEntry(TypedDict, total=False):
    type: str
    hostlist: str
    reasons: dict[str, str]
    drain: list[DrainEntry]
    unmeasured: dict[str, list[str]]
    untested: list[str]
    breaker: str  # why --drain/--taint changed nothing (record.exclude.breaker)
    taint: list[DrainEntry]  # --taint, --taint-dry-run: the kubectl equivalent of each change


class EndEntry(TypedDict, total=False):
    type: str
    finished: str
    counts: dict[str, int]
    pool_starts: int
    interrupted: bool
    signal: str | None
    repetitions: int  # repetitions that ran to their end (repeated runs)
    stopped: str  # why clustercheck stopped the run before its end (a full disk): INCOMPLETE
    # --compare: {baseline, not_judged: [why the baseline is no reference for a pass], incomplete: why the
    # baseline did not finish}: an ERROR at best, INCOMPLETE with `incomplete` (report/status.py)
    compare: dict[str, Any]


def counts(results: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    out = dict.fromkeys(OUTCOMES, 0)
    for r in results:
        out[r["outcome"]] += 1
    return out


# -- item identity ---------------------------------------------------------------------------------

def classname(r: Mapping[str, Any]) -> str:
    """The suite file's stem: JUnit's classname and the first half of an item's id."""
    return PurePath(r["suite_file"]).stem


def item_id(r: Mapping[str, Any]) -> str:
    """The stable key of one item across runs: `<suite stem>::<check id>[<node/GPU/pair>]`."""
    return f"{classname(r)}::{r['name']}"


def item_name(check_id: str, where: str | None) -> str:
    """An item's name: its check id plus the node or node pair it is about (none for scope cluster)."""
    return check_id if where is None else f"{check_id}[{where}]"


def slim(r: ResultEntry) -> ResultEntry:
    """A result without its bulky per-size rows, pool and parameters (for summaries and hooks)."""
    return {k: v for k, v in r.items() if k not in ("rows", "pool", "params")}  # type: ignore[return-value]
