"""Writing and reading the run record: the append-only writer (each line flushed and fsynced as it is
known) and the reader, which checks every line for the shape its readers rely on and says why a run is
INCOMPLETE. Nothing else opens `run.jsonl`."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator, Mapping

from clustercheck.errors import ClusterCheckError
from clustercheck.record.schema import (OUTCOMES, SCHEMA_VERSION, EndEntry, ExcludeEntry, PlanItem, ResultEntry,
                                        RunHeader, item_id)


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
        if self.end.get("stopped"):
            return f"stopped: {self.end['stopped']}"
        if self.end.get("interrupted"):
            return f"interrupted ({self.end.get('signal') or 'SIGINT'})"
        if absent := self.header.get("absent"):  # nodes of the run whose agent never joined
            return f"{len(absent)} node(s) never joined: {', '.join(sorted(absent))}"
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


class RecordWriteError(ClusterCheckError):
    """The record could not be written (a full disk, a file system gone read-only): the run stops at once,
    INCOMPLETE. The message names the file, the error and how many results the record holds."""


class RunWriter:
    """Append-only JSONL: a `run` header, one `result` per item as soon as it is known, an `end` line.
    After a write fails nothing more is written (RecordWriteError each time): the record ends there, and
    a reader sees a run without its end line, INCOMPLETE."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = path.open("a", encoding="utf-8")
        self.results = 0  # result lines written
        self.broken: str | None = None  # why writing stopped

    def append(self, entry: Mapping[str, Any]) -> None:
        if self.broken is not None:
            raise RecordWriteError(self.broken)
        try:
            self._fh.write(json.dumps(entry, sort_keys=True, default=str) + "\n")
            self._fh.flush()
            os.fsync(self._fh.fileno())  # a killed controller must not lose a finished measurement
        except OSError as exc:
            self.broken = (f"cannot write {self.path}: {exc.strerror or type(exc).__name__}; the record holds "
                           f"{self.results} result(s) and ends there (clustercheck report re-renders it)")
            raise RecordWriteError(self.broken) from None
        if entry.get("type") == "result":
            self.results += 1

    def close(self) -> None:
        try:
            self._fh.close()
        except OSError:  # the last flush failed: the record ends where the last fsync left it
            pass


class RecordError(ValueError):
    """The file is not a run record this clustercheck can read; the message names the line."""


def load(path: Path) -> Record:
    """Every line of a run record, each checked for the shape its readers rely on (RecordError naming
    the line otherwise). Only a torn *last* line (a writer killed mid-line) is ignored: a bad line
    anywhere else would hide a result, and a gate must not read a record with holes as complete. Every
    reader (report, compare, --compare, sign, verify) shares these refusals: a record of another schema
    version, or none, is refused here, not read by guesswork."""
    header: RunHeader = {}
    results: list[ResultEntry] = []
    exclude: ExcludeEntry | None = None
    end: EndEntry | None = None
    plan: list[PlanItem] | None = None
    for number, entry in _lines(path):
        kind = entry.get("type")
        if kind == "run":
            _check_schema(entry, number)
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


def _check_schema(entry: dict[str, Any], number: int) -> None:
    schema = entry.get("schema")
    if type(schema) is not int or schema != SCHEMA_VERSION:  # bool is an int to isinstance
        found = "none" if "schema" not in entry else str(schema)[:40]
        raise RecordError(f"line {number}: run record schema {found}; this clustercheck reads schema {SCHEMA_VERSION}")


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
            "started": (False, _STR), "schema": (False, (int,)), "repeat": (False, (dict,)),
            "absent": (False, (dict,))},
    "result": {"name": (True, _STR), "check": (True, _STR), "suite_file": (True, _STR), "outcome": (True, _STR),
               "measure": (False, _STR), "scope": (False, _STR), "node": (False, _OPT_STR), "nodes": (False, (list,)),
               "line": (False, (int,)), "message": (False, _STR), "duration": (False, _NUM),
               "verdicts": (False, (list,)), "metrics": (False, (dict,)), "rows": (False, (list,)),
               "params": (False, (dict,)), "description": (False, _STR), "worst": (False, _OPT_STR),
               "figure": (False, _STR), "pool": (False, (dict,)), "comm": (False, (dict,)), "repeat": (False, (int,)),
               "unreachable": (False, (list,))},
    "plan": {"items": (True, (list,))},
    "exclude": {"hostlist": (False, _STR), "reasons": (False, (dict,)), "drain": (False, (list,)),
                "unmeasured": (False, (dict,)), "untested": (False, (list,)), "breaker": (False, _STR),
                "taint": (False, (list,))},
    "end": {"counts": (False, (dict,)), "interrupted": (False, (bool,)), "signal": (False, _OPT_STR),
            "stopped": (False, _STR),
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
