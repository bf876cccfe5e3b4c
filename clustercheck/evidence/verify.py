"""`clustercheck verify RUN --key PUB`: what a buyer runs on a delivered run directory. Five things, each
failure one line naming the file (and the record line where there is one):

1. the attestation's signature, against exactly the public keys given;
2. every listed file's sha256;
3. no file of the run directory left out of the attestation;
4. every metric re-derived from the raw per-rank measurements in run.jsonl (evidence/rejudge.py);
5. every verdict re-judged from its metric and the limit in the recorded threshold profile;
6. the signed statement's predicate (result, verdict, passed and failed tests) is what run.jsonl says.

Besides, the reports (results.json, sla.json, junit.xml, report.html, ctrf.json) must be what run.jsonl
renders to when this is the clustercheck version that rendered them (rendering is deterministic); one
not in the run directory is named as not compared. Whatever version made them, the predicate's outcome
(result, tests, verdict, counts), configuration, platform, nodes and versions, results.json's and
sla.json's verdict and counts, ctrf.json's and junit.xml's totals and each test's outcome, and
report.html's verdict banner must be the record's (evidence/outcomes.py); only the byte-for-byte
comparison of another version's reports is left to a note."""

from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Sequence

from clustercheck import __version__
from clustercheck.errors import UserError
from clustercheck.record import attestation
from clustercheck.record.statement import ATTESTATION, EvidenceProblem, evidence_files, sha256_file, unreadable
from clustercheck.record.keys import PublicKey
from clustercheck.record.schema import REPORT_FORMAT
from clustercheck.evidence.outcomes import end_problems
from clustercheck.evidence.rejudge import Rejudged, rejudge

RECORD = "run.jsonl"


@dataclass
class Verdict:
    problems: list[str] = field(default_factory=list)
    passed: list[str] = field(default_factory=list)  # what was checked and held, one line each
    notes: list[str] = field(default_factory=list)
    record: Any = None  # the run record as judged (from the bytes hashed), None where it could not be read
    selection: tuple[str, int, int] | None = None  # the run's item selection (Rejudged.selection)

    @property
    def verified(self) -> bool:
        return not self.problems


def run_dir_of(run: Path) -> Path:
    directory = run.parent if run.name == RECORD and run.is_file() else run
    if not directory.is_dir():
        raise UserError(f"{run}: not a run directory")
    if not (directory / RECORD).is_file() and not (directory / ATTESTATION).is_file():
        raise UserError(f"{run}: no {RECORD} and no {ATTESTATION}: not a clustercheck run directory")
    return directory


def verify(run_dir: Path, keys: Sequence[PublicKey]) -> Verdict:
    out = Verdict()
    data = _record_bytes(run_dir)  # read once: the bytes hashed are the bytes judged
    signed = _signature(run_dir, keys, out)
    if signed is not None:
        _digests(run_dir, signed.statement, out, data)
    _rejudge(run_dir, out, signed, data)
    return out


def _signature(run_dir: Path, keys: Sequence[PublicKey], out: Verdict) -> attestation.Signed | None:
    try:
        signed = attestation.read(run_dir)
    except attestation.AttestationError as exc:
        out.problems.append(str(exc))
        return None
    problem = attestation.check_signature(signed, keys)
    if problem:
        out.problems.append(problem)
    else:
        by = ", ".join(k for k in signed.keyids if k in {key.fingerprint for key in keys})
        out.passed.append(f"signature: ed25519 by {by}, one of the {len(keys)} key(s) given")
    return signed


def _record_bytes(run_dir: Path) -> bytes | None:
    """run.jsonl's bytes, or None where it cannot be read (then it is read by path, and the reader says why)."""
    try:
        return (run_dir / RECORD).read_bytes() if stat.S_ISREG(os.lstat(run_dir / RECORD).st_mode) else None
    except OSError:
        return None


