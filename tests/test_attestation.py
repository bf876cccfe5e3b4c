"""Signed evidence a buyer can verify (docs/evidence.md): a real CPU run signed with a key openssl makes here,
`clustercheck verify` passing it, and failing, with its reason, every tampered copy: a rank time halved, a
verdict changed in results.json, the attestation deleted, a file added, the wrong key, an unsigned run, and a
record whose busbw was multiplied by 10 with the rank times left alone, re-rendered and re-signed with the
right key."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Callable

import pytest

from helpers import clustercheck_here, cpu_profile

from clustercheck import __version__
from clustercheck.record.schema import REPORT_FORMAT

ROOT = Path(__file__).resolve().parent.parent
KEYS = ("run.jsonl", "results.json", "junit.xml", "sla.json", "report.html", "ctrf.json", "exclude.txt")

# A tiny suite that reaches every way a result is re-judged: a collective (rank times in its rows), a per-rank
# copy and a GEMM (samples in their rows), a burn (its rows) and a probe (its answers kept in the record).
SUITE = """\
suite: evidence
checks:
  - id: allreduce
    measure: all_reduce
    params: {sizes: [1KiB, 64KiB], iters: 4, warmup: 1}
  - id: hostmem
    measure: host_memory
    params: {size: 1MiB, loops: 2, samples: 2}
  - id: gemm
    measure: gemm
    params: {m: 64, loops: 2, samples: 2}
  - id: burn
    measure: burn
    params: {duration: 0.3, m: 64, interval: 0}
  - id: env
    measure: probe
    params: {probe: env}
"""
PROFILE = cpu_profile("""\
  allreduce:
    busbw: {limit: ">= 0.000001", unit: GB/s, source: "any working loopback"}
  hostmem:
    bandwidth: {limit: ">= 0.000001", unit: GB/s, source: "any copy"}
  gemm:
    tflops: {limit: ">= 0.0000001", unit: TFLOP/s, source: "any matmul"}
  burn:
    tflops: {limit: ">= 0.0000001", unit: TFLOP/s, source: "any matmul"}
    relative: {limit: ">= 0.01", unit: ratio, source: "two ranks share two vCPUs"}
""", "evidence test profile")


def cc(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "clustercheck", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=300, env={**os.environ, **(env or {})})


def openssl_key(directory: Path, name: str) -> tuple[Path, Path]:
    """An Ed25519 key pair as openssl makes it: private PEM (mode 600) and its public PEM."""
    key, pub = directory / f"{name}.pem", directory / f"{name}.pub"
    subprocess.run(["openssl", "genpkey", "-algorithm", "ed25519", "-out", str(key)], check=True, capture_output=True)
    key.chmod(0o600)
    subprocess.run(["openssl", "pkey", "-in", str(key), "-pubout", "-out", str(pub)], check=True, capture_output=True)
    return key, pub


def evidence_project(root: Path) -> Path:
    """`root` with the evidence suite and its profile (evidence.yaml, profiles/cpu.yaml)."""
    (root / "evidence.yaml").write_text(SUITE)
    (root / "profiles").mkdir()
    (root / "profiles" / "cpu.yaml").write_text(PROFILE)
    return root


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Two real runs of the suite (gloo ranks): one signed with --sign, one not; and the keys."""
    root = evidence_project(tmp_path_factory.mktemp("evidence"))
    (root / "keys").mkdir()
    key, pub = openssl_key(root / "keys", "seller")
    _, other = openssl_key(root / "keys", "someone-else")
    found = {"root": root, "key": key, "pub": pub, "other": other}
    for name, extra in (("signed", ["--sign", str(key)]), ("unsigned", [])):
        proc = clustercheck_here("run", "evidence.yaml", "--thresholds", "profiles", "--out", name, *extra, cwd=root)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        found[name] = (root / name / "latest").resolve()
    return found


def copy_of(work: dict[str, Path], which: str, tmp_path: Path) -> Path:
    target = tmp_path / which
    shutil.copytree(work[which], target)
    return target


