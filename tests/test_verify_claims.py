"""`clustercheck verify` against a key holder who claims another clustercheck version in the record's header
(facts.versions.clustercheck), a claim that is the signer's own: it may excuse a report laid out otherwise,
never a statement or a report that says something else about the run. One real signed run (gloo ranks)
with an item that passes and one that fails (a busbw floor no loopback reaches)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, Callable

import pytest

from helpers import clustercheck_here, cpu_profile, small_check
from test_attestation import openssl_key

pytestmark = pytest.mark.pool

OTHER = "0.1.0+other"


@pytest.fixture(scope="module")
def signed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("claims")
    (root / "s.yaml").write_text("checks:\n" + small_check("fine") + small_check("too-fast"))
    (root / "th").mkdir()
    (root / "th" / "cpu.yaml").write_text(cpu_profile(
        '  fine:\n    busbw: {limit: ">= 0.000001", unit: GB/s, source: "any loopback"}\n'
        '  too-fast:\n    busbw: {limit: ">= 1000000", unit: GB/s, source: "impossible on purpose"}\n'))
    key, pub = openssl_key(root, "seller")
    proc = clustercheck_here("run", "s.yaml", "--thresholds", "th", "--out", "o", "--sign", str(key), cwd=root)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    return {"run": (root / "o" / "latest").resolve(), "key": key, "pub": pub}


def verify(run: Path, pub: Path) -> tuple[int, list[str], list[str]]:
    """verify's exit code, its FAIL lines and its note lines."""
    proc = clustercheck_here("verify", str(run), "--key", str(pub), cwd=run.parent)
    lines = proc.stdout.splitlines()
    return (proc.returncode, [line.removeprefix("FAIL  ") for line in lines if line.startswith("FAIL  ")],
            [line.removeprefix("note  ") for line in lines if line.startswith("note  ")])


def claiming_another_version(signed: dict[str, Path], tmp_path: Path) -> Path:
    """A copy of the run whose header claims another clustercheck version, its reports rendered again and
    signed again with the right key (what `clustercheck sign` does): every digest and the signature hold."""
    from clustercheck.evidence.signing import sign_run
    from clustercheck.record.keys import load_private
    from clustercheck.report import read

    run = tmp_path / "run"
    shutil.copytree(signed["run"], run)
    lines = (run / "run.jsonl").read_text().splitlines()
    header = json.loads(lines[0])
    header["facts"]["versions"]["clustercheck"] = OTHER
    (run / "run.jsonl").write_text("\n".join([json.dumps(header, sort_keys=True), *lines[1:]]) + "\n")
    sign_run(run, read(run / "run.jsonl"), load_private(signed["key"]))
    return run


def sign_statement(run: Path, key: Path, change: Callable[[dict[str, Any]], None]) -> None:
    """attestation.json over the run's own statement changed by `change`, its subjects hashed again (a
    report edited before), signed with the right key."""
    from securesystemslib.dsse import Envelope
    from securesystemslib.signer import CryptoSigner

    from clustercheck.record import attestation
    from clustercheck.record.keys import load_private
    from clustercheck.record.statement import PAYLOAD_TYPE, subjects

    stmt = attestation.read(run).statement
    change(stmt)
    stmt["subject"] = subjects(run)
    private = load_private(key)
    envelope = Envelope(json.dumps(stmt, sort_keys=True).encode(), PAYLOAD_TYPE, {})
    envelope.sign(CryptoSigner(private.private, attestation._sslib_key(private.private.public_key(),
                                                                        private.fingerprint)))
    (run / "attestation.json").write_text(json.dumps(envelope.to_dict()))


def _another_profile_platform_and_gpu(stmt: dict[str, Any]) -> None:
    pred = stmt["predicate"]
    for ref in pred["configuration"]:
        if ref["annotations"]["role"] == "thresholds":
            ref["digest"]["sha256"] = "0" * 64
            ref["name"] = "contract/h100-sla.yaml"
    pred["clustercheck"]["platform"] = "h100"
    pred["clustercheck"]["nodes"][0]["gpus"] = [{"uuid": "GPU-FAKE", "serial": "1234"}]


def test_a_statement_naming_another_profile_platform_and_gpu_is_not_verified_whatever_version_it_claims(
        signed: dict[str, Path], tmp_path: Path) -> None:
    """Claiming another version compared only the statement's result, tests, verdict and counts: one naming
    another profile's sha256, platform h100 and a GPU no node has verified (exit 1, a note)."""
    run = claiming_another_version(signed, tmp_path)
    assert verify(run, signed["pub"])[:2] == (1, [])  # the genuine run claiming another version: a verified FAIL
    sign_statement(run, signed["key"], _another_profile_platform_and_gpu)
    code, fails, _ = verify(run, signed["pub"])
    assert code == 6, fails
    (line,) = [f for f in fails if f.startswith("attestation.json: its predicate differs from what run.jsonl says")]
    assert "its configuration, clustercheck.platform, clustercheck.nodes are not what run.jsonl proves, whatever " \
           "version signed it" in line, line


