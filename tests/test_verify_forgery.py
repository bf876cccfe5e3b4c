"""`clustercheck verify` against a seller who holds the signing key and forges with clustercheck's own code:
each forgery here edits a real signed run, rewrites what the judge derives from the edit as the judge derives
it, renders the reports again and signs again with the right key (what `clustercheck sign` does), so every
digest and the signature hold. Each must still come out NOT VERIFIED, naming what was forged. One real
signed run of test_attestation's suite (gloo ranks: an all_reduce, a host copy, a GEMM, a burn, a probe)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any, Callable

import pytest

from helpers import clustercheck_here
from test_attestation import evidence_project, openssl_key

pytestmark = pytest.mark.pool


@pytest.fixture(scope="module")
def signed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = evidence_project(tmp_path_factory.mktemp("forgery"))
    key, pub = openssl_key(root, "seller")
    proc = clustercheck_here("run", "evidence.yaml", "--thresholds", "profiles", "--out", "o", "--sign", str(key), cwd=root)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return {"run": (root / "o" / "latest").resolve(), "key": key, "pub": pub, "root": root}


def copy(signed: dict[str, Path], tmp_path: Path) -> Path:
    run = tmp_path / "run"
    shutil.copytree(signed["run"], run)
    return run


def verify(run: Path, pub: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return clustercheck_here("verify", str(run), "--key", str(pub), *extra, cwd=run.parent)


def problems(proc: subprocess.CompletedProcess[str]) -> list[str]:
    return [line.removeprefix("FAIL  ") for line in proc.stdout.splitlines() if line.startswith("FAIL  ")]


def resign(run: Path, key: Path) -> None:
    """What `clustercheck sign RUN --key KEY` does: the reports rendered again from run.jsonl, then signed."""
    from clustercheck.evidence.signing import sign_run
    from clustercheck.record.keys import load_private
    from clustercheck.report import read

    sign_run(run, read(run / "run.jsonl"), load_private(key))


def lines_of(run: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run / "run.jsonl").read_text().splitlines()]


def write_lines(run: Path, entries: list[dict[str, Any]]) -> None:
    (run / "run.jsonl").write_text("".join(json.dumps(e, sort_keys=True) + "\n" for e in entries))


def rejudged(run: Path, check_id: str, forge: Callable[[list[dict[str, Any]]], None]) -> None:
    """The key holder's script: the item's answers as the judge received them, changed by `forge`, kept on
    its line as `answers`, and its metrics, rows, verdicts and outcome rewritten as the kind's judge makes
    them from the changed answers."""
    from clustercheck.evidence.rejudge import Rejudged, _inputs
    from clustercheck.kinds import KINDS
    from clustercheck.kinds.base import Answers
    from clustercheck.record import inputs
    from clustercheck.record.rebuild import answers, hosts
    from clustercheck.report import read
    from clustercheck.run.judge import fabric_of_header, rules_for

    rec = read(run / "run.jsonl")
    profile, suites = _inputs(run, rec.header, inputs.index(run), Rejudged())
    entries = lines_of(run)
    for e in entries:
        if e.get("type") != "result" or e.get("check") != check_id:
            continue
        check = next(c for c in suites[e["suite_file"]].checks if c.id == check_id)
        per_rank = answers(e, check, rec.header)
        forge(per_rank)
        rules = rules_for(check, profile, fabric_of_header(rec.header, profile))
        m, verdicts = KINDS[check.measure].judge(Answers(check, per_rank, hosts(e, rec.header, len(per_rank)),
                                                         "gloo"), rules)
        e["answers"] = per_rank
        e["metrics"] = {k: {"value": v, "unit": m.units.get(k)} for k, v in m.metrics.items()}
        e["rows"] = [{**old, **{k: v for k, v in new.items() if k in old}} for old, new in zip(e["rows"], m.rows)]
        e["verdicts"] = [dict(v.as_dict()) for v in verdicts]
        e["outcome"] = "passed" if all(v["passed"] for v in e["verdicts"]) else "failed"
    write_lines(run, entries)


def test_a_collective_s_byte_counts_supplied_by_the_record_are_not_read(signed: dict[str, Path],
                                                                         tmp_path: Path) -> None:
    """`answers` with every byte count x1e9 on an all_reduce line over its genuine rank times, its busbw
    re-judged from them and re-signed: verified PASS before, since the rebuild read the record's answers."""
    run = copy(signed, tmp_path)

    def billion_times(per_rank: list[dict[str, Any]]) -> None:
        for rank in per_rank:
            for row in rank["rows"]:
                row["bytes"] *= 10 ** 9

    rejudged(run, "allreduce", billion_times)
    resign(run, signed["key"])
    proc = verify(run, signed["pub"])
    assert proc.returncode == 6 and "NOT VERIFIED" in proc.stdout.splitlines()[-1], proc.stdout
    assert any("evidence::allreduce[" in p and "carries answers, but all_reduce items are re-judged from their rows"
               in p for p in problems(proc)), proc.stdout


