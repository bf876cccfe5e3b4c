"""Signing a run: `clustercheck run ... --sign KEY` at the end of the run, `clustercheck sign RUN --key KEY`
for a run already on disk. Both render the reports with the signer's fingerprint in them (sla.json and
report.html say who signed and what `verify` checks), then hash every file and write attestation.json.
The private key is never written anywhere and its path never reaches a report."""

from __future__ import annotations

from pathlib import Path

from clustercheck.errors import UserError
from clustercheck.record import attestation, inputs
from clustercheck.record.statement import EvidenceProblem, header_problem
from clustercheck.record.io import Record
from clustercheck.record.keys import SigningKey

def sign_run(run_dir: Path, rec: Record, key: SigningKey) -> dict[str, Path]:
    """Render every report of `rec` into `run_dir` naming the signer, then sign; the reports' paths plus
    `attestation`. UserError (one line) when the run directory holds what cannot be signed."""
    from clustercheck.report import render_record
    from clustercheck.report.status import run_status

    # before anything is written: a header no run writes makes no statement, and the reports stay as they were
    why = header_problem(rec.header)
    if why:
        raise UserError(f"{rec.path}: not a run record clustercheck can sign (line {rec.lines.run or 1}: {why}); "
                        f"reports left as they were")
    inputs.complete_for_signing(run_dir, rec.header)
    paths = render_record(rec, run_dir, signer=key.fingerprint)
    try:
        paths["attest"] = attestation.sign(run_dir, rec, run_status(rec), key)
    except EvidenceProblem as exc:
        raise UserError(f"{run_dir}: cannot sign: {exc}") from None
    except OSError as exc:
        raise UserError(f"{run_dir}: cannot write the attestation ({exc.strerror or type(exc).__name__})") from None
    return paths


def render_and_sign(rec: Record, run_dir: Path, key: SigningKey | None) -> str | None:
    """The end of a run: its reports, and with --sign its attestation. None, or why it could not be signed."""
    from clustercheck.report import render_record

    if key is None:
        render_record(rec, run_dir)
        return None
    try:
        sign_run(run_dir, rec, key)
    except UserError as exc:
        return str(exc)
    return None