def verify(run: Path, *keys: Path) -> subprocess.CompletedProcess[str]:
    args = [a for k in keys for a in ("--key", str(k))]
    return cc("verify", str(run), *args, cwd=run.parent)


def fail_lines(proc: subprocess.CompletedProcess[str]) -> list[str]:
    return [line.removeprefix("FAIL  ") for line in proc.stdout.splitlines() if line.startswith("FAIL  ")]


def results_line(run: Path, item: str) -> int:
    for number, line in enumerate((run / "run.jsonl").read_text().splitlines(), 1):
        entry = json.loads(line)
        if entry.get("type") == "result" and entry["name"] == item:
            return number
    raise AssertionError(item)


def edit_record(run: Path, change: Callable[[dict], None]) -> None:
    lines = []
    for line in (run / "run.jsonl").read_text().splitlines():
        entry = json.loads(line)
        if entry.get("type") == "result":
            change(entry)
        lines.append(json.dumps(entry, sort_keys=True))
    (run / "run.jsonl").write_text("\n".join(lines) + "\n")


@pytest.mark.pool
def test_a_genuine_signed_run_verifies(work: dict[str, Path]) -> None:
    run = work["signed"]
    proc = verify(run, work["pub"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[-1].startswith("verified: ")
    assert "ok    metrics: " in proc.stdout and "ok    verdicts: " in proc.stdout
    envelope = json.loads((run / "attestation.json").read_text())
    assert envelope["payloadType"] == "application/vnd.in-toto+json"
    statement = json.loads(base64.b64decode(envelope["payload"]))
    assert statement["_type"] == "https://in-toto.io/Statement/v1"
    assert statement["predicateType"] == "https://in-toto.io/attestation/test-result/v0.1"
    names = {s["name"] for s in statement["subject"]}
    assert set(KEYS) <= names
    assert {"inputs/suites/evidence.yaml", "inputs/thresholds/cpu.yaml"} <= names  # the inputs exactly as run
    assert any(n.startswith("logs/pool") and n.endswith(".log") for n in names)  # the rank logs
    assert (run / "inputs/suites/evidence.yaml").read_text() == SUITE
    predicate = statement["predicate"]
    assert predicate["result"] == "PASSED" and not predicate["failedTests"]
    assert "evidence::allreduce[" in " ".join(predicate["passedTests"])
    assert {c["annotations"]["role"] for c in predicate["configuration"]} == {"thresholds", "suite"}
    block = predicate["clustercheck"]
    (node,) = block["nodes"]
    assert node["hostname"] and node["kernel"] and "versions" in node and "unreadable" in node
    assert block["versions"]["clustercheck"] and block["versions"]["torch"]
    # the signer is named in the reports, the key itself nowhere
    fingerprint = envelope["signatures"][0]["keyid"]
    assert fingerprint.startswith("SHA256:")
    sla = json.loads((run / "sla.json").read_text())
    assert sla["signature"]["signed_by"] == fingerprint and len(sla["signature"]["verify_checks"]) == 5
    assert fingerprint in (run / "report.html").read_text()
    secret = work["key"].read_text().splitlines()[1]
    for path in run.rglob("*"):
        if path.is_file():
            text = path.read_text(errors="replace")
            assert str(work["key"]) not in text and "seller.pem" not in text and secret not in text, path


@pytest.mark.pool
def test_a_shipped_suite_named_by_name_is_signed_and_verifies(work: dict[str, Path], tmp_path: Path) -> None:
    """`clustercheck run cpu-smoke --sign KEY` in an empty directory: the record names the suite as the run
    shows it (suites/cpu-smoke.yaml), and the bytes kept are the shipped file's, read where it is installed."""
    proc = clustercheck_here("run", "cpu-smoke", "--sign", str(work["key"]), "--out", "o", cwd=tmp_path)
    assert proc.returncode == 0 and "not signed" not in proc.stderr, proc.stdout[-3000:] + proc.stderr[-3000:]
    run = (tmp_path / "o" / "latest").resolve()
    header = json.loads((run / "run.jsonl").read_text().splitlines()[0])
    assert [s["file"] for s in header["suites"]] == ["suites/cpu-smoke.yaml"]
    assert (run / "inputs/suites/cpu-smoke.yaml").read_bytes() == (ROOT / "suites/cpu-smoke.yaml").read_bytes()
    proc = verify(run, work["pub"])
    assert proc.returncode == 0 and proc.stdout.splitlines()[-1].startswith("verified: "), proc.stdout + proc.stderr


@pytest.mark.pool
def test_a_rank_time_halved_in_the_record_fails(work: dict[str, Path], tmp_path: Path) -> None:
    run = copy_of(work, "signed", tmp_path)
    text = (run / "run.jsonl").read_text()
    lines = text.splitlines()
    number = next(i for i, line in enumerate(lines) if '"rank_time_us"' in line)
    entry = json.loads(lines[number])
    entry["rows"][-1]["rank_time_us"][0] /= 2  # one rank's time at the judged size
    lines[number] = json.dumps(entry, sort_keys=True)
    (run / "run.jsonl").write_text("\n".join(lines) + "\n")
    proc = verify(run, work["pub"])
    assert proc.returncode == 6, proc.stdout
    reasons = fail_lines(proc)
    assert "run.jsonl: sha256 differs from attestation.json's: changed after signing" in reasons
    assert any(r.startswith(f"run.jsonl:{number + 1}: evidence::allreduce[") and "busbw" in r for r in reasons), reasons
    assert proc.stdout.splitlines()[-1].startswith("NOT VERIFIED: ")


@pytest.mark.pool
def test_a_verdict_changed_in_results_json_fails(work: dict[str, Path], tmp_path: Path) -> None:
    run = copy_of(work, "signed", tmp_path)
    doc = json.loads((run / "results.json").read_text())
    doc["results"][0]["verdicts"][0]["passed"] = False
    (run / "results.json").write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    proc = verify(run, work["pub"])
    assert proc.returncode == 6
    reasons = fail_lines(proc)
    assert "results.json: sha256 differs from attestation.json's: changed after signing" in reasons
    assert "results.json: differs from what run.jsonl renders to: edited after it was rendered" in reasons


@pytest.mark.pool
def test_the_attestation_deleted_fails(work: dict[str, Path], tmp_path: Path) -> None:
    run = copy_of(work, "signed", tmp_path)
    (run / "attestation.json").unlink()
    proc = verify(run, work["pub"])
    assert proc.returncode == 6
    assert fail_lines(proc) == ["attestation.json: missing: the run is not signed (clustercheck sign RUN --key KEY)"]


@pytest.mark.pool
def test_an_extra_file_fails(work: dict[str, Path], tmp_path: Path) -> None:
    run = copy_of(work, "signed", tmp_path)
    (run / "logs" / "extra-rank.log").write_text("a log nobody signed\n")
    proc = verify(run, work["pub"])
    assert proc.returncode == 6
    assert fail_lines(proc) == ["logs/extra-rank.log: in the run directory but not in attestation.json: added after signing"]


@pytest.mark.pool
def test_the_wrong_public_key_fails(work: dict[str, Path]) -> None:
    proc = verify(work["signed"], work["other"])
    assert proc.returncode == 6
    (reason,) = fail_lines(proc)
    assert reason.startswith("attestation.json: signed by SHA256:") and "not by the key(s) given" in reason
    both = verify(work["signed"], work["other"], work["pub"])  # --key repeats: any one of them may have signed
    assert both.returncode == 0, both.stdout


@pytest.mark.pool
def test_an_unsigned_run_fails_and_says_so_in_its_reports(work: dict[str, Path]) -> None:
    run = work["unsigned"]
    proc = verify(run, work["pub"])
    assert proc.returncode == 6
    assert fail_lines(proc) == ["attestation.json: missing: the run is not signed (clustercheck sign RUN --key KEY)"]
    assert "ok    metrics: " in proc.stdout  # what can be judged again still is
    assert json.loads((run / "sla.json").read_text())["signature"]["signed_by"] is None
    assert "This run is not signed" in (run / "report.html").read_text()


@pytest.mark.pool
def test_sign_an_existing_run_then_verify(work: dict[str, Path], tmp_path: Path) -> None:
    run = copy_of(work, "unsigned", tmp_path)
    proc = cc("sign", str(run), "--key", str(work["key"]), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "attest " in proc.stdout and "signed by SHA256:" in proc.stdout
    assert verify(run, work["pub"]).returncode == 0
    report = cc("report", str(run), cwd=tmp_path)  # a re-render keeps the signed reports byte for byte
    assert report.returncode == 0, report.stderr
    assert verify(run, work["pub"]).returncode == 0


def test_a_verified_run_that_did_not_finish_says_so_and_exits_as_its_verdict(work: dict[str, Path],
                                                                             tmp_path: Path) -> None:
    """The evidence is genuine, the run it proves was killed after its last item: never `verify && accept`."""
    run = copy_of(work, "unsigned", tmp_path)
    lines = (run / "run.jsonl").read_text().splitlines(keepends=True)
    assert json.loads(lines[-1])["type"] == "end"
    (run / "run.jsonl").write_text("".join(lines[:-1]))  # no end line: the controller was killed
    assert cc("report", str(run), cwd=tmp_path).returncode == 2
    assert cc("sign", str(run), "--key", str(work["key"]), cwd=tmp_path).returncode == 0
    proc = verify(run, work["pub"])
    assert proc.returncode == 2, proc.stdout  # 0 before, with INCOMPLETE nowhere in its output
    header = json.loads(lines[0])
    which = f"run {header['run_id']}, started {header['started']}, on {', '.join(header['nodes'])}"
    assert proc.stdout.splitlines()[-1] == (f"verified: {run.name} ({which}); run verdict INCOMPLETE (the run was "
                                            "killed before it ended (the record has no end line))")
    assert verify(work["signed"], work["pub"]).stdout.splitlines()[-1].endswith("; run verdict PASS")


@pytest.mark.pool
def test_reports_rendered_in_an_earlier_format_are_noted_not_called_edited(work: dict[str, Path],
                                                                            tmp_path: Path) -> None:
    """A run an earlier build of the same version rendered and signed: its record has no report_format
    (format 1) and its sla.json lacks what today's code renders. Verify leaves the reports uncompared and
    says why; the same files claiming today's format are read as edited."""
    from clustercheck.record import attestation
    from clustercheck.record.keys import load_private
    from clustercheck.report import read
    from clustercheck.report.status import run_status

    def as_signed_by_an_earlier_build(run: Path, report_format: int | None) -> None:
        lines = (run / "run.jsonl").read_text().splitlines()
        header = json.loads(lines[0])
        header.pop("report_format")
        if report_format is not None:
            header["report_format"] = report_format
        (run / "run.jsonl").write_text("\n".join([json.dumps(header, sort_keys=True), *lines[1:]]) + "\n")
        sla = json.loads((run / "sla.json").read_text())
        del sla["environment"]["software"]  # as format 1 rendered it
        (run / "sla.json").write_text(json.dumps(sla))
        rec = read(run / "run.jsonl")  # signed as they are, not rendered again (`clustercheck sign` renders)
        attestation.sign(run, rec, run_status(rec), load_private(work["key"]))

    old = copy_of(work, "signed", tmp_path)
    as_signed_by_an_earlier_build(old, None)
    proc = verify(old, work["pub"])
    assert proc.returncode == 0, proc.stdout
    assert (f"reports not compared with run.jsonl: rendered by clustercheck {__version__} in report format 1, this "
            f"is {__version__} with format {REPORT_FORMAT} (results.json, sla.json render differently)") in proc.stdout
    assert cc("sign", str(old), "--key", str(work["key"]), cwd=tmp_path).returncode == 0  # renders them again
    proc = verify(old, work["pub"])
    assert proc.returncode == 0 and "reports not compared" not in proc.stdout, proc.stdout
    assert "ok    reports: results.json, sla.json, junit.xml, ctrf.json, report.html are what run.jsonl renders to" \
        in proc.stdout
    claimed = tmp_path / "claimed"
    shutil.copytree(work["signed"], claimed)
    as_signed_by_an_earlier_build(claimed, REPORT_FORMAT)
    assert "sla.json: differs from what run.jsonl renders to: edited after it was rendered" in fail_lines(
        verify(claimed, work["pub"]))


@pytest.mark.pool
def test_openssh_keys_sign_and_verify(work: dict[str, Path], tmp_path: Path) -> None:
    if not shutil.which("ssh-keygen"):
        pytest.skip("ssh-keygen (openssh-client) is not installed")
    run = copy_of(work, "unsigned", tmp_path)
    key = tmp_path / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "seller", "-f", str(key)], check=True)
    assert cc("sign", str(run), "--key", str(key), cwd=tmp_path).returncode == 0
    proc = verify(run, Path(f"{key}.pub"))
    assert proc.returncode == 0, proc.stdout
    printed = subprocess.run(["ssh-keygen", "-lf", f"{key}.pub"], capture_output=True, text=True).stdout.split()[1]
    assert json.loads((run / "sla.json").read_text())["signature"]["signed_by"] == printed  # ssh-keygen's fingerprint


@pytest.mark.pool
def test_a_forged_record_re_rendered_and_re_signed_fails_re_judging(work: dict[str, Path], tmp_path: Path) -> None:
    run = copy_of(work, "signed", tmp_path)

    def ten_times(entry: dict) -> None:
        for name in ("busbw", "algbw", "avg_busbw"):
            if name in entry.get("metrics") or {}:
                entry["metrics"][name]["value"] *= 10
        for row in entry.get("rows") or []:
            if "busbw" in row:
                row["busbw"] *= 10
                row["algbw"] *= 10
        for v in entry.get("verdicts") or []:
            if v["metric"] == "busbw":
                v["measured"] *= 10
                v["margin"] = (v["measured"] - v["limit"]) / v["limit"]

    edit_record(run, ten_times)  # the rank times (rank_time_us) are left as measured
    assert cc("report", str(run), cwd=tmp_path).returncode == 0
    signed = cc("sign", str(run), "--key", str(work["key"]), cwd=tmp_path)
    assert signed.returncode == 0, signed.stderr
    proc = verify(run, work["pub"])
    assert proc.returncode == 6, proc.stdout
    assert "ok    signature: " in proc.stdout and "ok    digests: " in proc.stdout  # signed by the right key...
    reasons = fail_lines(proc)
    line = results_line(run, next(e for e in reasons if "allreduce" in e).split("::")[1].split(":")[0])
    assert any(r.startswith(f"run.jsonl:{line}: evidence::allreduce[") and "metric busbw: recorded" in r
               and "re-derived" in r for r in reasons), reasons
    assert any("verdict busbw" in r and "differs in measured" in r for r in reasons), reasons


@pytest.mark.pool
def test_a_flipped_verdict_or_a_changed_limit_re_signed_fails(work: dict[str, Path], tmp_path: Path) -> None:
    run = copy_of(work, "signed", tmp_path)

    def flip(entry: dict) -> None:
        if entry["check"] == "gemm":  # a per-GPU kind: its verdict's limit lowered
            entry["verdicts"][0]["limit"] = 1e-12
        if entry["check"] == "env":  # a probe: the answers say what the probe found
            entry["verdicts"][0]["passed"] = not entry["verdicts"][0]["passed"]

    edit_record(run, flip)
    cc("report", str(run), cwd=tmp_path)
    assert cc("sign", str(run), "--key", str(work["key"]), cwd=tmp_path).returncode == 0
    reasons = fail_lines(verify(run, work["pub"]))
    assert any("evidence::gemm[" in r and "differs in limit" in r for r in reasons), reasons
    assert any("evidence::env[" in r and ("differs in passed" in r or "outcome" in r) for r in reasons), reasons


# -- refused before anything runs (no ranks start: not pool tests) ---------------------------------------------

def _suite_dir(tmp_path: Path) -> Path:
    (tmp_path / "evidence.yaml").write_text(textwrap.dedent(SUITE))
    return tmp_path


def test_sign_with_a_missing_key_is_refused_before_anything_runs(tmp_path: Path) -> None:
    root = _suite_dir(tmp_path)
    proc = cc("run", "evidence.yaml", "--out", "out", "--sign", str(root / "no-such.pem"), cwd=root)
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert "--sign" in proc.stderr and "no such file" in proc.stderr and "Traceback" not in proc.stderr
    assert not (root / "out").exists()  # no run directory: nothing was measured


def test_a_world_readable_key_is_refused_like_ssh(tmp_path: Path) -> None:
    root = _suite_dir(tmp_path)
    key, _ = openssl_key(root, "loose")
    key.chmod(0o644)
    proc = cc("run", "evidence.yaml", "--out", "out", "--sign", str(key), cwd=root)
    assert proc.returncode == 4
    assert "permissions 0644 are too open" in proc.stderr and "chmod 600" in proc.stderr
    assert not (root / "out").exists()
    assert cc("sign", str(root), "--key", str(key), cwd=root).returncode == 4


def test_verify_refuses_bad_arguments_with_exit_4(tmp_path: Path) -> None:
    key, pub = openssl_key(tmp_path, "k")
    (tmp_path / "run.jsonl").write_text("")
    assert cc("verify", str(tmp_path), cwd=tmp_path).returncode == 4  # no --key
    private = cc("verify", str(tmp_path), "--key", str(key), cwd=tmp_path)
    assert private.returncode == 4 and "is a private key" in private.stderr
    garbage = tmp_path / "garbage.pub"
    garbage.write_text("not a key\n")
    assert cc("verify", str(tmp_path), "--key", str(garbage), cwd=tmp_path).returncode == 4
    assert cc("verify", str(tmp_path / "nowhere"), "--key", str(pub), cwd=tmp_path).returncode == 4
    rsa = tmp_path / "rsa.pem"
    subprocess.run(["openssl", "genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", str(rsa)],
                   check=True, capture_output=True)
    rsa.chmod(0o600)
    refused = cc("sign", str(tmp_path), "--key", str(rsa), cwd=tmp_path)
    assert refused.returncode == 4 and "Ed25519 only" in refused.stderr


@pytest.mark.pool
def test_a_run_recorded_without_its_inputs_is_signed_only_while_they_are_as_run(work: dict[str, Path],
                                                                              tmp_path: Path) -> None:
    run = copy_of(work, "unsigned", tmp_path)
    shutil.rmtree(run / "inputs")  # as a run recorded before clustercheck kept them
    signed = cc("sign", str(run), "--key", str(work["key"]), cwd=tmp_path)
    assert signed.returncode == 0, signed.stderr  # copied from where the record says, sha256 checked
    assert (run / "inputs/suites/evidence.yaml").read_text() == SUITE
    assert verify(run, work["pub"]).returncode == 0
    shutil.rmtree(run / "inputs")
    suite = work["root"] / "evidence.yaml"
    suite.write_text(SUITE + "# edited after the run\n")
    try:
        refused = cc("sign", str(run), "--key", str(work["key"]), cwd=tmp_path)
    finally:
        suite.write_text(SUITE)
    assert refused.returncode == 4
    assert "has changed since the run (its sha256 differs from the record's)" in refused.stderr