def test_end_counts_edited_and_re_signed_are_not_verified(signed: dict[str, Path], tmp_path: Path) -> None:
    """The end line's counts went into the signed predicate unchecked: edited, re-signed, verified."""
    import base64

    run = copy(signed, tmp_path)
    entries = lines_of(run)
    end = entries[-1]
    assert end["type"] == "end"
    end["counts"] = {**end["counts"], "passed": end["counts"]["passed"] + 4}
    write_lines(run, entries)
    resign(run, signed["key"])
    envelope = json.loads((run / "attestation.json").read_text())
    said = json.loads(base64.b64decode(envelope["payload"]))["predicate"]["clustercheck"]["run"]["counts"]
    assert said == {"error": 0, "failed": 0, "passed": 5, "skipped": 0}  # from the results, not the end line
    proc = verify(run, signed["pub"])
    assert proc.returncode == 6 and "NOT VERIFIED" in proc.stdout.splitlines()[-1], proc.stdout
    assert f"run.jsonl:{len(entries)}: end counts 0 error, 0 failed, 9 passed, 0 skipped, but its results count " \
           f"0 error, 0 failed, 5 passed, 0 skipped: the run writes them from its results" in problems(proc), \
        proc.stdout


def test_a_passed_result_line_copied_and_re_signed_is_not_verified(signed: dict[str, Path], tmp_path: Path) -> None:
    """A duplicated passed line re-signed verified as PASS with 4 passed of 3 planned items."""
    run = copy(signed, tmp_path)
    entries = lines_of(run)
    at = next(i for i, e in enumerate(entries) if e.get("type") == "result" and e["check"] == "env")
    entries.insert(at + 1, dict(entries[at]))
    end = entries[-1]
    end["counts"] = {**end["counts"], "passed": end["counts"]["passed"] + 1}  # as the copy counts
    write_lines(run, entries)
    resign(run, signed["key"])
    proc = verify(run, signed["pub"])
    assert proc.returncode == 6 and "NOT VERIFIED" in proc.stdout.splitlines()[-1], proc.stdout
    assert any(p.startswith(f"run.jsonl:{at + 2}: evidence::env[") and "a second result for this item (the first "
               f"at run.jsonl:{at + 1})" in p for p in problems(proc)), proc.stdout


def sign_statement(run: Path, key: Path, change: Callable[[dict[str, Any]], None]) -> None:
    """attestation.json over the run's own statement changed by `change`, signed with the right key."""
    from securesystemslib.dsse import Envelope
    from securesystemslib.signer import CryptoSigner

    from clustercheck.record import attestation
    from clustercheck.record.keys import load_private
    from clustercheck.record.statement import PAYLOAD_TYPE

    stmt = attestation.read(run).statement
    change(stmt)
    private = load_private(key)
    envelope = Envelope(json.dumps(stmt, sort_keys=True).encode(), PAYLOAD_TYPE, {})
    envelope.sign(CryptoSigner(private.private, attestation._sslib_key(private.private.public_key(),
                                                                        private.fingerprint)))
    (run / "attestation.json").write_text(json.dumps(envelope.to_dict()))


def _digest_text(stmt: dict[str, Any]) -> None:
    stmt["subject"][0]["digest"] = stmt["subject"][0]["digest"]["sha256"]


def _another_type(stmt: dict[str, Any]) -> None:
    stmt["_type"] = "https://example.com/Statement/v0"


def _another_predicate_type(stmt: dict[str, Any]) -> None:
    stmt["predicateType"] = "https://slsa.dev/provenance/v1"


def _upper_hex(stmt: dict[str, Any]) -> None:
    stmt["subject"][0]["digest"]["sha256"] = stmt["subject"][0]["digest"]["sha256"].upper()