def _digests(run_dir: Path, stmt: dict[str, Any], out: Verdict, data: bytes | None) -> None:
    listed: dict[str, str] = {}
    for s in stmt.get("subject") or ():
        name = str(s.get("name") if isinstance(s, dict) else "")
        digest = (s.get("digest") or {}).get("sha256") if isinstance(s, dict) else None
        path = PurePosixPath(name)
        if not name or path.is_absolute() or ".." in path.parts or name == ATTESTATION:
            out.problems.append(f"{ATTESTATION}: lists {name!r}, which is no file of the run directory")
            continue
        listed[name] = str(digest)
    before = len(out.problems)
    for name, digest in listed.items():
        file = run_dir / name
        try:
            regular = stat.S_ISREG(os.lstat(file).st_mode)
            if name == RECORD and data is not None:
                same = regular and hashlib.sha256(data).hexdigest() == digest
            else:
                same = regular and sha256_file(file) == digest
        except FileNotFoundError:
            regular = same = False
        except OSError as exc:  # never skipped: what cannot be read is not shown to be as signed
            out.problems.append(unreadable(name, exc))
            continue
        if not regular:
            out.problems.append(f"{name}: listed in {ATTESTATION} but missing from the run directory")
        elif not same:
            out.problems.append(f"{name}: sha256 differs from {ATTESTATION}'s: changed after signing")
    if len(out.problems) == before:
        out.passed.append(f"digests: the {len(listed)} file(s) {ATTESTATION} lists are as signed")
    before = len(out.problems)
    try:
        present = evidence_files(run_dir)
    except EvidenceProblem as exc:
        out.problems.append(str(exc))
        return
    for name in present:
        if name not in listed:
            out.problems.append(f"{name}: in the run directory but not in {ATTESTATION}: added after signing")
    if len(out.problems) == before:
        out.passed.append("complete: every file of the run directory is listed")


def _rejudge(run_dir: Path, out: Verdict, signed: attestation.Signed | None, data: bytes | None) -> None:
    from clustercheck.report import REPORTS, read, render_texts

    try:
        rec = read(run_dir / RECORD, data)
    except UserError as exc:
        out.problems.append(f"{RECORD}: {str(exc).split(': ', 1)[-1]}")
        return
    out.record = rec
    got: Rejudged = rejudge(run_dir, rec)
    out.selection = got.selection
    out.problems += got.problems + end_problems(rec)
    out.notes += got.notes
    if not got.problems:
        out.passed.append(f"metrics: {got.metrics} metric(s) of {got.results} result(s) re-derived from the ranks' raw "
                          f"measurements in {RECORD}")
        out.passed.append(f"verdicts: {got.verdicts} re-judged against {got.profile or 'the recorded profile'} "
                          f"(the record's sha256)")
    made_by = ((rec.header.get("facts") or {}).get("versions") or {}).get("clustercheck")
    made_as = rec.header.get("report_format", 1)  # records before formats were numbered: 1
    # another version or format may render the same record differently: a difference is then no proof of an edit
    other = "" if (made_by, made_as) == (__version__, REPORT_FORMAT) else (
        f"rendered by clustercheck {made_by} in report format {made_as}, this is {__version__} with format "
        f"{REPORT_FORMAT}")
    if signed is not None:
        _predicate(rec, signed.statement, out, other)
    signer = ", ".join(signed.keyids) if signed is not None else _claimed_signer(run_dir)
    try:
        texts = render_texts(rec, signer)
    except UserError as exc:
        texts, unrendered = None, str(exc).split(": ", 1)[-1]
    if other:  # the byte-for-byte comparison below proves nothing then; what the reports say still must agree
        _outcomes(run_dir, rec, out, texts)
    if texts is None:
        present = [REPORTS[k] for k in ("junit", "ctrf", "html") if (run_dir / REPORTS[k]).is_file()]
        if other and not present:
            out.notes.append(f"reports not compared with {RECORD}: {other}")
        elif other:  # what junit.xml, ctrf.json and report.html say is read against this version's rendering
            out.problems.append(f"{', '.join(present)}: not compared with {RECORD}, which this clustercheck cannot "
                                f"render ({unrendered}): not shown to say what it proves")
        else:
            out.problems.append(f"{RECORD}: {unrendered}")
        return
    absent = [name for name, _ in texts.values() if not (run_dir / name).is_file()]
    differ = [name for name, data in texts.values() if name not in absent and _bytes(run_dir / name, out) != data]
    if absent:  # the verdict stands on the record, re-judged above; a report not there proves nothing either way
        out.notes.append(f"reports not compared, not in the run directory: {', '.join(absent)}")
    if not differ and len(absent) < len(texts):
        out.passed.append(f"reports: {', '.join(name for name, _ in texts.values() if name not in absent)} are "
                          f"what {RECORD} renders to")
    elif other:
        out.notes.append(f"reports not compared with {RECORD}: {other} ({', '.join(differ)} render differently)")
    else:
        out.problems += [f"{name}: differs from what {RECORD} renders to: edited after it was rendered"
                         for name in differ]


