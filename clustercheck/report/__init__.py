"""Reports rendered from the run record: JSON results, SLA evidence, JUnit XML, CTRF, HTML. Every report is
rendered in full before any file is replaced, so a record that cannot be read (empty, binary, fields of
the wrong type) leaves the reports already there byte for byte as they were."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Any

from clustercheck.errors import UserError
from clustercheck.record.io import NotText, Record, RecordError, load
from clustercheck.record.schema import SCHEMA_VERSION, counts
from clustercheck.report.jsontext import json_bytes
from clustercheck.report.status import run_status

# Every report a run directory gets, by kind: `_render` makes each from the record; the terminal lists them.
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
    try:
        return _render(rec, signer)
    except _unrenderable() as exc:
        raise UserError(f"{rec.path}: not a run record clustercheck can render ({culprit(rec, signer, exc)}); "
                        "reports left as they were") from None


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
        _render(rec, signer)
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
    """Render every report of `rec` in memory, then replace the files: nothing is replaced when any fails."""
    texts = render_texts(rec, signer)
    paths = {kind: out_dir / name for kind, (name, _) in texts.items()}
    staged: list[tuple[Path, Path]] = []
    try:
        for kind, (name, data) in texts.items():
            tmp = out_dir / f".{name}.tmp{os.getpid()}"
            staged.append((tmp, paths[kind]))
            tmp.write_bytes(data)
        for path in paths.values():  # a directory (or other non-file) in a report's place: refused before any change
            if path.exists() and not path.is_file():
                raise IsADirectoryError(21, "Is a directory" if path.is_dir() else "not a regular file", str(path))
        for tmp, path in staged:  # only once every report rendered: never replace a report with less
            os.replace(tmp, path)
    except OSError as exc:
        for tmp, _ in staged:
            tmp.unlink(missing_ok=True)
        final = {str(tmp): path for tmp, path in staged}  # name the report, not its temporary file
        where = final.get(exc.filename, exc.filename) if isinstance(exc.filename, str) else out_dir
        raise UserError(f"{where}: cannot write the report ({exc.strerror or type(exc).__name__}); reports left as "
                        "they were") from None
    return paths


def _render(rec: Record, signer: str | None) -> dict[str, tuple[str, bytes]]:
    from clustercheck.report.ctrf import render_ctrf
    from clustercheck.report.html import render_html
    from clustercheck.report.junit import render_junit
    from clustercheck.report.sla import evidence, signature

    header, results, end = rec.header, rec.results, rec.end
    status = run_status(rec)
    summary = {"schema": SCHEMA_VERSION, "run": header, "end": end, "counts": counts(results), **status,
               "results": results, **_burn_in(results, status["incomplete"] is not None)}
    sla = evidence(header, results, end)
    sla["complete"], sla["incomplete"] = status["incomplete"] is None, status["incomplete"]
    sla["verdict"], sla["untested"] = status["verdict"], status["untested"]  # what a reader of sla.json alone acts on
    sla["signature"] = signature(signer)
    made = {"json": json_bytes(summary), "sla": json_bytes(sla),  # NaN as "NaN": strict JSON
            "junit": render_junit(header, results, rec.not_run(), (status["incomplete"] or {}).get("reason"),
                                  status["untested"]),
            "ctrf": render_ctrf(header, results, end, rec.not_run(), status, signer),
            # a lone surrogate (a non-UTF-8 byte of --out or argv, as Python decodes it) as \udcff: strict
            # UTF-8 refused it and lost every report of the run
            "html": render_html(header, results, end, sla, status).encode("utf-8", "backslashreplace")}
    return {kind: (REPORTS[kind], data) for kind, data in made.items()}


def _burn_in(results: Any, incomplete: bool) -> dict[str, Any]:
    """results.json's `burn_in` block for a repeated run: each item's summary and each node's pass ratio
    (each node `incomplete` when the run did not finish)."""
    from clustercheck.record.burnin import by_node, repeated, summarize

    if not repeated(results):
        return {}
    items = summarize(results)
    return {"burn_in": {"items": [s.as_dict() for s in items], "nodes": by_node(items, incomplete)}}

