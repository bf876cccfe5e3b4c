"""Signing keys (clustercheck/record/keys.py): the formats openssl and ssh-keygen write, the fingerprint
as `ssh-keygen -l` prints it, keys refused as ssh refuses them, and a command line with the key's path
taken out before it reaches a record."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from clustercheck.errors import UserError
from clustercheck.record.keys import PASSPHRASE_ENV, load_private, load_public, redact_argv


def openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def test_pem_pair_from_openssl_has_one_fingerprint(tmp_path: Path) -> None:
    key, pub = tmp_path / "k.pem", tmp_path / "k.pub"
    openssl("genpkey", "-algorithm", "ed25519", "-out", str(key))
    key.chmod(0o600)
    openssl("pkey", "-in", str(key), "-pubout", "-out", str(pub))
    private, public = load_private(key), load_public(pub)
    assert private.fingerprint == public.fingerprint and private.fingerprint.startswith("SHA256:")
    assert str(key) not in repr(private) and "BEGIN" not in repr(private)


def test_the_fingerprint_is_the_one_ssh_keygen_prints(tmp_path: Path) -> None:
    if not shutil.which("ssh-keygen"):
        pytest.skip("ssh-keygen (openssh-client) is not installed")
    key = tmp_path / "id"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    printed = subprocess.run(["ssh-keygen", "-lf", f"{key}.pub"], capture_output=True, text=True).stdout.split()[1]
    assert load_private(key).fingerprint == load_public(Path(f"{key}.pub")).fingerprint == printed


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o644])
def test_a_key_others_can_read_is_refused(tmp_path: Path, mode: int) -> None:
    key = tmp_path / "k.pem"
    openssl("genpkey", "-algorithm", "ed25519", "-out", str(key))
    key.chmod(mode)
    with pytest.raises(UserError, match=f"permissions {mode:04o} are too open"):
        load_private(key)


def test_an_encrypted_key_needs_its_passphrase(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    key = tmp_path / "k.pem"
    openssl("genpkey", "-algorithm", "ed25519", "-aes256", "-pass", "pass:s3cret", "-out", str(key))
    key.chmod(0o600)
    monkeypatch.delenv(PASSPHRASE_ENV, raising=False)
    with pytest.raises(UserError, match=f"encrypted: give its passphrase in \\${PASSPHRASE_ENV}"):
        load_private(key)
    monkeypatch.setenv(PASSPHRASE_ENV, "wrong")
    with pytest.raises(UserError, match="wrong passphrase"):
        load_private(key)
    monkeypatch.setenv(PASSPHRASE_ENV, "s3cret")
    assert load_private(key).fingerprint.startswith("SHA256:")


def test_a_public_key_given_to_sign_and_a_private_one_given_to_verify_are_refused(tmp_path: Path) -> None:
    key, pub = tmp_path / "k.pem", tmp_path / "k.pub"
    openssl("genpkey", "-algorithm", "ed25519", "-out", str(key))
    key.chmod(0o600)
    openssl("pkey", "-in", str(key), "-pubout", "-out", str(pub))
    pub.chmod(0o600)
    with pytest.raises(UserError, match="is a public key; signing needs the private key"):
        load_private(pub)
    with pytest.raises(UserError, match="is a private key; verify with its public half"):
        load_public(key)


def test_the_key_path_is_taken_out_of_a_command_line() -> None:
    argv = ["clustercheck", "run", "burn-in", "--sign", "/home/s/.keys/seller.pem", "--out", "o"]
    assert redact_argv(argv) == ["clustercheck", "run", "burn-in", "--sign", "<private key>", "--out", "o"]
    assert redact_argv(["pytest", "--cc-sign=/k.pem"]) == ["pytest", "--cc-sign=<private key>"]
    assert redact_argv(["clustercheck", "run", "--sig", "/k.pem"])[-1] == "<private key>"  # argparse's abbreviation
    assert redact_argv(["clustercheck", "run", "--store-addr", "h"]) == ["clustercheck", "run", "--store-addr", "h"]
