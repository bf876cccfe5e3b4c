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


class Unreadable(ValueError):
    """A report that cannot be read for the outcomes it states: the message says why."""


def rendered_problems(run_dir: Path, texts: Mapping[str, tuple[str, bytes]]) -> tuple[list[str], list[str]]:
    """junit.xml's, ctrf.json's and report.html's outcomes (their totals, each testcase's or test's outcome,
    the verdict banner), parsed, against those of the same reports rendered from the record by this version
    (`texts`, report/__init__.py render_texts): (problems, the files that agree). What a CI gate or a reader
    acts on is compared, and only for saying better than the record proves (`_better`), not how a version
    lays the rest out. A report not in the run directory is left to
    the caller, which names it."""
    problems: list[str] = []
    agree: list[str] = []
    for kind, outcomes in (("junit", junit_outcomes), ("ctrf", ctrf_outcomes), ("html", html_outcomes)):
        if kind not in texts or not (run_dir / texts[kind][0]).is_file():
            continue
        name, rendered = texts[kind]
        try:
            got = outcomes((run_dir / name).read_bytes())
        except OSError as exc:
            problems.append(f"{name}: cannot be read ({exc.strerror or type(exc).__name__}): it states no outcome "
                            f"run.jsonl could prove")
            continue
        except Unreadable as exc:
            problems.append(f"{name}: {exc}: it states no outcome run.jsonl could prove")
            continue
        want = outcomes(rendered)
        wrong = [f"{k} {got.get(k, 'absent')} (run.jsonl proves {want[k]})" for k in want if _better(k, want[k], got)]
        if wrong:
            more = f"; and {len(wrong) - 6} more" if len(wrong) > 6 else ""
            problems.append(f"{name}: says {'; '.join(wrong[:6])}{more}: not what run.jsonl proves")
        else:
            agree.append(name)
    return problems, agree


# Another version may lay its reports out otherwise (a testcase more or fewer, other totals: report
# formats 10 and 12 added not-run and `compare` testcases), so a genuine record of it must not read as
# edited; what no version may do is say better than the record proves. So: the run's verdict and health as
# said, every failed or errored test said so, and no fewer failures and errors counted.
_WORDS = ("verdict", "healthy", "verdict banner")
_FAILING_TOTALS = ("failures", "errors", "summary.failed", "summary.other")
_GOOD = ("passed", "skipped", "pending")


def _better(key: str, want: str, got: Mapping[str, str]) -> bool:
    """Does the report say better than the record proves for `key` (its value `want` as this version renders it)?"""
    said = got.get(key)
    if key in _WORDS:
        return said is not None and said != want  # a version without the field says nothing better
    if key.split(" ")[-1] in _FAILING_TOTALS:  # a document's or a testsuite's total
        return not (said is not None and said.isdigit() and want.isdigit() and int(said) >= int(want))
    if key.startswith(("test ", "testcase ")):  # a failed or errored test: said so (absent is not said so)
        return any(part not in _GOOD for part in want.split("+")) and said != want
    return False


def _said(value: Any) -> str:
    return value if isinstance(value, str) else _canonical(value)


def _add(out: dict[str, str], key: str, value: str) -> None:
    """One outcome; a second under the same name is joined to the first, never in its place (a testcase
    listed twice, failed then passed, must not read as passed)."""
    out[key] = f"{out[key]}+{value}" if key in out else value


