"""Reports rendered from the run record: JSON results, SLA evidence, JUnit XML, CTRF, HTML. Every report is
rendered in full before any file is replaced, so a record that cannot be read (empty, binary, fields of
the wrong type) leaves the reports already there byte for byte as they were."""

from __future__ import annotations

import io
import os
from dataclasses import replace
from pathlib import Path
from typing import Any, BinaryIO, Callable, cast

from clustercheck.errors import UserError
from clustercheck.record.io import NotText, Record, RecordError, load
from clustercheck.record.schema import SCHEMA_VERSION, counts
from clustercheck.report.jsontext import write_json
from clustercheck.report.status import run_status

# Every report a run directory gets, by kind: `_writers` writes each from the record; the terminal lists them.
REPORTS = {"json": "results.json", "sla": "sla.json", "junit": "junit.xml", "ctrf": "ctrf.json",
           "html": "report.html"}


def read(record: Path, data: bytes | None = None) -> Record:
    """The run record to render (from `data`, its bytes already read, where given); UserError (one line)
    when it is unreadable or not a record."""
    try:
        rec = load(record, data)
    except OSError as exc:
        raise UserError(f"{record}: cannot read the run record: {exc.strerror or type(exc).__name__}; reports left "
                        "as they were") from None
    except NotText as exc:
        raise UserError(f"{record}: cannot read the run record: {exc}; reports left as they were") from None
    except RecordError as exc:
        raise UserError(f"{record}: not a run record clustercheck can render ({exc}); reports left as they were") \
            from None
    if rec.header.get("type") != "run":
        raise UserError(f"{record}: not a run record clustercheck can render (it has no 'run' line); "
                        "reports left as they were")
    return rec


def render_texts(rec: Record, signer: str | None = None) -> dict[str, tuple[str, bytes]]:
    """Every report of `rec` as (file name, bytes), in memory; `signer` the fingerprint of the key that
    signs (or signed) the run. UserError (one line) when the record cannot be rendered."""
    texts: dict[str, tuple[str, bytes]] = {}
    for kind, write in _writers_of(rec, signer).items():
        buf = io.BytesIO()
        _write(rec, signer, write, buf)
        texts[kind] = (REPORTS[kind], buf.getvalue())
    return texts


def _writers_of(rec: Record, signer: str | None) -> dict[str, Write]:
    try:
        return _writers(rec, signer)
    except _unrenderable() as exc:
        raise _refused(rec, signer, exc) from None


def _write(rec: Record, signer: str | None, write: Write, out: BinaryIO) -> None:
    try:
        write(out)
    except _unrenderable() as exc:
        raise _refused(rec, signer, exc) from None


def _refused(rec: Record, signer: str | None, exc: Exception) -> UserError:
    return UserError(f"{rec.path}: not a run record clustercheck can render ({culprit(rec, signer, exc)}); "
                     "reports left as they were")


def _unrenderable() -> tuple[type[Exception], ...]:
    from jinja2 import UndefinedError  # a field the template reads is missing from a hand-edited record

    return KeyError, TypeError, ValueError, AttributeError, IndexError, OverflowError, UndefinedError


def culprit(rec: Record, signer: str | None, exc: Exception) -> str:
    """Which line of `rec` the reports cannot render, and what they missed there: the run line alone, then
    with the plan, exclusion and end lines, then the shortest run of results that fails (halving: a few
    renders more, only once a record has failed)."""
    bare = replace(rec, results=[], plan=None, exclude=None, end=None)
    found = _fails(bare, signer)
    number = rec.lines.run
    thresholds = rec.header.get("thresholds")
    if found is None and isinstance(thresholds, dict) and not isinstance(thresholds.get("file"), str):
        # read only beside a result (junit's properties): a bare run line renders, so it is named here
        return f"line {number}: run.thresholds.file: " + ("missing" if "file" not in thresholds else "not text")
    if found is None:
        for part in ("plan", "exclude", "end"):
            if getattr(rec, part) is not None:
                bare = replace(bare, **{part: getattr(rec, part)})
                if (found := _fails(bare, signer)) is not None:
                    number = getattr(rec.lines, part)
                    break
    if found is None:
        ok, bad = 0, len(rec.results)  # a record with `ok` results renders; with `bad` it does not
        while bad - ok > 1:
            mid = (ok + bad) // 2
            if (failed := _fails(replace(bare, results=rec.results[:mid]), signer)) is None:
                ok = mid
            else:
                bad, found = mid, failed
        if bad and len(rec.lines.results) >= bad:
            number, found = rec.lines.results[bad - 1], found or exc
    if found is None or not number:
        return _what(exc)
    return f"line {number}: {_what(found)}"


def _fails(rec: Record, signer: str | None) -> Exception | None:
    try:
        for write in _writers(rec, signer).values():
            write(cast(BinaryIO, _Discard()))
    except _unrenderable() as exc:
        return exc
    return None


