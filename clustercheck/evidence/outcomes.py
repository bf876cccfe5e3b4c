"""What the signed statement and the reports say about the run (the statement: everything it derives from
the record; the reports: the verdict, the counts, each item's outcome), held against what the record
proves, whatever clustercheck version rendered them. Another version may lay a report out differently, so
`verify` compares those byte for byte only when its own version and report format made them; but a verdict
is a verdict in every version, and a profile's sha256 or a GPU's serial is one too: a statement or a
results.json saying PASS beside a record that failed, or naming hardware the record does not, is never a
matter of layout."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

from clustercheck.record.io import Record
from clustercheck.record.schema import counts

# The predicate's fields that say nothing about the run, only how a version words what `verify` checks: the
# one part of a statement another version may build differently without a lie in it. Everything else the
# predicate holds is derived from the record (its result and tests, the profiles' sha256, the platform, each
# node's GPU UUIDs and serials, the versions, the run's id, argv and verdict) and is compared whatever version
# the record claims: that claim is the signer's own, and it must not turn a statement naming another
# profile or another GPU into a note.
LAYOUT_KEYS = ("clustercheck.verify",)


def _at(doc: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(doc, Mapping):
            return None
        doc = doc.get(key)
    return doc


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def _fields(predicate: Any) -> dict[str, Any]:
    """The predicate as dotted fields: its own keys, clustercheck's block's and the run's within it."""
    out: dict[str, Any] = {}
    for key, value in (predicate.items() if isinstance(predicate, Mapping) else ()):
        if key == "clustercheck" and isinstance(value, Mapping):
            for sub, inner in value.items():
                if sub == "run" and isinstance(inner, Mapping):
                    out.update({f"clustercheck.run.{k}": v for k, v in inner.items()})
                else:
                    out[f"clustercheck.{sub}"] = inner
        else:
            out[str(key)] = value
    return out


def predicate_differs(want: Mapping[str, Any], got: Any) -> tuple[list[str], list[str]]:
    """The fields of the signed predicate `got` that are not what the record derives (`want`), then those
    left unjudged: the layout fields another version may word differently and fields this version does not
    build (a newer version's, which nothing here can derive)."""
    mine, theirs = _fields(want), _fields(got)
    differ = [k for k in mine if k not in LAYOUT_KEYS and _canonical(mine[k]) != _canonical(theirs.get(k))]
    unjudged = [k for k in LAYOUT_KEYS if k in theirs and _canonical(mine.get(k)) != _canonical(theirs[k])]
    unjudged += [k for k in theirs if k not in mine and k not in LAYOUT_KEYS]
    return differ, unjudged


def end_problems(rec: Record) -> list[str]:
    """The end line's counts against the results: the run writes them from its results (run/session.py)."""
    if rec.end is None or _canonical(rec.end.get("counts")) == _canonical(counts(rec.results)):
        return []
    return [f"{rec.path.name}:{rec.lines.end or '?'}: end counts {brief_counts(rec.end.get('counts'))}, but its "
            f"results count {brief_counts(counts(rec.results))}: the run writes them from its results"]


def report_problems(run_dir: Path, rec: Record, status: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    """results.json's and sla.json's verdict and counts, parsed, against the record's: (problems, the files
    that agree). A report not in the run directory is left to the caller, which names it."""
    want = counts(rec.results)
    verdict = status["verdict"]
    problems: list[str] = []
    agree: list[str] = []
    for name in ("results.json", "sla.json"):
        path = run_dir / name
        if not path.is_file():
            continue
        try:
            doc = json.loads(path.read_bytes())
        except (OSError, ValueError, RecursionError) as exc:  # RecursionError: nested deeper than json can read
            problems.append(f"{name}: cannot be read as JSON ({type(exc).__name__}): it states no verdict")
            continue
        said = _at(doc, "verdict")
        if name == "results.json":
            said_counts = _at(doc, "counts")
        else:
            checks = _at(doc, "checks")
            said_counts = None
            if isinstance(checks, list) and all(isinstance(c, Mapping) and c.get("outcome") in want for c in checks):
                said_counts = dict.fromkeys(want, 0)
                for c in checks:
                    said_counts[c["outcome"]] += 1
        wrong = []
        if said != verdict:
            wrong.append(f"verdict {said}, the record proves {verdict}")
        if _canonical(said_counts) != _canonical(want):
            wrong.append(f"counts {brief_counts(said_counts)}, the record's results {brief_counts(want)}")
        if wrong:
            problems.append(f"{name}: says {'; '.join(wrong)}: not what run.jsonl proves")
        else:
            agree.append(name)
    return problems, agree


def brief_counts(c: Any) -> str:
    if not isinstance(c, Mapping):
        return "none" if c is None else repr(c)[:60]
    return ", ".join(f"{v} {k}" for k, v in sorted(c.items()))
