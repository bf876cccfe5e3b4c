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
from clustercheck.record.lines import NotText, RecordError, check, check_schema, parse  # noqa: F401 (re-exported)
from clustercheck.record.schema import EndEntry, ExcludeEntry, PlanItem, ResultEntry, RunHeader, Selection, item_id
from clustercheck.units import is_count

# the report format from which not_run() lists the items of the repetitions a run never started as well
REPETITIONS_NOT_RUN = 10


@dataclass(frozen=True)
class Lines:
    """Where each part of a record stands in its file (line numbers; 0: absent), so that what a reader
    cannot use is named by its line."""
    run: int = 0
    results: tuple[int, ...] = ()
    plan: int = 0
    exclude: int = 0
    end: int = 0


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
    lines: Lines = Lines()
    selection: Selection | None = None  # the plan's: the run measured fewer items than its suites hold

    def not_run(self, unstarted: bool | None = None) -> list[PlanItem]:
        """Planned items without a result: never started, or cut off by an interruption or a kill. In a
        repeated run each is an item-repetition, named `<check>[<where>]#<k>` and carrying `repeat: k`, and
        every repetition from 1 to the last that started is checked: a result missing in the middle (a line
        lost, the later repetitions whole) is as much not run as one cut off at the end. `unstarted`: also
        each planned item once for the repetitions without a result past the last with one (unstarted()), named
        `<check>[<where>]#<first>-<last>` with `repeat: first` and `repetitions`: how many (one entry per item,
        not per repetition: a --repeat 1000000 stopped early must not list millions); None: as the record's
        report format says (from 10; the reports of older formats render as they did)."""
        plan = self.plan or []
        if unstarted is None:
            unstarted = self.report_format() >= REPETITIONS_NOT_RUN
        last, never = self.started(), self.unstarted() if unstarted else []
        if not last and not never:  # a run that did not repeat (or, before format 10, one that ran nothing)
            done = {item_id(r) for r in self.results}
            return [p for p in plan if item_id(p) not in done]
        ran = {(item_id(r), int(r.get("repeat") or 0)) for r in self.results}
        out: list[PlanItem] = [{**p, "name": f"{p['name']}#{k}", "repeat": k}  # type: ignore[typeddict-unknown-key]
                               for k in range(1, last + 1) for p in plan if (item_id(p), k) not in ran]
        if never:
            which = f"{never[0]}-{never[-1]}" if len(never) > 1 else f"{never[0]}"
            out += [{**p, "name": f"{p['name']}#{which}", "repeat": never[0],  # type: ignore[typeddict-unknown-key]
                     "repetitions": len(never)} for p in plan]
        return out

    def not_run_count(self, unstarted: bool | None = None) -> int:
        """The item-repetitions not_run() stands for (an entry for the repetitions never started counts each)."""
        return sum(int(p.get("repetitions") or 1) for p in self.not_run(unstarted))  # type: ignore[call-overload]

    def started(self) -> int:
        """The last repetition with a result (0: none, or a run that did not repeat)."""
        return max((int(r.get("repeat") or 0) for r in self.results), default=0)

    def asked(self) -> int | None:
        """The repetitions a `--repeat N` run was asked for (the header's repeat.count); None otherwise (a
        `--duration` run knows no count)."""
        count = (self.header.get("repeat") or {}).get("count")
        return count if is_count(count) else None

    def reached(self) -> int:
        """The last repetition the record says the run reached: the last with a result, or the end line's
        count where it says more ran (their result lines lost: repetitions_lost())."""
        said = (self.end or {}).get("repetitions")
        return max(self.started(), said if is_count(said) else 0)

    def unstarted(self) -> list[int]:
        """The repetitions past the last with a result that the record says were to run: those of a `--repeat
        N` run that never started (an interruption, a kill, a stop between repetitions), and those its end
        line says ran with no result left (a --duration run's too: their lines lost; a --duration run's count
        stopped at the last with a result, so the lost repetition's items went uncounted and unnamed). They
        are not run as much as an item cut off is."""
        return list(range(self.started() + 1, max(self.asked() or 0, self.reached()) + 1))

    def report_format(self) -> int:
        made_as = self.header.get("report_format", 1)  # records before formats were numbered: 1
        return made_as if isinstance(made_as, int) else 1

    def repeated_result(self) -> str | None:
        """`line N: a second result for ITEM (the first is line M)`, where two results have one (item,
        repetition): a baseline that read it would take the last; None when each has one. compare and
        --compare refuse such a record; verify names it among its problems (evidence/rejudge.py)."""
        seen: dict[tuple[str, int], int] = {}
        for r, number in zip(self.results, self.lines.results or range(1, len(self.results) + 1)):
            key = (item_id(r), int(r.get("repeat") or 0))
            if key in seen:
                again = f" in repetition {key[1]}" if key[1] else ""
                return (f"line {number}: a second result for {key[0][:80]}{again} (the first is line {seen[key]}); "
                        "a run writes one")
            seen[key] = number
        return None

    def repetitions_lost(self) -> str | None:
        """Why a repeated run's record holds results of fewer repetitions than ran, or None: not_run() checks
        each repetition up to the last with a result (started()), so every result line of the last ones lost
        (the end line intact) would leave a shorter run that reads whole. The end line says how many ran (a
        --duration run's too); where it does not, a `--repeat N` record must hold N, and a --duration
        record cannot be checked at all: not judged is no pass. A run that planned nothing has none to hold."""
        if not (self.header.get("repeat") or "repetitions" in (self.end or {})) or self.plan == []:
            return None
        said, held = (self.end or {}).get("repetitions"), self.started()
        if is_count(said):
            return None if held >= said else f"the end line says {said} repetitions ran; the record holds results of {held}"
        asked = self.asked()
        if asked is None:
            return (f"the end line does not say how many repetitions ran, and --duration asks for no count: the "
                    f"record's results of {held} cannot be checked whole")
        return None if held >= asked else (f"the end line does not say how many repetitions ran; {asked} were "
                                           f"asked for and the record holds results of {held}")

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
        missing = len(self.not_run(unstarted=False))  # (the repetitions that never started: counted below)
        if missing:
            return f"{missing} planned item(s) never ran"
        if short := self.repetitions_lost():
            return short
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


