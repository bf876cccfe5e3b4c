"""The run record (`run.jsonl`, docs/run-record.md): its typed lines, the writer, the reader, and the
identity of an item across runs. Every reader (reports, compare, exclusion, plugins, `clustercheck
report`) goes through this module; nothing else knows the record's layout."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path, PurePath
from typing import TYPE_CHECKING, Any, Iterator, Mapping, Sequence, TypedDict

if TYPE_CHECKING:
    from clustercheck.judge import Outcome
    from clustercheck.suite import CheckSpec

SCHEMA_VERSION = 1
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


class VerdictEntry(TypedDict, total=False):
    """One verdict: a numeric limit (`kind: limit`, with `op` and a number in `limit`) or a probe's
    expectation (`kind: expect`, `op` empty, `limit` the expected value as text)."""
    kind: str
    metric: str
    measured: float | str
    unit: str
    op: str
    limit: float | str
    passed: bool
    margin: float | None
    expression: str
    source: str
    origin: str
    spec_sources: list[str]
    worst: str | None
    subject: str | None
    detail: str | None


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


class EndEntry(TypedDict, total=False):
    type: str
    finished: str
    counts: dict[str, int]
    pool_starts: int
    interrupted: bool
    signal: str | None
    repetitions: int  # repetitions that ran to their end (repeated runs)


@dataclass(frozen=True)
class Record:
    """A run record as read back: header, results in order, the exclusion line and the end line (None
    for a run that was killed before it finished)."""
    path: Path
    header: RunHeader
    results: list[ResultEntry]
    exclude: ExcludeEntry | None
    end: EndEntry | None
    plan: list[PlanItem] | None = None  # None in records written before plans

    def not_run(self) -> list[PlanItem]:
        """Planned items without a result: never started, or cut off by an interruption or a kill (in a
        repeated run: in the last repetition that started)."""
        last = max((r.get("repeat") or 0 for r in self.results), default=0)
        done = {item_id(r) for r in self.results if (r.get("repeat") or 0) == last}
        return [p for p in self.plan or [] if item_id(p) not in done]

    def incomplete(self) -> str | None:
        """Why the run did not finish, or None when it did: a gate must never read a partial run as whole."""
        if self.end is None:
            return "the run was killed before it ended (the record has no end line)"
        if self.end.get("interrupted"):
            return f"interrupted ({self.end.get('signal') or 'SIGINT'})"
        missing = len(self.not_run())
        if missing:
            return f"{missing} planned item(s) never ran"
        wanted, ran = (self.header.get("repeat") or {}).get("count"), self.end.get("repetitions")
        if isinstance(wanted, int) and isinstance(ran, int) and ran < wanted:
            return f"{ran} of {wanted} repetitions ran"
        return None


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def sha256(path: str | Path) -> str:
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return ""


class RunWriter:
    """Append-only JSONL: a `run` header, one `result` per item as soon as it is known, an `end` line."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = path.open("a", encoding="utf-8")

    def append(self, entry: Mapping[str, Any]) -> None:
        self._fh.write(json.dumps(entry, sort_keys=True, default=str) + "\n")
        self._fh.flush()
        os.fsync(self._fh.fileno())  # a killed controller must not lose a finished measurement

    def close(self) -> None:
        self._fh.close()


RunRecord = RunWriter  # the name the first sessions used


class RecordError(ValueError):
    """The file is not a run record this clustercheck can read; the message names the line."""


def load(path: Path) -> Record:
    """Every line of a run record, each checked for the shape its readers rely on (RecordError naming
    the line otherwise). Only a torn *last* line (a writer killed mid-line) is ignored: a bad line
    anywhere else would hide a result, and a gate must not read a record with holes as complete."""
    header: RunHeader = {}
    results: list[ResultEntry] = []
    exclude: ExcludeEntry | None = None
    end: EndEntry | None = None
    plan: list[PlanItem] | None = None
    for number, entry in _lines(path):
        kind = entry.get("type")
        _check(entry, number)
        if kind == "run":
            header = entry  # type: ignore[assignment]  # checked above: the writer gave it this shape
        elif kind == "result":
            results.append(entry)  # type: ignore[arg-type]
        elif kind == "exclude":
            exclude = entry  # type: ignore[assignment]
        elif kind == "end":
            end = entry  # type: ignore[assignment]
        elif kind == "plan":
            plan = entry["items"]
    return Record(path, header, results, exclude, end, plan)


def read_record(path: Path) -> tuple[RunHeader, list[ResultEntry], EndEntry | None]:
    """(header, results, end): the three parts most readers need."""
    record = load(path)
    return record.header, record.results, record.end


