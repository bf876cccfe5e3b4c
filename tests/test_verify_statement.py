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
    assert forged.returncode == 6 and not forged.stdout.splitlines()[-1].startswith("verified")
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


def _claim_another_version(run: Path, drop_format: bool = False) -> None:
    import json

    lines = (run / "run.jsonl").read_text().splitlines()
    header = json.loads(lines[0])
    if drop_format:
        header.pop("report_format", None)
    else:
        header["facts"]["versions"]["clustercheck"] = "0.0.1"
    (run / "run.jsonl").write_text("\n".join([json.dumps(header, sort_keys=True), *lines[1:]]) + "\n")


def test_a_pass_statement_over_a_failed_record_is_not_verified_whatever_version_it_claims(
        failed: dict[str, Path], tmp_path: Path) -> None:
    """Claiming another clustercheck version (or no report format) turned the predicate comparison into a
    note: `verified ...; run verdict FAIL` while the signed payload said PASSED."""
    from clustercheck.record import attestation
    from clustercheck.record.keys import load_private
    from clustercheck.report import read
    from clustercheck.report.status import run_status

    for drop_format in (False, True):
        run = tmp_path / f"run{int(drop_format)}"
        shutil.copytree(failed["run"], run)
        _claim_another_version(run, drop_format)
        rec = read(run / "run.jsonl")
        attestation.sign(run, rec, {**run_status(rec), "verdict": "PASS"}, load_private(failed["key"]))
        proc = verify(run, failed["pub"])
        assert proc.returncode == 6 and proc.stdout.splitlines()[-1].startswith("NOT VERIFIED"), proc.stdout
        assert any(line.startswith("FAIL  attestation.json: its predicate differs from what run.jsonl says")
                   and "clustercheck.run.verdict" in line and "whatever version signed it" in line
                   for line in proc.stdout.splitlines()), proc.stdout


def test_reports_saying_pass_over_a_failed_record_are_not_verified_whatever_version_rendered_them(
        failed: dict[str, Path], tmp_path: Path) -> None:
    """results.json and sla.json edited to PASS, the record claiming another version: the byte comparison
    was a note and verify said `verified`."""
    import json

    from clustercheck.record import attestation
    from clustercheck.record.keys import load_private
    from clustercheck.report import read
    from clustercheck.report.status import run_status

    run = tmp_path / "run"
    shutil.copytree(failed["run"], run)
    _claim_another_version(run)
    results = json.loads((run / "results.json").read_text())
    results["verdict"] = "PASS"
    results["counts"] = {**results["counts"], "failed": 0, "passed": results["counts"]["failed"]}
    (run / "results.json").write_text(json.dumps(results))
    sla = json.loads((run / "sla.json").read_text())
    sla["verdict"] = "PASS"
    for check in sla["checks"]:
        check["outcome"] = "passed"
    (run / "sla.json").write_text(json.dumps(sla))
    rec = read(run / "run.jsonl")
    attestation.sign(run, rec, run_status(rec), load_private(failed["key"]))
    proc = verify(run, failed["pub"])
    assert proc.returncode == 6 and proc.stdout.splitlines()[-1].startswith("NOT VERIFIED"), proc.stdout
    fails = [line for line in proc.stdout.splitlines() if line.startswith("FAIL  ")]
    assert "FAIL  results.json: says verdict PASS, the record proves FAIL; counts 0 error, 0 failed, 1 passed, " \
           "0 skipped, the record's results 0 error, 1 failed, 0 passed, 0 skipped: not what run.jsonl proves" in fails
    assert any(line.startswith("FAIL  sla.json: says verdict PASS, the record proves FAIL") for line in fails), fails
    assert "note  reports not compared with run.jsonl: rendered by clustercheck 0.0.1" in proc.stdout


