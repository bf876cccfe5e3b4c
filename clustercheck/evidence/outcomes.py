"""What the signed statement and the reports say the run came to (its verdict, its counts, the tests that
passed and failed), held against what the record proves, whatever clustercheck version rendered them.
Another version may lay a statement or a report out differently, so `verify` compares those byte for byte
only when its own version and report format made them; but a verdict is a verdict in every version: a
statement or a results.json saying PASS beside a record that failed is never a matter of layout."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

from clustercheck.record.io import Record
from clustercheck.record.schema import counts

# the predicate's fields a policy engine acts on: in-toto's result and test lists, clustercheck's verdict
OUTCOME_KEYS = ("result", "passedTests", "warnedTests", "failedTests")
RUN_KEYS = ("verdict", "counts")


def _at(doc: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(doc, Mapping):
            return None
        doc = doc.get(key)
    return doc


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def predicate_outcome_differs(want: Mapping[str, Any], got: Any) -> list[str]:
    """The outcome fields of the signed predicate `got` that differ from those built from the record."""
    differ = [k for k in OUTCOME_KEYS if _canonical(want.get(k)) != _canonical(_at(got, k))]
    differ += [f"clustercheck.run.{k}" for k in RUN_KEYS
               if _canonical(_at(want, "clustercheck", "run", k)) != _canonical(_at(got, "clustercheck", "run", k))]
    return differ


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