@pytest.mark.parametrize("change, said", [
    (_digest_text, "subject[0] (ctrf.json).digest: not {sha256: HEX}"),
    (_another_type, "_type 'https://example.com/Statement/v0', expected 'https://in-toto.io/Statement/v1'"),
    (_another_predicate_type, "predicateType 'https://slsa.dev/provenance/v1', expected "
                              "'https://in-toto.io/attestation/test-result/v0.1'"),
    (_upper_hex, "subject[0] (ctrf.json).digest.sha256: not 64 lowercase hex digits"),
], ids=["digest-text", "type", "predicate-type", "upper-hex"])
def test_a_statement_of_another_shape_signed_by_the_right_key_is_one_line_not_verified(
        signed: dict[str, Path], tmp_path: Path, change: Callable[[dict[str, Any]], None], said: str) -> None:
    """A subject whose digest was text crashed verify (a traceback, exit 3); a statement of another _type or
    predicateType verified PASS."""
    run = copy(signed, tmp_path)
    sign_statement(run, signed["key"], change)
    proc = verify(run, signed["pub"])
    assert "Traceback" not in proc.stdout + proc.stderr and proc.returncode == 6, \
        proc.stdout + proc.stderr
    assert f"attestation.json: the payload is not the in-toto Statement clustercheck signs: {said}" in problems(proc)


def _as_nobody(run: Path, pub: Path) -> subprocess.CompletedProcess[str]:
    """verify run by uid 65534 (root reads every file whatever its mode, so only another uid can meet one
    it cannot read); clustercheck imported from where this process imports it."""
    import os
    import sys

    import clustercheck

    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("needs root and setpriv to run verify as another uid (root is never refused a read)")
    return subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-m",
                           "clustercheck", "verify", str(run), "--key", str(pub)], capture_output=True, text=True,
                          timeout=120, cwd="/", env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1",
                                                     "PYTHONPATH": str(Path(clustercheck.__file__).parent.parent)})


