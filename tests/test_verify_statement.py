"""`clustercheck verify` against a seller who holds the signing key: the signed statement's predicate (the
result an in-toto policy engine reads) must be what the record says, and reports that are not in the run
directory are named as not compared, never listed as compared. One real signed run that fails (gloo
ranks, a busbw floor no loopback reaches)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import clustercheck_here, cpu_profile, small_check
from test_attestation import openssl_key

pytestmark = pytest.mark.pool


@pytest.fixture(scope="module")
def failed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("statement")
    (root / "s.yaml").write_text("checks:\n" + small_check("too-fast"))
    (root / "th").mkdir()
    (root / "th" / "cpu.yaml").write_text(cpu_profile(
        '  too-fast:\n    busbw: {limit: ">= 1000000", unit: GB/s, source: "impossible on purpose"}\n'))
    key, pub = openssl_key(root, "seller")
    proc = clustercheck_here("run", "s.yaml", "--thresholds", "th", "--out", "o", "--sign", str(key), cwd=root)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    return {"run": (root / "o" / "latest").resolve(), "key": key, "pub": pub}


def verify(run: Path, pub: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "clustercheck", "verify", str(run), "--key", str(pub)],
                          capture_output=True, text=True, timeout=120)


def test_a_statement_re_signed_to_say_passed_over_a_failed_record_is_not_verified(failed: dict[str, Path],
                                                                                  tmp_path: Path) -> None:
    """Every digest and the signature held, and verify printed `verified ... FAIL`, while the payload a
    policy engine reads said PASSED."""
    from clustercheck.record import attestation
    from clustercheck.record.keys import load_private
    from clustercheck.report import read
    from clustercheck.report.status import run_status

    genuine = verify(failed["run"], failed["pub"])
    assert genuine.returncode == 1 and "ok    statement: its predicate (result FAILED, verdict FAIL)" in genuine.stdout
    run = tmp_path / "run"
    shutil.copytree(failed["run"], run)
    rec = read(run / "run.jsonl")
    attestation.sign(run, rec, {**run_status(rec), "verdict": "PASS"}, load_private(failed["key"]))
    forged = verify(run, failed["pub"])
    assert forged.returncode == 1 and not forged.stdout.splitlines()[-1].startswith("verified")
    assert ("FAIL  attestation.json: its predicate differs from what run.jsonl says in clustercheck, result (it says "
            "result PASSED, run.jsonl FAILED)") in forged.stdout, forged.stdout


def test_reports_not_in_the_run_directory_are_named_not_listed_as_compared(failed: dict[str, Path],
                                                                          tmp_path: Path) -> None:
    from clustercheck.record import attestation
    from clustercheck.record.keys import load_private
    from clustercheck.report import read
    from clustercheck.report.status import run_status

    run = tmp_path / "run"
    shutil.copytree(failed["run"], run)
    (run / "junit.xml").unlink()
    (run / "results.json").unlink()
    rec = read(run / "run.jsonl")
    attestation.sign(run, rec, run_status(rec), load_private(failed["key"]))
    proc = verify(run, failed["pub"])
    assert proc.returncode == 1 and proc.stdout.splitlines()[-1].startswith("verified")  # the run failed: exit 1
    (ok,) = [line for line in proc.stdout.splitlines() if line.startswith("ok    reports: ")]
    assert "junit.xml" not in ok and "results.json" not in ok and "sla.json" in ok
    assert "reports not compared, not in the run directory: results.json, junit.xml" in proc.stdout, proc.stdout
