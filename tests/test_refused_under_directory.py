"""Options a suite cannot run with (--setup-only, --setup-plan, pytest-xdist's -n) are refused in one line (exit 4)
when the suite files are not named but found by pytest under a directory named on the command line: clustercheck
collects a YAML suite file in a directory named `suites` (plugin.pytest_collect_file), so `pytest suites
--setup-only` measured every check and dropped what it measured, and ended INCOMPLETE (exit 2) with a run
directory, not the refusal promised."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import CPU_THRESHOLDS, small_check


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    (tmp_path / "th").mkdir()
    (tmp_path / "th" / "cpu.yaml").write_text(CPU_THRESHOLDS)
    (tmp_path / "suites").mkdir()
    (tmp_path / "suites" / "s.yaml").write_text("checks:\n" + small_check("ok") + small_check("too-fast"))
    return tmp_path


def pytest_of(tree: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args, "--thresholds", "th",
                           "--cc-out", "o"], capture_output=True, text=True, cwd=tree, timeout=300)


XDIST = pytest.param(("-n", "2"), marks=pytest.mark.skipif(importlib.util.find_spec("xdist") is None,
                                                           reason="pytest-xdist is not installed"))


@pytest.mark.parametrize("top", ["suites", "."])
@pytest.mark.parametrize("option", [("--setup-only",), ("--setup-plan",), XDIST])
def test_an_unfit_option_is_refused_for_suites_found_under_a_directory(tree: Path, top: str,
                                                                       option: tuple[str, ...]) -> None:
    out = pytest_of(tree, top, *option)
    assert out.returncode == 4, out.stdout + out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and option[0] in lines[0] and "s.yaml" in lines[0], out.stderr
    assert not (tree / "o").exists()


def test_a_directory_without_suites_is_not_refused(tree: Path) -> None:
    """A tree of plain tests (no suite in a `suites` directory; a virtual environment's shipped suites are not
    collected either) runs --setup-only as pytest does."""
    (tree / "t").mkdir()
    (tree / "t" / "test_plain.py").write_text("def test_x():\n    pass\n")
    (tree / "t" / "env" / "suites").mkdir(parents=True)
    (tree / "t" / "env" / "pyvenv.cfg").write_text("home = /usr\n")
    (tree / "t" / "env" / "suites" / "s.yaml").write_text("checks:\n" + small_check("ok"))
    out = pytest_of(tree, "t", "--setup-only")
    assert out.returncode == 0, out.stdout + out.stderr