def test_only_how_another_version_words_its_checks_is_left_to_a_note(signed: dict[str, Path], tmp_path: Path) -> None:
    def reworded(stmt: dict[str, Any]) -> None:
        stmt["predicate"]["clustercheck"]["verify"] = ["the signature", "every digest"]

    run = claiming_another_version(signed, tmp_path)
    sign_statement(run, signed["key"], reworded)
    code, fails, notes = verify(run, signed["pub"])
    assert (code, fails) == (1, []), fails
    assert any(n.startswith("statement not compared with run.jsonl in clustercheck.verify: rendered by clustercheck "
                            f"{OTHER}") for n in notes), notes


def _ctrf_says_passed(run: Path) -> None:
    doc = json.loads((run / "ctrf.json").read_text())
    for test in doc["results"]["tests"]:
        if test["status"] == "failed":
            test["status"] = "passed"
    summary = doc["results"]["summary"]
    summary["passed"], summary["failed"] = summary["passed"] + summary["failed"], 0
    doc["results"]["environment"]["healthy"] = True
    doc["extra"]["clustercheck.run"]["verdict"] = "PASS"
    (run / "ctrf.json").write_text(json.dumps(doc))


def _junit_says_passed(run: Path) -> None:
    import re

    text = (run / "junit.xml").read_text()
    text = re.sub(r"<failure\b.*?</failure>|<failure\b[^>]*/>", "", text, flags=re.S)
    (run / "junit.xml").write_text(re.sub(r'failures="\d+"', 'failures="0"', text))


def _html_says_pass(run: Path) -> None:
    text = (run / "report.html").read_text()
    assert '<p id="verdict" class="banner fail">FAIL' in text
    (run / "report.html").write_text(text.replace('<p id="verdict" class="banner fail">FAIL',
                                                  '<p id="verdict" class="banner pass">PASS'))


def _junit_with_entities(run: Path) -> None:
    text = (run / "junit.xml").read_text()
    head, rest = text.split("\n", 1)
    (run / "junit.xml").write_text(f'{head}\n<!DOCTYPE t [<!ENTITY a "aaaaaaaaaa">]>\n{rest}')


@pytest.mark.parametrize("edit, said", [
    (_ctrf_says_passed, "ctrf.json: says summary.failed 0 (run.jsonl proves 1); verdict PASS (run.jsonl proves "
                        "FAIL); healthy true (run.jsonl proves false); test s::too-fast[vm] passed (run.jsonl proves "
                        "failed): not what run.jsonl proves"),
    (_junit_says_passed, "junit.xml: says failures 0 (run.jsonl proves 1); testsuite s::too-fast[vm] failures 0 "
                         "(run.jsonl proves 1); testcase s::too-fast[vm]/too-fast[vm] passed (run.jsonl proves "
                         "failure): not what run.jsonl proves"),
    (_html_says_pass, "report.html: says verdict banner PASS (run.jsonl proves FAIL): not what run.jsonl proves"),
    (_junit_with_entities, "junit.xml: holds a DTD, which clustercheck never writes: it states no outcome run.jsonl "
                           "could prove"),
], ids=["ctrf", "junit", "html", "junit-dtd"])
def test_a_report_saying_a_failed_item_passed_is_not_verified_whatever_version_it_claims(
        signed: dict[str, Path], tmp_path: Path, edit: Callable[[Path], None], said: str) -> None:
    """Claiming another version left junit.xml, ctrf.json and report.html unread (only results.json's and
    sla.json's verdict and counts were): a CTRF, a JUnit or a page saying the failed item passed verified as
    a FAIL with a note, `reports not compared`."""
    run = claiming_another_version(signed, tmp_path)
    edit(run)
    sign_statement(run, signed["key"], lambda stmt: None)
    code, fails, _ = verify(run, signed["pub"])
    assert code == 6, fails
    assert said in fails, fails


def _laid_out_otherwise(run: Path) -> None:
    """What another report format may render from the same record: a testcase and a CTRF test more (a
    passed one, a skipped one), so other totals of tests, passed and skipped; a failure said more than once."""
    import re

    text = (run / "junit.xml").read_text()
    text = re.sub(r'tests="(\d+)"', lambda m: f'tests="{int(m[1]) + 1}"', text, count=1)
    text = text.replace("</testsuites>", '<testsuite name="run" tests="1" failures="0" errors="0" skipped="1">'
                        '<testcase classname="run" name="selection"><skipped message="all"/></testcase>'
                        "</testsuite></testsuites>")
    (run / "junit.xml").write_text(text)
    doc = json.loads((run / "ctrf.json").read_text())
    doc["results"]["tests"].append({"name": "layout", "status": "passed", "duration": 0})
    doc["results"]["summary"]["tests"] += 1
    doc["results"]["summary"]["passed"] += 1
    (run / "ctrf.json").write_text(json.dumps(doc))


def test_a_report_another_version_laid_out_otherwise_is_verified_if_it_says_no_better(
        signed: dict[str, Path], tmp_path: Path) -> None:
    """Report formats add testcases (not-run repetitions, `compare`, `selection`): a genuine record of
    another version must not read as edited for that; only saying better than the record proves does."""
    run = claiming_another_version(signed, tmp_path)
    assert "</testsuites>" in (run / "junit.xml").read_text()
    _laid_out_otherwise(run)
    sign_statement(run, signed["key"], lambda stmt: None)
    code, fails, _ = verify(run, signed["pub"])
    assert (code, fails) == (1, []), fails