def load(path: Path, data: bytes | None = None) -> Record:
    """Every line of a run record, each checked for the shape its readers rely on (record/lines.py:
    RecordError naming the line otherwise). Only a torn *last* line (a writer killed mid-line) is ignored: a
    bad line anywhere else would hide a result, and a gate must not read a record with holes as complete.
    Every reader (report, compare, --compare, sign, verify) shares these refusals: a record of another
    schema version, or none, is refused here, not read by guesswork. `data`: the file's bytes, already read
    (verify judges the very bytes it hashed), else they are read from `path`."""
    header: RunHeader = {}
    results: list[ResultEntry] = []
    exclude: ExcludeEntry | None = None
    end: EndEntry | None = None
    plan: list[PlanItem] | None = None
    selection: Selection | None = None
    at: dict[str, Any] = {"results": []}  # where each part stands: Record.lines
    for number, entry in _lines(path, data):
        if "end" in at:  # a writer writes nothing after its end line: a later one is not a kill's doing
            raise RecordError(f"line {number}: {'a torn line' if entry is None else 'a line'} after the end line "
                              f"(line {at['end']}); a run writes nothing after its end")
        if entry is None:
            continue  # the last line, torn by a kill: what came before stands, and no end line says INCOMPLETE
        kind = entry.get("type")
        if kind in ("run", "exclude", "plan") and kind in at:  # the last would win: a second header or plan
            raise RecordError(f"line {number}: a second {kind} line (the first is line {at[kind]}); a run writes one")
        if kind == "run":
            check_schema(entry, number)
        check(entry, number)
        if kind == "run":
            header = entry  # type: ignore[assignment]  # checked above: the writer gave it this shape
        elif kind == "result":
            results.append(entry)  # type: ignore[arg-type]
            at["results"].append(number)
        elif kind == "exclude":
            exclude = entry  # type: ignore[assignment]
        elif kind == "end":
            end = entry  # type: ignore[assignment]
        elif kind == "plan":
            plan, selection = entry["items"], entry.get("selection")
        if kind in ("run", "exclude", "end", "plan"):
            at[kind] = number
    at["results"] = tuple(at["results"])
    return Record(path, header, results, exclude, end, plan, Lines(**at), selection)


def read_record(path: Path) -> tuple[RunHeader, list[ResultEntry], EndEntry | None]:
    """(header, results, end): the three parts most readers need."""
    record = load(path)
    return record.header, record.results, record.end


def _lines(path: Path, data: bytes | None = None) -> Iterator[tuple[int, dict[str, Any] | None]]:
    """Each line's object, and None for the last line torn by a kill (blank lines are skipped)."""
    if data is None:
        with path.open("rb") as fh:
            data = fh.read()
    lines = data.split(b"\n")
    for number, raw in enumerate(lines, 1):
        # the file ends in a newline: the last element is empty; one that is not was torn by a kill
        torn = number == len(lines) and raw != b""
        entry = parse(raw, number, last=torn)
        if entry is not None or torn:
            yield number, entry
