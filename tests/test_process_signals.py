"""The `clustercheck` process from its first line to its exit (cli.entry): its exit code is the one main()
returned and said, whatever signal or caught Ctrl-C came before. Real processes, real signals."""

from __future__ import annotations

import json
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


SIGNALS_AFTER_THE_RUN = """
import signal, sys
from clustercheck import cli
from clustercheck.run import prestart

ended, ran = prestart.end, cli.main


def end():  # command.run's `finally`: the record and reports are written, the code is known
    if sys._getframe(1).f_code.co_name == "run":
        signal.raise_signal(signal.SIGTERM)
    ended()


def main(argv=None):
    code = ran(argv)
    signal.raise_signal(signal.SIGINT)  # main() has returned; entry() is about to end the process
    signal.raise_signal(signal.SIGTERM)
    return code


prestart.end, cli.main = end, main
sys.argv = ["clustercheck", "run", "s.yaml", "--thresholds", "th", "--out", "out"]
cli.entry()
"""


def test_a_signal_after_the_run_had_finished_leaves_its_code(tmp_path: Path) -> None:
    """A run that passed, its record and reports written, then SIGTERM in command.run's last step (ending
    the pool nobody took), then SIGINT and SIGTERM after main() returned: it died by the signal (exit 143)
    or said 'stopped before any check ran' (exit 2) where results.json says PASS. Now each signal is one
    line and the exit code is the run's."""
    (tmp_path / "th").mkdir()
    (tmp_path / "th" / "cpu.yaml").write_text("platform: cpu\ndetect: {gpu_count: 0}\nchecks:\n"
                                              "  a: {busbw: {limit: '>= 0.000001', unit: GB/s}}\n")
    (tmp_path / "s.yaml").write_text("checks:\n  - id: a\n    measure: all_reduce\n    params: {sizes: [1KiB], iters: 2}\n")
    out = _python_m(tmp_path, "after_the_run", SIGNALS_AFTER_THE_RUN)
    assert json.loads((tmp_path / "out" / "latest" / "results.json").read_text())["verdict"] == "PASS"
    assert out.returncode == 0, (out.returncode, out.stderr)
    said = [f"clustercheck: {name} after the run had finished: its record and reports stand (exit 0)"
            for name in ("SIGTERM", "SIGINT", "SIGTERM")]
    assert [line for line in out.stderr.splitlines() if "after the run" in line] == said, out.stderr
    assert "before any check ran" not in out.stderr and "Traceback" not in out.stdout + out.stderr


def test_a_signal_while_the_first_pool_connects_leaves_no_out_directory(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """A fresh --out (two levels made for the run), the run directory opened, and a signal while the session
    waits for the pool started before pytest: the pool's discard tried to remove the --out it had made while
    the run directory was still inside, then the run directory went: an empty --out was left behind."""
    from clustercheck.run import prestart
    from helpers import clustercheck_here

    def signalled(self: prestart.Prestarted) -> None:
        assert list((tmp_path / "out" / "new").glob("2*")), "the run directory was not made yet"
        raise KeyboardInterrupt("clustercheck: SIGTERM while the run was starting")

    monkeypatch.setattr(prestart.Prestarted, "ready", signalled)
    res = clustercheck_here("run", "cpu-smoke", "--out", "out/new", cwd=tmp_path)
    assert res.returncode == 2, res.stdout + res.stderr
    assert "INCOMPLETE: SIGTERM while the run was starting: stopped before any check ran" in res.stderr
    assert not (tmp_path / "out").exists(), sorted(map(str, (tmp_path / "out").rglob("*")))
