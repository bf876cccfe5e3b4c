"""The type checker over clustercheck/ and plugins/ (configured in pyproject.toml: every function annotated,
untyped bodies checked, no unused ignores): the run record and wire shapes are typed, so a reader that
misuses a record field fails here, before any cluster runs it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_mypy_finds_no_error() -> None:
    proc = subprocess.run([sys.executable, "-m", "mypy", "--no-error-summary"], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
