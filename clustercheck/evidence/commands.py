"""`clustercheck sign RUN --key KEY` and `clustercheck verify RUN --key PUB`: their arguments and what they
print. Exit codes (README's table): sign 0 once the run is signed, whatever its verdict; verify 6 not
verified (each reason one line naming the file, and the record line where there is one), and when verified
the code of the verdict it proves (0 PASS, 1 FAIL, 2 INCOMPLETE, 3 ERROR, 5 SKIPPED); both 4 for bad
arguments, an unreadable key or a run directory that cannot be signed."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from clustercheck.exitcodes import Exit
from clustercheck.paths import display

SIGN_HELP = "sign a saved run: attestation.json over every file of its directory (DSSE, in-toto, Ed25519)"
VERIFY_HELP = "verify a signed run: signature, digests, no file left out, every metric and verdict re-judged"


def add_parsers(sub: Any) -> None:
    sign = sub.add_parser("sign", help=SIGN_HELP, description=SIGN_HELP + ". The reports are rendered again with "
                          "the signer's key fingerprint in sla.json and report.html; the key is never copied and its "
                          "path is written nowhere. docs/evidence.md")
    sign.add_argument("run", type=Path, metavar="RUN", help="a run directory or its run.jsonl")
    sign.add_argument("--key", type=Path, required=True, metavar="KEY",
                      help="Ed25519 private key: PEM (openssl genpkey -algorithm ed25519) or OpenSSH; readable by "
                           "its owner only; an encrypted key's passphrase in $CLUSTERCHECK_KEY_PASSPHRASE")
    verify = sub.add_parser("verify", help=VERIFY_HELP, description=VERIFY_HELP + ". Exit 6: not verified, the "
                            "evidence does not prove what it says (one line per reason); verified, the code of the "
                            "run's verdict: 0 PASS, 1 FAIL, 2 INCOMPLETE, 3 ERROR, 5 SKIPPED; 4: bad arguments or "
                            "an unreadable key. docs/evidence.md")
    verify.add_argument("run", type=Path, metavar="RUN", help="a run directory or its run.jsonl")
    verify.add_argument("--key", type=Path, action="append", required=True, metavar="PUB",
                        help="a public key the run may be signed by: PEM (openssl pkey -pubout) or an OpenSSH "
                             "'ssh-ed25519 ...' line; repeatable; only these keys are trusted")
    verify.add_argument("--allow-selection", action="store_true",
                        help="accept a run whose items were selected (-k, -m, --deselect, a node id): without it "
                             "such a run is NOT VERIFIED as the whole suite (exit 6), whatever its verdict")


def sign_main(args: argparse.Namespace) -> int:
    from clustercheck.record.keys import load_private
    from clustercheck.evidence.signing import sign_run
    from clustercheck.evidence.verify import run_dir_of
    from clustercheck.report import read
    from clustercheck.report.status import run_status

    key = load_private(args.key, "--key")
    run_dir = run_dir_of(args.run)
    rec = read(run_dir / "run.jsonl")
    paths = sign_run(run_dir, rec, key)
    for kind, path in paths.items():
        print(f"{kind:<6} {display(path)}")
    print(f"signed by {key.fingerprint} (ed25519); run verdict {run_status(rec)['verdict']}")
    return Exit.PASSED


def verify_main(args: argparse.Namespace) -> int:
    """Exit 6 when the evidence does not verify; when it does, the code of the verdict it proves (0 only for a
    PASS), so that `verify && accept` never accepts a run that failed, errored or did not finish, and a
    forgery (6) is never read as a genuine hardware FAIL (1)."""
    from clustercheck.exitcodes import for_verdict
    from clustercheck.record.keys import load_public
    from clustercheck.evidence.verify import run_dir_of, verify
    from clustercheck.report.status import run_status

    keys = [load_public(path, "--key") for path in args.key]
    run_dir = run_dir_of(args.run)
    result = verify(run_dir, keys)
    for line in result.passed:
        print(f"ok    {line}")
    for line in result.notes:
        print(f"note  {line}")
    for line in result.problems:
        print(f"FAIL  {line}")
    if result.verified and result.selection and not args.allow_selection:
        chosen, ran, total = result.selection
        print(f"NOT VERIFIED as the whole suite: {chosen} ran {ran} of {total} checks ({display(run_dir)}; "
              f"--allow-selection verifies the selection)")
        return Exit.NOT_VERIFIED
    if result.verified:
        rec = result.record  # as judged: not read a third time
        status = run_status(rec)
        why = f" ({status['incomplete']['reason']})" if status["incomplete"] else ""
        picked = f"; items selected by {result.selection[0]}: {result.selection[1]} of {result.selection[2]} " \
                 f"checks" if result.selection else ""
        print(f"verified: {display(run_dir)} ({_which_run(rec.header)}); run verdict {status['verdict']}{why}{picked}")
        return for_verdict(status["verdict"])
    print(f"NOT VERIFIED: {display(run_dir)}: {len(result.problems)} problem(s)")
    return Exit.NOT_VERIFIED


def _which_run(header: Any) -> str:
    """The run the evidence proves, as a buyer tells it from another: its id, start and nodes."""
    nodes = ", ".join(str(n) for n in header.get("nodes") or ()) or "no node"
    return f"run {header.get('run_id') or '(no id)'}, started {header.get('started')}, on {nodes}"