@pytest.fixture
def open_copy(signed: dict[str, Path]) -> Any:
    """A copy of the signed run, and its public key, where uid 65534 can reach them (pytest's own tmp
    directories are root's only)."""
    import tempfile

    where = Path(tempfile.mkdtemp(prefix="cc-unreadable-"))
    where.chmod(0o755)
    shutil.copytree(signed["run"], where / "run")
    shutil.copy(signed["pub"], where / "seller.pub")
    for path in [where, *where.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    yield where / "run", where / "seller.pub"
    for path in [where, *where.rglob("*")]:
        if path.is_dir():
            path.chmod(0o755)
    shutil.rmtree(where)


def test_a_file_verify_cannot_read_is_a_problem_not_a_traceback(open_copy: tuple[Path, Path]) -> None:
    run, pub = open_copy
    assert _as_nobody(run, pub).returncode == 0  # the copy as it is verifies for that uid
    log = next(p for p in sorted((run / "logs").iterdir()) if p.is_file())
    log.chmod(0)
    proc = _as_nobody(run, pub)
    assert "Traceback" not in proc.stdout + proc.stderr and proc.returncode == 6, \
        proc.stdout + proc.stderr
    assert f"FAIL  logs/{log.name}: cannot be read (Permission denied)" in proc.stdout.splitlines(), proc.stdout


def test_a_directory_verify_cannot_read_is_a_problem_never_skipped(open_copy: tuple[Path, Path]) -> None:
    """A file added after signing inside a directory made unreadable went unseen: Path.rglob skips what it
    cannot list, and verify said PASS."""
    run, pub = open_copy
    (run / "extra").mkdir()
    (run / "extra" / "added-after-signing.log").write_text("unsigned\n")
    (run / "extra").chmod(0)
    proc = _as_nobody(run, pub)
    assert "Traceback" not in proc.stdout + proc.stderr and proc.returncode == 6, \
        proc.stdout + proc.stderr
    assert "FAIL  extra: cannot be read (Permission denied)" in proc.stdout.splitlines(), proc.stdout
    (run / "extra").chmod(0o755)
    (run / "logs").chmod(0)  # a signed directory: its files named as unread, never called missing
    proc = _as_nobody(run, pub)
    assert "FAIL  logs: cannot be read (Permission denied)" in proc.stdout.splitlines(), proc.stdout
    assert not [line for line in proc.stdout.splitlines() if "missing from the run directory" in line], proc.stdout


def test_the_verified_line_names_the_run_it_proves(signed: dict[str, Path]) -> None:
    """`verified: DIR; run verdict PASS` said a run was proven, not which: its id, start and nodes now."""
    header = lines_of(signed["run"])[0]
    proc = verify(signed["run"], signed["pub"])
    assert proc.returncode == 0, proc.stdout
    assert proc.stdout.splitlines()[-1].endswith(
        f" (run {header['run_id']}, started {header['started']}, on {', '.join(header['nodes'])}); run verdict PASS")


def test_run_jsonl_is_read_once_and_the_bytes_hashed_are_the_bytes_judged(signed: dict[str, Path],
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """run.jsonl was hashed, then read again to be judged and a third time for the verdict: a record swapped
    between the reads (a file system the seller controls) was judged unhashed."""
    record = signed["run"] / "run.jsonl"
    opened: list[str] = []
    real = Path.open

    def counting(self: Path, *args: Any, **kwargs: Any) -> Any:
        if self == record:
            opened.append(str(args[0] if args else kwargs.get("mode", "r")))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Path, "open", counting)
    proc = verify(signed["run"], signed["pub"])
    assert proc.returncode == 0, proc.stdout
    assert opened == ["rb"], opened


def test_a_probe_line_whose_answers_are_a_string_is_one_line_not_verified(signed: dict[str, Path],
                                                                          tmp_path: Path) -> None:
    """A probe's `answers` written as a string: its judge's next() over the ranks' answers found none and
    the StopIteration escaped re-judging, a traceback and exit 3 (an internal error) instead of 6."""
    run = copy(signed, tmp_path)
    entries = lines_of(run)
    line = next(i for i, e in enumerate(entries) if e.get("type") == "result" and e.get("measure") == "probe")
    entries[line]["answers"] = "x"
    write_lines(run, entries)
    proc = verify(run, signed["pub"])
    assert proc.returncode == 6 and "NOT VERIFIED" in proc.stdout.splitlines()[-1], proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr, proc.stderr
    # (d0653ef: the probe kind says so itself, where StopIteration escaped its judge before)
    assert any(p.startswith(f"run.jsonl:{line + 1}: ") and "no rank answered the probe's outcome: not judged" in p
               for p in problems(proc)), proc.stdout


def test_a_header_whose_gpus_are_a_string_is_one_line_not_verified(signed: dict[str, Path], tmp_path: Path) -> None:
    """`facts.gpus` written as a string: building the predicate to compare the signed one with raised
    AttributeError out of verify, a traceback and exit 3 (an internal error) instead of 6."""
    run = copy(signed, tmp_path)
    entries = lines_of(run)
    entries[0]["facts"]["gpus"] = "x"
    write_lines(run, entries)
    proc = verify(run, signed["pub"])
    assert proc.returncode == 6 and "NOT VERIFIED" in proc.stdout.splitlines()[-1], proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr, proc.stderr
    assert any(p.startswith("run.jsonl:1: its header makes no statement to compare attestation.json's with")
               for p in problems(proc)), proc.stdout


@pytest.mark.parametrize("case", ["unsigned, sla.json", "another version, results.json"])
def test_a_report_nested_too_deep_to_read_is_one_line_never_a_traceback(signed: dict[str, Path], tmp_path: Path,
                                                                        case: str) -> None:
    """A report of 100,000 nested arrays: json raised RecursionError, which neither the unsigned run's signer
    look-up (sla.json) nor another version's verdict comparison (results.json) caught: a traceback, exit 3."""
    run = copy(signed, tmp_path)
    if case.startswith("unsigned"):
        (run / "attestation.json").unlink()
    else:
        entries = lines_of(run)
        entries[0]["facts"]["versions"]["clustercheck"] = "0.0.1"
        write_lines(run, entries)
    name = case.split(", ")[1]
    (run / name).write_text("[" * 100_000 + "]" * 100_000)
    proc = verify(run, signed["pub"])
    assert proc.returncode == 6 and "NOT VERIFIED" in proc.stdout.splitlines()[-1], proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr, proc.stderr
    assert any(p.startswith(f"{name}: ") for p in problems(proc)), proc.stdout