def _lines(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    with path.open(encoding="utf-8") as fh:
        lines = fh.readlines()
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except (json.JSONDecodeError, RecursionError) as exc:
            if number == len(lines) and not line.endswith("\n"):
                return  # torn by a kill: what came before stands, and the missing end line says INCOMPLETE
            raise RecordError(f"line {number}: not JSON ({type(exc).__name__})") from None
        if not isinstance(entry, dict):
            raise RecordError(f"line {number}: expected a JSON object, got {type(entry).__name__}")
        yield number, entry


_STR, _OPT_STR, _NUM = (str,), (str, type(None)), (int, float)
# line type -> key -> (required, allowed types): what the readers index without checking
_SHAPES: dict[str, dict[str, tuple[bool, tuple[type, ...]]]] = {
    "run": {"platform": (False, _STR), "nodes": (False, (list,)), "ranks": (False, (int,)), "facts": (False, (dict,)),
            "argv": (False, (list,)), "suites": (False, (list,)), "thresholds": (False, (dict,)),
            "started": (False, _STR), "schema": (False, (int,)), "repeat": (False, (dict,))},
    "result": {"name": (True, _STR), "check": (True, _STR), "suite_file": (True, _STR), "outcome": (True, _STR),
               "measure": (False, _STR), "scope": (False, _STR), "node": (False, _OPT_STR), "nodes": (False, (list,)),
               "line": (False, (int,)), "message": (False, _STR), "duration": (False, _NUM),
               "verdicts": (False, (list,)), "metrics": (False, (dict,)), "rows": (False, (list,)),
               "params": (False, (dict,)), "description": (False, _STR), "worst": (False, _OPT_STR),
               "figure": (False, _STR), "pool": (False, (dict,)), "comm": (False, (dict,)), "repeat": (False, (int,))},
    "plan": {"items": (True, (list,))},
    "exclude": {"hostlist": (False, _STR), "reasons": (False, (dict,)), "drain": (False, (list,)),
                "unmeasured": (False, (dict,)), "untested": (False, (list,))},
    "end": {"counts": (False, (dict,)), "interrupted": (False, (bool,)), "signal": (False, _OPT_STR),
            "repetitions": (False, (int,))},
}


def _check(entry: dict[str, Any], number: int) -> None:
    kind = entry.get("type")
    shape = _SHAPES.get(kind) if isinstance(kind, str) else None
    if shape is None:
        return  # pool lines and lines of later versions: no reader indexes them
    for key, (required, types) in shape.items():
        if key not in entry:
            if required:
                raise RecordError(f"line {number}: {entry['type']} line without {key!r}")
            continue
        value = entry[key]
        if not isinstance(value, types) or isinstance(value, bool) and bool not in types:
            raise RecordError(f"line {number}: {entry['type']}.{key}: unexpected {type(value).__name__}")
    if entry["type"] == "result" and entry["outcome"] not in OUTCOMES:
        raise RecordError(f"line {number}: result.outcome {str(entry['outcome'])[:40]!r} is not one of "
                          f"{', '.join(OUTCOMES)}")
    for key in ("verdicts", "items"):
        if not all(isinstance(x, dict) for x in entry.get(key) or ()):
            raise RecordError(f"line {number}: {entry['type']}.{key}: every element must be an object")
    for item in entry.get("items") or ():
        if not isinstance(item.get("name"), str) or not isinstance(item.get("suite_file"), str):
            raise RecordError(f"line {number}: a plan item without a name or suite_file")


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


def plan_item(check: CheckSpec, where: str | None, nodes: list[str], *, nodeid: str, name: str) -> PlanItem:
    return {"name": name, "nodeid": nodeid, "check": check.id, "measure": check.measure, "scope": check.scope,
            "node": where, "nodes": where.split(",") if where else list(nodes), "suite_file": check.file,
            "line": check.line}


def result_entry(check: CheckSpec, where: str | None, nodes: list[str], *, nodeid: str, name: str, outcome: str,
                 message: str, duration: float, measured: Outcome | None, figure: str) -> ResultEntry:
    """The `result` line of one item (docs/run-record.md)."""
    entry: ResultEntry = {
        **plan_item(check, where, nodes, nodeid=nodeid, name=name), "type": "result",
        "description": check.description, "params": check.params, "outcome": outcome, "message": message,
        "duration": round(duration, 3), "finished": now(), "figure": figure,
    }
    if measured is not None:
        m = measured.measurement
        entry["metrics"] = {k: {"value": v, "unit": m.units[k]} for k, v in m.metrics.items()}
        entry["verdicts"] = [v.as_dict() for v in measured.verdicts]
        entry["rows"], entry["worst"], entry["judged_at"] = m.rows, m.worst, m.judged_at
        entry["pool"] = measured.pool
        if m.comm:
            entry["comm"] = m.comm
    return entry