def test_not_verified_exits_6_and_a_verified_fail_1(failed: dict[str, Path], tmp_path: Path) -> None:
    """verify exited 1 both for NOT VERIFIED and for a verified FAIL: a buyer's script could not tell
    forged evidence from a genuine hardware FAIL."""
    from clustercheck.exitcodes import MEANING, Exit

    assert verify(failed["run"], failed["pub"]).returncode == Exit.FAILED == 1  # genuine evidence of a FAIL
    run = tmp_path / "run"
    shutil.copytree(failed["run"], run)
    (run / "added.txt").write_text("after signing\n")
    proc = verify(run, failed["pub"])
    assert proc.returncode == Exit.NOT_VERIFIED == 6 and proc.stdout.splitlines()[-1].startswith("NOT VERIFIED")
    assert MEANING[Exit.NOT_VERIFIED].startswith("verify: not verified: the evidence does not prove what it says")
    helped = subprocess.run([sys.executable, "-m", "clustercheck", "verify", "--help"], capture_output=True,
                            text=True, timeout=60).stdout
    assert "Exit 6: not verified" in " ".join(helped.split()), helped


def test_a_run_that_selected_its_items_is_not_verified_as_the_whole_suite(tmp_path: Path) -> None:
    """`-k` dropped the failing check: verify said `verified ...; run verdict PASS` and exited 0, with only a
    note naming the selection."""
    from helpers import CPU_THRESHOLDS

    (tmp_path / "s.yaml").write_text("checks:\n" + small_check("ok") + small_check("too-fast"))
    (tmp_path / "th").mkdir()
    (tmp_path / "th" / "cpu.yaml").write_text(CPU_THRESHOLDS)
    key, pub = openssl_key(tmp_path, "seller")
    proc = clustercheck_here("run", "s.yaml", "--thresholds", "th", "--out", "o", "--sign", str(key), "-k", "ok",
                    cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    run = (tmp_path / "o" / "latest").resolve()
    whole = clustercheck_here("verify", str(run), "--key", str(pub), cwd=tmp_path)
    assert whole.returncode == 6, whole.stdout
    assert whole.stdout.splitlines()[-1].startswith("NOT VERIFIED as the whole suite: -k ok ran 1 of 2 checks"), \
        whole.stdout
    allowed = clustercheck_here("verify", str(run), "--key", str(pub), "--allow-selection", cwd=tmp_path)
    assert allowed.returncode == 0, allowed.stdout
    assert allowed.stdout.splitlines()[-1].endswith("; run verdict PASS; items selected by -k ok: 1 of 2 checks")


def test_a_run_narrowed_by_pytest_addopts_is_not_verified_as_the_whole_suite(tmp_path: Path) -> None:
    """PYTEST_ADDOPTS=-k leaves argv clean: verify read the selection from argv alone, and said `verified ...;
    run verdict PASS` (exit 0) of a run that measured 1 of its 2 checks; the plan records the selection."""
    from helpers import CPU_THRESHOLDS

    (tmp_path / "s.yaml").write_text("checks:\n" + small_check("ok") + small_check("too-fast"))
    (tmp_path / "th").mkdir()
    (tmp_path / "th" / "cpu.yaml").write_text(CPU_THRESHOLDS)
    key, pub = openssl_key(tmp_path, "seller")
    proc = clustercheck_here("run", "s.yaml", "--thresholds", "th", "--out", "o", "--sign", str(key), cwd=tmp_path,
                             env={"PYTEST_ADDOPTS": "-k ok"})
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    run = (tmp_path / "o" / "latest").resolve()
    whole = clustercheck_here("verify", str(run), "--key", str(pub), cwd=tmp_path)
    assert whole.returncode == 6, whole.stdout
    assert whole.stdout.splitlines()[-1].startswith("NOT VERIFIED as the whole suite: a selection recorded in the "
                                                    "plan (1 of 2 items) ran 1 of 2 checks"), whole.stdout
    allowed = clustercheck_here("verify", str(run), "--key", str(pub), "--allow-selection", cwd=tmp_path)
    assert allowed.returncode == 0, allowed.stdout
    assert allowed.stdout.splitlines()[-1].endswith("; run verdict PASS; items selected by a selection recorded in "
                                                    "the plan (1 of 2 items): 1 of 2 checks"), allowed.stdout
