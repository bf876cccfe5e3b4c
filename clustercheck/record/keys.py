"""Signing keys: an Ed25519 private key to sign a run's evidence with and the public keys a buyer verifies
against, read with pyca/cryptography. A private key may be PEM (PKCS#8, as `openssl genpkey -algorithm
ed25519` writes it) or OpenSSH's format (`ssh-keygen -t ed25519`); a public key PEM (`openssl pkey
-pubout`) or an OpenSSH public line (`ssh-ed25519 AAAA... comment`).

A key is named by its fingerprint as OpenSSH prints it (`ssh-keygen -lf KEY.pub`: SHA256 of the public
key's wire form, base64 without padding), so a buyer can compare it with what the seller published.
A private key file that group or others can read is refused, as ssh refuses it; an encrypted key is read
with the passphrase in $CLUSTERCHECK_KEY_PASSPHRASE. Nothing here writes a key anywhere."""

from __future__ import annotations

import base64
import hashlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clustercheck.errors import UserError

PASSPHRASE_ENV = "CLUSTERCHECK_KEY_PASSPHRASE"
SIGN_FLAGS = ("--sign", "--cc-sign")  # the run option, under `clustercheck run` and under pytest
ALGORITHM = "ed25519"


@dataclass(frozen=True)
class SigningKey:
    """A private key ready to sign, and the fingerprint reports name it by (never its path)."""

    private: Any  # cryptography's Ed25519PrivateKey
    fingerprint: str

    def __repr__(self) -> str:  # a key must not end up in a log or a traceback by accident
        return f"SigningKey({self.fingerprint})"


@dataclass(frozen=True)
class PublicKey:
    public: Any  # cryptography's Ed25519PublicKey
    fingerprint: str
    given: str  # what the user named it by, for messages


def fingerprint(public: Any) -> str:
    """`SHA256:<base64>` of the key's OpenSSH wire form, as `ssh-keygen -l` prints it."""
    from cryptography.hazmat.primitives import serialization

    line = public.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    blob = base64.b64decode(line.split()[1])
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


def _read(path: Path, what: str) -> bytes:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise UserError(f"{what} {path}: no such file") from None
    except IsADirectoryError:
        raise UserError(f"{what} {path}: is a directory, not a key file") from None
    except OSError as exc:
        raise UserError(f"{what} {path}: cannot read it ({exc.strerror or type(exc).__name__})") from None
    if len(data) > 64 << 10:
        raise UserError(f"{what} {path}: {len(data)} bytes is not a key file")
    return data


def _private_mode_ok(path: Path, what: str) -> None:
    """As ssh: 'UNPROTECTED PRIVATE KEY FILE': a key others can read is no longer only its owner's."""
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
    except OSError as exc:
        raise UserError(f"{what} {path}: cannot read it ({exc.strerror or type(exc).__name__})") from None
    if mode & 0o077:
        raise UserError(f"{what} {path}: permissions {mode:04o} are too open: a private key must be readable by "
                        f"its owner only (chmod 600 {path}); refused, as ssh refuses it")


def load_private(path: Path, what: str = "--sign") -> SigningKey:
    """The Ed25519 private key at `path`; UserError (one line) when it is missing, unprotected, unreadable,
    encrypted without $CLUSTERCHECK_KEY_PASSPHRASE, or not Ed25519."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    data = _read(path, what)
    _private_mode_ok(path, what)
    secret = os.environ.get(PASSPHRASE_ENV)
    password = secret.encode() if secret else None
    openssh = b"BEGIN OPENSSH PRIVATE KEY" in data
    try:
        if openssh:
            key: Any = serialization.load_ssh_private_key(data, password)
        else:
            key = serialization.load_pem_private_key(data, password)
    except TypeError as exc:  # encrypted without a passphrase, or a passphrase for a plain key
        raise UserError(f"{what} {path}: {_passphrase_problem(str(exc))}") from None
    except (ValueError, AssertionError) as exc:
        if b"PUBLIC KEY" in data or data.lstrip().startswith(b"ssh-"):
            raise UserError(f"{what} {path}: is a public key; signing needs the private key") from None
        why = "wrong passphrase or " if password else ""
        raise UserError(f"{what} {path}: not a private key clustercheck can read ({why}expected PEM from "
                        f"`openssl genpkey -algorithm ed25519` or an OpenSSH ed25519 key): {_short(exc)}") from None
    except Exception as exc:  # cryptography's UnsupportedAlgorithm and the like: the file, not the harness
        raise UserError(f"{what} {path}: not a key clustercheck can read: {type(exc).__name__}") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise UserError(f"{what} {path}: a {_kind(key)} key; clustercheck signs with Ed25519 only "
                        f"(openssl genpkey -algorithm ed25519 -out KEY)")
    return SigningKey(key, fingerprint(key.public_key()))


def load_public(path: Path, what: str = "--key") -> PublicKey:
    """The Ed25519 public key at `path` (PEM or an OpenSSH public line); UserError otherwise. A private
    key is refused: a buyer verifies with the public half the seller published."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    data = _read(path, what)
    if b"PRIVATE KEY" in data:
        raise UserError(f"{what} {path}: is a private key; verify with its public half (openssl pkey -in KEY "
                        f"-pubout, or the .pub file ssh-keygen wrote), and keep the private key to the signer")
    try:
        if b"BEGIN PUBLIC KEY" in data:
            key: Any = serialization.load_pem_public_key(data)
        else:
            key = serialization.load_ssh_public_key(data.strip())
    except Exception as exc:  # ValueError, UnsupportedAlgorithm: what the file holds, one line
        raise UserError(f"{what} {path}: not a public key clustercheck can read (expected PEM from `openssl pkey "
                        f"-pubout` or an OpenSSH 'ssh-ed25519 AAAA...' line): {_short(exc)}") from None
    if not isinstance(key, Ed25519PublicKey):
        raise UserError(f"{what} {path}: a {_kind(key)} key; clustercheck's attestations are signed with Ed25519")
    return PublicKey(key, fingerprint(key), str(path))


def _kind(key: Any) -> str:
    return type(key).__name__.removeprefix("_").replace("PrivateKey", "").replace("PublicKey", "") or "different"


def _short(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return text[:120]


def _passphrase_problem(text: str) -> str:
    if "not encrypted" in text:
        return f"the key is not encrypted, but ${PASSPHRASE_ENV} is set: unset it"
    return f"the key is encrypted: give its passphrase in ${PASSPHRASE_ENV}"


def redact_argv(argv: list[str], flags: tuple[str, ...] = SIGN_FLAGS) -> list[str]:
    """A command line with the value of each of `flags` (the private key's path) replaced, also where the
    flag is abbreviated as argparse allows (`--sig KEY`): the path of a private key never reaches a report."""
    def is_flag(text: str) -> bool:
        return text.startswith("--") and len(text) > 3 and any(f.startswith(text) for f in flags)

    out: list[str] = []
    hide = False
    for arg in argv:
        if hide:
            out.append("<private key>")
            hide = False
            continue
        flag, eq, _ = arg.partition("=")
        if eq and is_flag(flag):
            out.append(f"{flag}=<private key>")
        else:
            out.append(arg)
            hide = is_flag(arg)
    return out
