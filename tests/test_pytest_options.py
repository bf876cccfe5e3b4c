"""pytest's own options under `clustercheck run` that cannot work for a gate: refused in one line (exit 4)
before anything is measured, or, for a listing, said from pytest's configuration however it was given."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import CPU_THRESHOLDS, small_check


def cc(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "clustercheck", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=300, env=env)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    (tmp_path / "th").mkdir()
    (tmp_path / "th" / "cpu.yaml").write_text(CPU_THRESHOLDS)
    (tmp_path / "s.yaml").write_text("checks:\n" + small_check("too-fast") + small_check("ok"))
    return tmp_path


@pytest.mark.parametrize("how", ["argv", "PYTEST_ADDOPTS"])
def test_pdb_is_refused_before_anything_is_measured(tree: Path, how: str) -> None:
    """--pdb with no terminal (stdin a pipe a scheduler keeps open) waited on stdin for ever at the first failed
    item, and pdb caught the KeyboardInterrupt of a SIGTERM: a Slurm or K8s stop never ended the run."""
    env = {**os.environ, "PYTEST_ADDOPTS": "--pdb" if how == "PYTEST_ADDOPTS" else ""}
    argv = [sys.executable, "-m", "clustercheck", "run", "s.yaml", "--thresholds", "th", "--out", "o",
            *(["--pdb"] if how == "argv" else [])]
    with open(tree / "stdout", "w") as stdout, open(tree / "stderr", "w") as stderr, \
            subprocess.Popen(argv, cwd=tree, env=env, stdin=subprocess.PIPE, stdout=stdout, stderr=stderr) as proc:
        try:  # stdin stays open, as a scheduler's pipe does (communicate() would close it): pdb would wait on it
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            pytest.fail("clustercheck run --pdb waited on stdin: " + (tree / "stderr").read_text())
    out, err = (tree / "stdout").read_text(), (tree / "stderr").read_text()
    assert proc.returncode == 4, out + err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "--pdb" in lines[0] and "plain pytest" in lines[0], err
    assert not (tree / "o").exists()


@pytest.mark.parametrize("option", ["--setup-only", "--setup-plan"])
def test_setup_only_is_refused_for_suites(tree: Path, option: str) -> None:
    """A check is measured in its item's setup: --setup-only measured every check, dropped the results and said
    'planned item(s) never ran' (a failed measurement lost without a word)."""
    out = cc("run", "s.yaml", "--thresholds", "th", "--out", "o", option, cwd=tree)
    assert out.returncode == 4, out.stdout + out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and option in lines[0], out.stderr
    assert not (tree / "o").exists()


@pytest.mark.parametrize("given", [["-o", "addopts=--co"], ["--override-ini=addopts=--collect-only -q"]])
def test_a_listing_given_in_addopts_says_that_nothing_was_measured(tree: Path, given: list[str]) -> None:
    """The listing was told from argv and PYTEST_ADDOPTS by name: `-o addopts=--co` exited 0, nothing measured,
    without the line that says so (a gate that runs it clears nothing, and must not read it as a pass)."""
    out = cc("run", "s.yaml", "--thresholds", "th", "--out", "o", *given, cwd=tree)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stderr.strip().splitlines() == ["clustercheck: --collect-only: listed only; nothing was measured, "
                                               "no record was written and no node is cleared (exit 0)"]
    assert not (tree / "o").exists()


@pytest.mark.parametrize("given", [["-o", "addopts=--co"], ["-oaddopts=-q --fixtures"],
                                   ["--override-ini=addopts=--markers"]])
def test_a_listing_in_addopts_starts_no_rank_pool_first(given: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """`-o addopts=--co` started the first rank pool (ranks importing torch) for a run that measures nothing."""
    import argparse

    from clustercheck.run.command import prestarts

    monkeypatch.delenv("PYTEST_ADDOPTS", raising=False)
    assert prestarts(argparse.Namespace(launcher="local"), ["-v"])
    assert not prestarts(argparse.Namespace(launcher="local"), ["-v", *given])


@pytest.mark.parametrize("given", [["-n", "2"], ["-n2"]])
def test_a_short_option_of_a_plugin_not_loaded_names_the_plugin(tree: Path, given: list[str]) -> None:
    """`-n 2` without `-p xdist` got pytest's four-line usage screen: only --long options were looked up among the
    installed plugins' options."""
    pytest.importorskip("xdist")
    out = cc("run", "s.yaml", "--thresholds", "th", "--out", "o", *given, cwd=tree)
    assert out.returncode == 4, out.stdout + out.stderr
    assert out.stderr.strip().splitlines() == [
        "clustercheck: error: unknown option -n: it is an option of the installed pytest plugin 'xdist', which "
        "clustercheck run loads only when named: add -p xdist"]
    assert not (tree / "o").exists()


def test_pytests_own_short_options_are_known(tree: Path) -> None:
    """The short options that need no look at pytest's parser are all pytest's own (the list is ours)."""
    from clustercheck.run.command import PYTEST_SHORT, _pytest_flags

    assert PYTEST_SHORT <= (_pytest_flags([]) or set())


def test_setup_only_is_refused_for_suites_under_plain_pytest(tree: Path) -> None:
    """A plain `pytest s.yaml --setup-only` measured every check too, and dropped what it measured."""
    out = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "s.yaml", "--thresholds", "th",
                          "--cc-out", "o", "--setup-only"], capture_output=True, text=True, cwd=tree, timeout=300)
    assert out.returncode == 4, out.stdout + out.stderr
    assert "--setup-only: a check of a suite (s.yaml) is measured in its item's setup" in out.stderr
    assert not (tree / "o").exists()