def ctrf_outcomes(data: bytes) -> dict[str, str]:
    """ctrf.json's summary counts, its run verdict and health, and each test's status, by test name."""
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError) as exc:  # RecursionError: nested deeper than json can read
        raise Unreadable(f"cannot be read as JSON ({type(exc).__name__})") from None
    tests, summary = _at(doc, "results", "tests"), _at(doc, "results", "summary")
    if not isinstance(tests, list) or not all(isinstance(t, Mapping) for t in tests) or not isinstance(summary, Mapping):
        raise Unreadable("no results.tests list and results.summary object (CTRF's)")
    out = {f"summary.{k}": _said(summary.get(k)) for k in ("tests", "passed", "failed", "skipped", "pending", "other")}
    if isinstance(_at(doc, "extra", "clustercheck.run"), Mapping):
        out["verdict"] = _said(_at(doc, "extra", "clustercheck.run", "verdict"))
    if isinstance(_at(doc, "results", "environment"), Mapping):
        out["healthy"] = _said(_at(doc, "results", "environment", "healthy"))
    for t in tests:
        _add(out, f"test {_said(t.get('name'))}", _said(t.get("status")))
    return out


def junit_outcomes(data: bytes) -> dict[str, str]:
    """junit.xml's totals (tests, failures, errors, skipped) on the document and on each testsuite, and each
    testcase's outcome (failure, error, skipped, or passed with none of them), by testsuite and name. Read
    with expat and no DTD: clustercheck never writes one, and entities could make a small file huge."""
    import xml.parsers.expat

    out: dict[str, str] = {}
    stack: list[str] = []
    where = {"suite": "", "case": ""}
    results: list[str] = []

    def refuse(*_: Any) -> None:
        raise Unreadable("holds a DTD, which clustercheck never writes")

    def totals(prefix: str, attrs: Mapping[str, str]) -> None:
        for k in ("tests", "failures", "errors", "skipped"):
            if k in attrs:
                out[f"{prefix}{k}"] = attrs[k]

    def start(tag: str, attrs: dict[str, str]) -> None:
        if not stack:
            totals("", attrs)
        if tag == "testsuite":
            where["suite"] = attrs.get("name", "")
            totals(f"testsuite {where['suite']} ", attrs)
        elif tag == "testcase":
            where["case"] = attrs.get("name", "")
            results.clear()
        elif tag in ("failure", "error", "skipped") and stack and stack[-1] == "testcase":
            results.append(tag)
        stack.append(tag)

    def end(tag: str) -> None:
        stack.pop()
        if tag == "testcase":
            _add(out, f"testcase {where['suite']}/{where['case']}", "+".join(sorted(results)) or "passed")

    parser = xml.parsers.expat.ParserCreate()
    parser.StartDoctypeDeclHandler = refuse
    parser.EntityDeclHandler = refuse
    parser.StartElementHandler = start
    parser.EndElementHandler = end
    try:
        parser.Parse(data, True)
    except xml.parsers.expat.ExpatError as exc:
        raise Unreadable(f"cannot be read as XML ({exc})") from None
    return out


def html_outcomes(data: bytes) -> dict[str, str]:
    """report.html's verdict banner (the element with id="verdict"): its first word, each banner's where a
    page holds more than one. Nothing else of a page is read: its layout is another version's to choose."""
    import re
    from html.parser import HTMLParser

    words: list[str] = []

    class Banner(HTMLParser):
        tag: str | None = None
        depth = 0
        text = ""

        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            if self.tag is None and ("id", "verdict") in attrs:
                self.tag, self.depth, self.text = tag, 0, ""
            elif tag == self.tag:
                self.depth += 1

        def handle_endtag(self, tag: str) -> None:
            if tag == self.tag:
                if self.depth:
                    self.depth -= 1
                    return
                found = re.match(r"\s*([A-Z]+)\b", self.text)
                words.append(found.group(1) if found else repr(self.text.strip()[:40]))
                self.tag = None

        def handle_data(self, data: str) -> None:
            if self.tag is not None:
                self.text += data

    page = Banner(convert_charrefs=True)
    page.feed(data.decode("utf-8", "replace"))
    page.close()
    return {"verdict banner": "+".join(words) or "absent"}


def brief_counts(c: Any) -> str:
    if not isinstance(c, Mapping):
        return "none" if c is None else repr(c)[:60]
    return ", ".join(f"{v} {k}" for k, v in sorted(c.items()))
