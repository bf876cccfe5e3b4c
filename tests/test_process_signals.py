"""The `clustercheck` process from its first line to its exit (cli.entry): its exit code is the one main()
returned and said, whatever signal or caught Ctrl-C came before. Real processes, real signals."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


def _python_m(tmp_path: Path, module: str, source: str) -> subprocess.CompletedProcess[str]:
    """`python -m MODULE` (as `python -m clustercheck` runs), MODULE written into `tmp_path`."""
    (tmp_path / f"{module}.py").write_text(source)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *filter(None, [os.environ.get("PYTHONPATH")])])}
    return subprocess.run([sys.executable, "-m", module], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)


CAUGHT_IN_EXEC = """
import sys

import pytest
from clustercheck import cli


def main(argv=None):
    try:  # as dataclasses and jinja2 run code they build at import: a Ctrl-C lands inside exec()
        exec("raise KeyboardInterrupt")
    except KeyboardInterrupt:
        print("clustercheck: INCOMPLETE: interrupted: stopped before any check ran", file=sys.stderr)
    return 2


cli.main = main
cli.entry()
"""


def test_a_ctrl_c_caught_after_an_exec_keeps_the_exit_code(tmp_path: Path) -> None:
    """Under `python -m`, a KeyboardInterrupt that escaped an exec() of source text sets CPython's
    unhandled-Ctrl-C flag though it was caught; the interpreter's exit then ended the process by SIGINT
    (exit 130 from a shell) after the run had said INCOMPLETE and returned 2."""
    out = _python_m(tmp_path, "caught_in_exec", CAUGHT_IN_EXEC)
    assert out.returncode == 2, (out.returncode, out.stderr)
    assert out.stderr.strip().splitlines() == ["clustercheck: INCOMPLETE: interrupted: stopped before any check ran"]


SIGNAL_WHILE_PARSING = """
import signal, sys
from clustercheck import cli


def parser():  # argparse's parser is built (0.2 s of imports) before `run` has a handler of its own
    {how}
    raise AssertionError("the signal did not stop the run")


cli._parser = parser
sys.argv = ["clustercheck", "run", "cpu-smoke", "--out", "out"]
cli.entry()
"""


@pytest.mark.parametrize("how, why", [
    ("raise KeyboardInterrupt", "interrupted"),
    ("signal.raise_signal(signal.SIGINT)", "interrupted"),
    ("signal.raise_signal(signal.SIGTERM)", "SIGTERM while the run was starting"),
], ids=["KeyboardInterrupt", "SIGINT", "SIGTERM"])
def test_a_signal_while_the_arguments_are_parsed_is_one_line(tmp_path: Path, how: str, why: str) -> None:
    """`clustercheck run` signalled before main() had parsed its arguments: a Ctrl-C was a traceback
    (exit 130), a SIGTERM death by the signal (143) with nothing said. Now the one INCOMPLETE line, exit 2."""
    out = _python_m(tmp_path, "parsing", SIGNAL_WHILE_PARSING.format(how=how))
    assert out.returncode == 2, (out.returncode, out.stderr)
    assert out.stderr.strip().splitlines() == [f"clustercheck: INCOMPLETE: {why}: stopped before any check ran; "
                                               "nothing was measured and no node is cleared"]
    assert not (tmp_path / "out").exists()
