"""`attestation.json`: a DSSE envelope (https://github.com/secure-systems-lab/dsse) around the run's in-toto
Statement, signed with Ed25519. Envelope, pre-authentication encoding and signatures are
securesystemslib's (`securesystemslib.dsse.Envelope`, `CryptoSigner`, `SSlibKey`); the keys are
pyca/cryptography's. Each signature's keyid is the key's OpenSSH fingerprint, so `verify` matches a
signature to exactly the public keys it is given and a person can read who signed."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from clustercheck.record.statement import ATTESTATION, PAYLOAD_TYPE, PREDICATE_TYPE, STATEMENT_TYPE, statement
from clustercheck.record.io import Record
from clustercheck.record.keys import ALGORITHM, PublicKey, SigningKey


_SHA256 = re.compile(r"[0-9a-f]{64}")


def _sslib_key(public: Any, keyid: str) -> Any:
    from securesystemslib.signer import SSlibKey

    return SSlibKey.from_crypto(public, keyid=keyid)


def sign(run_dir: Path, rec: Record, status: dict[str, Any], key: SigningKey) -> Path:
    """Hash every evidence file of `run_dir`, sign the Statement and write attestation.json (atomically:
    a half-written attestation never stands beside the run)."""
    from securesystemslib.dsse import Envelope
    from securesystemslib.signer import CryptoSigner

    payload = json.dumps(statement(run_dir, rec, status), indent=1, sort_keys=True).encode("utf-8")
    envelope = Envelope(payload, PAYLOAD_TYPE, {})
    envelope.sign(CryptoSigner(key.private, _sslib_key(key.private.public_key(), key.fingerprint)))
    path = run_dir / ATTESTATION
    tmp = run_dir / f".{ATTESTATION}.tmp{os.getpid()}"
    tmp.write_text(json.dumps(envelope.to_dict(), indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path


@dataclass(frozen=True)
class Signed:
    """attestation.json as read: the Statement (not yet trusted) and who its signatures claim to be."""

    envelope: Any  # securesystemslib.dsse.Envelope
    statement: dict[str, Any]
    keyids: list[str]


class AttestationError(ValueError):
    """attestation.json is missing or not a DSSE envelope with an in-toto Statement: one line, naming why."""


def read(run_dir: Path) -> Signed:
    from securesystemslib.dsse import Envelope

    path = run_dir / ATTESTATION
    if not path.is_file():
        raise AttestationError(f"{ATTESTATION}: missing: the run is not signed (clustercheck sign RUN --key KEY)")
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        keyids = [str(s.get("keyid")) for s in doc.get("signatures") or ()]
        envelope = Envelope.from_dict(doc)
    except Exception as exc:  # JSON, base64, a missing field, a duplicated keyid: the file is not what it says
        raise AttestationError(f"{ATTESTATION}: not a DSSE envelope ({type(exc).__name__}: {str(exc)[:80]})") from None
    if envelope.payload_type != PAYLOAD_TYPE:
        raise AttestationError(f"{ATTESTATION}: payloadType {envelope.payload_type!r}, expected {PAYLOAD_TYPE!r}")
    try:
        stmt = json.loads(envelope.payload)
    except ValueError:
        raise AttestationError(f"{ATTESTATION}: the payload is not JSON") from None
    why = _not_a_statement(stmt)
    if why:
        raise AttestationError(f"{ATTESTATION}: the payload is not the in-toto Statement clustercheck signs: {why}")
    return Signed(envelope, stmt, keyids)


def _not_a_statement(stmt: Any) -> str | None:
    """Why `stmt` is not a Statement v1 of clustercheck's predicate, every subject `{name: text, digest:
    {sha256: 64 lowercase hex digits}}`, in words naming the key; None when it is. (jsonschema is no
    dependency of clustercheck: a schema of six rules is written out here.)"""
    if not isinstance(stmt, dict):
        return f"a JSON {type(stmt).__name__}, not an object"
    if stmt.get("_type") != STATEMENT_TYPE:
        return f"_type {stmt.get('_type')!r}, expected {STATEMENT_TYPE!r}"
    if stmt.get("predicateType") != PREDICATE_TYPE:
        return f"predicateType {stmt.get('predicateType')!r}, expected {PREDICATE_TYPE!r}"
    subjects = stmt.get("subject")
    if not isinstance(subjects, list) or not subjects:
        return "subject: not a list of files"
    for i, s in enumerate(subjects):
        name = s.get("name") if isinstance(s, dict) else None
        digest = s.get("digest") if isinstance(s, dict) else None
        if not isinstance(name, str) or not name:
            return f"subject[{i}].name: not a file name"
        if not isinstance(digest, dict) or set(digest) != {"sha256"}:
            return f"subject[{i}] ({name}).digest: not {{sha256: HEX}}"
        if not isinstance(digest["sha256"], str) or not _SHA256.fullmatch(digest["sha256"]):
            return f"subject[{i}] ({name}).digest.sha256: not 64 lowercase hex digits"
    if not isinstance(stmt.get("predicate"), dict):
        return "predicate: not an object"
    return None


def signer(run_dir: Path) -> str | None:
    """The fingerprint the attestation says signed it (not verified: for the reports' 'signed by' line)."""
    try:
        keyids = read(run_dir).keyids
    except AttestationError:
        return None
    return ", ".join(keyids) or None


def check_signature(signed: Signed, keys: Sequence[PublicKey]) -> str | None:
    """None when a signature verifies against one of exactly `keys`; else why not, in one line."""

    wanted = [_sslib_key(k.public, k.fingerprint) for k in keys]
    try:
        signed.envelope.verify(wanted, 1)
    except Exception:  # VerificationError: no signature by these keys verified; anything else the same
        given = ", ".join(k.fingerprint for k in keys)
        by = ", ".join(signed.keyids) or "no key"
        if not set(signed.keyids) & {k.fingerprint for k in keys}:
            return f"{ATTESTATION}: signed by {by}, not by the key(s) given ({given})"
        return f"{ATTESTATION}: the {ALGORITHM} signature by {by} does not verify: the statement or the signature " \
               f"was changed after signing"
    return None
