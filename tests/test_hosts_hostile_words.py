"""An agent's (or its ssh's) last words are quoted on the terminal and in the run's error: escaped
(errors.escape), so an ESC sequence in them (an OSC 52 clipboard write, cursor up and erase line) is
shown as backslash text and drives nothing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from clustercheck.errors import escape
from clustercheck.exitcodes import Exit
from clustercheck.run.hosts import LAST_WORDS, last_words

sys.path.insert(0, str(Path(__file__).resolve().parent))
from joining import project  # noqa: E402

HOSTILE = "ssh: \x1b]52;c;cHduZWQ=\x07\x1b[1A\x1b[2Kno route\x9b2J"


def test_last_words_are_the_last_line_escaped(tmp_path: Path) -> None:
    log = tmp_path / "agent0.log"
    log.write_bytes(f"first\n{HOSTILE}\n\n".encode())
    assert last_words(log) == escape(HOSTILE) and "\x1b" not in last_words(log)
    log.write_text("x" * (LAST_WORDS + 50) + "\x1b")  # cut first, then escaped: the ESC past the cut is gone
    assert last_words(log) == "x" * LAST_WORDS


@pytest.mark.pool
def test_an_agents_hostile_last_words_reach_the_error_escaped(tmp_path: Path) -> None:
    """The only host's agent prints an ESC sequence and exits 1: the "no host's agent joined" error names
    h1 with its words escaped; no ESC or BEL reaches stdout or stderr."""
    project(tmp_path)
    (tmp_path / "say.py").write_text(f"import sys\nsys.stderr.write({HOSTILE!r} + '\\n')\nsys.exit(1)\n")
    template = f"{sys.executable} {tmp_path / 'say.py'} {{host}}"
    res = subprocess.run([sys.executable, "-m", "clustercheck", "run", "s.yaml", "--thresholds", "th", "--out", "out",
                          "--launcher", "hosts", "--hosts", "h1", "--host-command", template, "--ranks", "2",
                          "--store-addr", "127.0.0.1"], cwd=tmp_path,
                         env={**os.environ, "PYTHONIOENCODING": "utf-8"}, capture_output=True, text=True, timeout=300)
    out = res.stdout + res.stderr
    assert f"h1: its agent exited with 1 before joining: {escape(HOSTILE)}" in out, out[-3000:]
    assert "\x1b" not in out and "\x07" not in out and "\x9b" not in out, out[-3000:]
    assert res.returncode == Exit.ERROR, out[-3000:]