def _outcomes(run_dir: Path, rec: Any, out: Verdict, texts: dict[str, tuple[str, bytes]] | None) -> None:
    """Reports another version rendered: each one's verdict, counts and item outcomes, parsed, against the
    record's (evidence/outcomes.py), since a report saying PASS for a failed item is never a matter of layout."""
    from clustercheck.evidence.outcomes import rendered_problems, report_problems
    from clustercheck.report.status import run_status

    wrong, agree = report_problems(run_dir, rec, run_status(rec))
    if texts is not None:
        more_wrong, more_agree = rendered_problems(run_dir, texts)
        wrong, agree = wrong + more_wrong, agree + more_agree
    out.problems += wrong
    if agree:
        out.passed.append(f"report outcomes: {', '.join(agree)} state the verdict, counts and outcomes {RECORD} "
                          f"proves")


def _predicate(rec: Any, stmt: dict[str, Any], out: Verdict, other: str) -> None:
    """The signed statement's predicate (the result an in-toto policy reads: PASSED, the verdict, the tests
    that passed and failed; the profiles' sha256, the platform, each node's GPUs, the versions) must be what
    the record says: a signature over `PASSED` beside a record that failed would verify every digest and
    still tell a policy engine the run passed. Everything it derives from the record is compared whatever
    version signed it (evidence/outcomes.py); only how another version words what verify checks is noted."""
    import json

    from clustercheck.evidence.outcomes import predicate_differs
    from clustercheck.record.statement import header_problem, predicate
    from clustercheck.report.status import run_status

    def canonical(value: Any) -> str:
        return json.dumps(value, sort_keys=True, default=str)

    why = header_problem(rec.header)  # a header no run writes (facts.gpus: "x"): what `sign` refuses
    try:
        want = None if why else predicate(rec, run_status(rec))
    except (AttributeError, TypeError, ValueError, KeyError) as exc:  # what header_problem does not foresee
        why = f"{type(exc).__name__}: {str(exc)[:80]}"
    if want is None:
        out.problems.append(f"{RECORD}:{rec.lines.run or 1}: its header makes no statement to compare "
                            f"{ATTESTATION}'s with ({why}): not what a run writes")
        return
    got = stmt.get("predicate")
    if isinstance(got, dict) and canonical(want) == canonical(got):
        out.passed.append(f"statement: its predicate (result {want['result']}, verdict "
                          f"{want['clustercheck']['run']['verdict']}) is what {RECORD} says")
        return
    keys = sorted(k for k in set(want) | set(got if isinstance(got, dict) else {})
                  if not isinstance(got, dict) or canonical(want.get(k)) != canonical(got.get(k)))
    said = (f"{ATTESTATION}: its predicate differs from what {RECORD} says in {', '.join(keys)} (it says result "
            f"{got.get('result') if isinstance(got, dict) else 'nothing'}, {RECORD} {want['result']})")
    differ, unjudged = predicate_differs(want, got)
    if other and not differ:  # another version may word what verify checks otherwise: no proof of an edit
        out.passed.append(f"statement: its predicate (result {want['result']}, verdict "
                          f"{want['clustercheck']['run']['verdict']}, configuration, platform, nodes, versions) is "
                          f"what {RECORD} says")
        if unjudged:
            out.notes.append(f"statement not compared with {RECORD} in {', '.join(unjudged)}: {other}")
    elif other:
        out.problems.append(f"{said}; its {', '.join(differ)} are not what {RECORD} proves, whatever version "
                            f"signed it")
    else:
        out.problems.append(said)


def _bytes(path: Path, out: Verdict) -> bytes | None:
    try:
        return path.read_bytes()
    except OSError as exc:
        out.problems.append(unreadable(path.name, exc))
        return None


def _claimed_signer(run_dir: Path) -> str | None:
    """Who sla.json says signed (the reports name the signer, which the record does not hold)."""
    import json

    try:
        found = json.loads((run_dir / "sla.json").read_text(encoding="utf-8"))["signature"]["signed_by"]
    except (OSError, ValueError, KeyError, TypeError, RecursionError):  # nested deeper than json can read
        return None
    return found if isinstance(found, str) else None