def _what(exc: Exception) -> str:
    """What the reports missed, in words: the key they looked for, else the value they could not use."""
    missing = exc.args[0] if isinstance(exc, KeyError) and exc.args else None
    if missing is None and "has no attribute" in str(exc) and type(exc).__name__ == "UndefinedError":
        missing = str(exc).rsplit("'", 2)[-2]  # jinja2: "'dict object' has no attribute 'duration'"
    if missing is not None:
        return f"no {str(missing)[:40]!r} where the reports read one"
    return f"a value the reports cannot use: {str(exc)[:80]}"


def render_record(rec: Record, out_dir: Path, signer: str | None = None) -> dict[str, Path]:
    """Write every report of `rec`, each to a temporary file as it renders (one report at a time: a large
    run's reports are never all in memory together), then replace the files: nothing is replaced when any
    fails."""
    writers = _writers_of(rec, signer)
    paths = {kind: out_dir / REPORTS[kind] for kind in writers}
    staged: list[tuple[Path, Path]] = []
    try:
        try:
            for kind, write in writers.items():
                tmp = out_dir / f".{REPORTS[kind]}.tmp{os.getpid()}"
                staged.append((tmp, paths[kind]))
                with tmp.open("wb") as f:
                    _write(rec, signer, write, f)
            for path in paths.values():  # a directory (or other non-file) in a report's place: refused before any change
                if path.exists() and not path.is_file():
                    raise IsADirectoryError(21, "Is a directory" if path.is_dir() else "not a regular file", str(path))
            for tmp, path in staged:  # only once every report rendered: never replace a report with less
                os.replace(tmp, path)
        except BaseException:
            for tmp, _ in staged:
                tmp.unlink(missing_ok=True)
            raise
    except OSError as exc:
        final = {str(tmp): path for tmp, path in staged}  # name the report, not its temporary file
        where = final.get(exc.filename, exc.filename) if isinstance(exc.filename, str) else out_dir
        raise UserError(f"{where}: cannot write the report ({exc.strerror or type(exc).__name__}); reports left as "
                        "they were") from None
    return paths


Write = Callable[[BinaryIO], object]


def _writers(rec: Record, signer: str | None) -> dict[str, Write]:
    """How to write each report of `rec`, by kind; what more than one report reads (the status, the SLA
    evidence) is worked out once, here, and each report renders only when written."""
    from clustercheck.report.ctrf import ctrf_doc
    from clustercheck.report.html import html_chunks
    from clustercheck.report.junit import write_junit
    from clustercheck.report.sla import evidence, signature
    from clustercheck.report.status import not_judged_text, selection_text

    header, results, end = rec.header, rec.results, rec.end
    status = run_status(rec)
    summary = {"schema": SCHEMA_VERSION, "run": header, "end": end, "counts": counts(results), **status,
               "results": results, **_burn_in(results, status["incomplete"] is not None),
               # the exclusion line as recorded: which nodes, why, and whether --drain/--taint took (a gate
               # tells a failed node drained from one still schedulable)
               **({"exclude": {k: v for k, v in rec.exclude.items() if k != "type"}} if rec.exclude else {})}
    sla = evidence(header, results, end)
    sla["complete"], sla["incomplete"] = status["incomplete"] is None, status["incomplete"]
    sla["verdict"], sla["untested"] = status["verdict"], status["untested"]  # what a reader of sla.json alone acts on
    if status.get("selection"):  # PASS of a selection, never of the whole suites: complete says the plan ran
        sla["selection"] = status["selection"]
    sla["signature"] = signature(signer)

    def html(out: BinaryIO) -> None:
        for chunk in html_chunks(header, results, end, sla, status, rec.not_run() if status["incomplete"] else (),
                                 rec.exclude):
            # a lone surrogate (a non-UTF-8 byte of --out or argv, as Python decodes it) as \udcff: strict
            # UTF-8 refused it and lost every report of the run
            out.write(chunk.encode("utf-8", "backslashreplace"))

    return {"json": lambda out: write_json(summary, out), "sla": lambda out: write_json(sla, out),  # NaN as "NaN"
            "junit": lambda out: write_junit(header, results, rec.not_run(), (status["incomplete"] or {}).get("reason"),
                                             status["untested"], out, selection_text(status["selection"])
                                             if status.get("selection") else None,
                                             not_judged_text(status["compare"]) if (status.get("compare") or {}).get(
                                                 "not_judged") else None),
            "ctrf": lambda out: write_json(ctrf_doc(header, results, end, rec.not_run(), status, signer), out),
            "html": html}


class _Discard:
    """A sink that keeps nothing: what `culprit` renders only to see whether it can."""

    def write(self, data: bytes) -> int:
        return len(data)


def _burn_in(results: Any, incomplete: bool) -> dict[str, Any]:
    """results.json's `burn_in` block for a repeated run: each item's summary and each node's pass ratio
    (each node `incomplete` when the run did not finish)."""
    from clustercheck.record.burnin import by_node, repeated, summarize

    if not repeated(results):
        return {}
    items = summarize(results)
    return {"burn_in": {"items": [s.as_dict() for s in items], "nodes": by_node(items, incomplete)}}

