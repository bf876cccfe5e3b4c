"""The clustercheck command: one-line errors before pytest starts, platforms, help."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from helpers import CPU_THRESHOLDS, clustercheck_here, small_check

REPO = Path(__file__).resolve().parent.parent


def cc(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "clustercheck", *args], capture_output=True, text=True,
                          cwd=cwd or REPO, timeout=300)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    (tmp_path / "th").mkdir()
    (tmp_path / "th" / "cpu.yaml").write_text(CPU_THRESHOLDS)
    return tmp_path


@pytest.mark.parametrize(("suite", "message"), [
    ("checks:\n  - id: ok\n    measure: all_reduce\n   params: {}\n", "s.yaml:4: YAML syntax error: *"),
    ("checks:\n  - id: ok\n    measure: all_reduce\n    scpoe: node\n", "s.yaml:4: checks[0].scpoe: unknown key; did you mean 'scope'?"),
    ("checks:\n  - id: ok\n    measure: all_reduce\n    params: {sizes: [12 MB/s]}\n",
     "s.yaml:4: checks[0].params.sizes: expected a size such as 16MiB, 1GiB or 4096, got '12 MB/s'"),
])
def test_bad_suite_is_one_line_exit_4(tree: Path, suite: str, message: str) -> None:
    (tree / "s.yaml").write_text(suite)
    out = cc("run", "s.yaml", "--thresholds", "th", cwd=tree)
    assert out.returncode == 4 and out.stdout == ""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("clustercheck: error: ")
    text = lines[0].removeprefix("clustercheck: error: ")
    assert text.startswith(message[:-1]) if message.endswith("*") else text == message


def test_bad_threshold_expression_is_one_line_exit_4(tree: Path) -> None:
    (tree / "th" / "cpu.yaml").write_text(CPU_THRESHOLDS.replace('">= 0.000001"', '">= 0.8 ** spec.nvlink.x"'))
    (tree / "s.yaml").write_text("checks:\n" + small_check("ok"))
    out = cc("run", "s.yaml", "--thresholds", "th", cwd=tree)
    assert out.returncode == 4
    assert out.stderr.strip().splitlines() == [
        "clustercheck: error: th/cpu.yaml:7: checks.ok.busbw.limit: bad threshold expression "
        "'>= 0.8 ** spec.nvlink.x': expected a number, 'spec.<name>.<field>' or '(', found '*'"]


def test_unknown_suite_name_lists_the_shipped_ones() -> None:
    out = cc("run", "no-such-suite")
    assert out.returncode == 4
    assert "no suite named 'no-such-suite' (shipped suites: burn-in, cpu-burn-in, cpu-smoke, fabric, gpu-smoke, native-tools, node-health, quick-gate-mi300x, quick-gate-nvlink8)" in out.stderr


@pytest.mark.parametrize("name", ["missing.YAML", "missing.Yml"])
def test_a_missing_suite_file_in_upper_case_is_named_as_a_file(name: str) -> None:
    out = cc("run", name)
    assert out.returncode == 4 and f"no such suite file: {name}" in out.stderr, out.stderr


@pytest.mark.parametrize("name", ["dir.yaml", "dir"])
def test_a_directory_given_as_a_suite_is_named_a_directory(tmp_path: Path, name: str) -> None:
    (tmp_path / name).mkdir()
    out = cc("run", name, cwd=tmp_path)
    assert out.returncode == 4, out.stderr
    assert out.stderr.strip().splitlines() == [f"clustercheck: error: {name} is a directory, not a suite file"]


@pytest.mark.pool
def test_run_passes_pytest_options_and_exit_code_through(tree: Path) -> None:
    (tree / "s.yaml").write_text("checks:\n" + small_check("too-fast") + small_check("ok"))
    out = clustercheck_here("run", "s.yaml", "--thresholds", "th", "--out", "o", "-k", "ok", cwd=tree)
    assert out.returncode == 0, out.stdout
    assert "1 passed, 1 deselected" in out.stdout
    out = clustercheck_here("run", "s.yaml", "--thresholds", "th", "--out", "o", cwd=tree)
    assert out.returncode == 1
    assert (tree / "o" / "latest" / "junit.xml").is_file()


def test_platforms_lists_and_shows_resolved_limits() -> None:
    out = cc("platforms")
    assert out.returncode == 0
    lines = out.stdout.splitlines()
    profiles = [l for l in lines if not l.startswith(("derived:", "details"))]
    assert len(profiles) == len({l.split()[0] for l in profiles}) >= 10  # one line per profile
    assert any(l.split()[:4] == ["h100-sxm-8x", "8", "GPU(s)", "shipped"] for l in profiles)
    assert all(len(l) <= 200 for l in lines) and "source:" not in out.stdout
    out = cc("platforms", "list", "extra")
    assert out.returncode == 4 and out.stderr.count("\n") == 1 and "platforms show extra" in out.stderr
    out = cc("platforms", "show", "h100-sxm-8x")
    assert "detect: gpu_count=8, pci_device_ids=[0x2330], nvlinks_per_gpu=18" in out.stdout
    assert "allreduce-ring.busbw >= 328.5 GB/s  = '>= 0.73 * spec.nvlink.unidirectional'" in out.stdout
    assert "spec.nvlink.unidirectional = 450 GB/s" in out.stdout
    out = cc("platforms", "show", "a999")
    assert out.returncode == 4 and "no threshold profile 'a999'" in out.stderr


def test_help_explains_commands_and_exit_codes() -> None:
    out = cc("--help")
    assert out.returncode == 0
    for text in ("run", "report", "platforms", "exit codes", "cpu-smoke"):
        assert text in out.stdout
    run_help = cc("run", "--help").stdout
    assert "go to pytest unchanged" in run_help and "--platform" in run_help


@pytest.mark.parametrize("command", ["run", "report", "compare", "platforms", "resume", "sign", "verify", "probe"])
def test_each_subcommands_help_states_the_exit_codes(command: str) -> None:
    """Only the top-level --help had the table; `run --help` also lacked --ranks's range."""
    from clustercheck.exitcodes import MEANING

    out = cc(command, "--help").stdout
    assert "exit codes" in out
    if command != "probe":  # probe's own table reads each code for a probe
        assert all(f"  {int(code)}  {meaning}" in out for code, meaning in MEANING.items()), out
    if command == "run":
        assert "rank processes per node, 1 to 1024" in " ".join(out.split())


@pytest.mark.pool
def test_options_before_the_suite_and_plugin_options_are_not_read_as_suites(tree: Path) -> None:
    (tree / "s.yaml").write_text("checks:\n" + small_check("too-fast") + small_check("ok"))
    out = clustercheck_here("run", "-k", "ok", "-p", "no:randomly", "-v", "s.yaml", "--thresholds", "th", "--out", "o",
                           cwd=tree)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "1 passed, 1 deselected" in out.stdout
    # an option only pytest (or a plugin) knows, its value after a space: a clear error, not "no suite named"
    out = cc("run", "--junitxml", "j.xml", "--thresholds", "th", cwd=tree)
    assert out.returncode == 4 and out.stdout == ""
    assert out.stderr.startswith("clustercheck: error: --junitxml j.xml: write --junitxml=j.xml ")


@pytest.mark.parametrize("length", [252, 300])
def test_a_suite_name_too_long_for_the_file_system_is_one_line(length: int) -> None:
    """Found by tests/test_fuzz_cli.py: a name longer than a file name may be (255 bytes here) was an
    OSError traceback. 252 characters pass the first look and fail only as the shipped `<name>.yaml`."""
    out = cc("run", "a" * length)
    assert out.returncode == 4, out.stderr
    [line] = out.stderr.strip().splitlines()
    assert line.startswith("clustercheck: error: no suite named 'aaa") and "...aaa" in line, line
    assert line.endswith("': File name too long") and len(line) < 120, line  # the name quoted briefly


class _Left(Exception):
    """os._exit, caught: the code the process would have ended with."""


def test_the_command_ends_at_once_and_says_everything_first(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """`clustercheck` (cli.entry) skips the interpreter's teardown (seconds at the end of every run where
    main() loaded torch, measuring nothing; and an exit code CPython may replace by SIGINT: see
    test_process_signals.py), after flushing what main() printed. The code is main()'s, or argparse's."""
    from clustercheck import cli

    def left(code: int) -> None:
        raise _Left(code)

    monkeypatch.setattr(cli, "main", lambda: print("last line, unflushed", end="") or 3)
    monkeypatch.setattr(cli.os, "_exit", left)
    with pytest.raises(_Left) as ended:
        cli.entry()
    assert ended.value.args == (3,)
    assert capsys.readouterr().out == "last line, unflushed"

    def usage() -> int:
        raise SystemExit(4)

    monkeypatch.setattr(cli, "main", usage)
    with pytest.raises(_Left) as ended:
        cli.entry()
    assert ended.value.args == (4,)


@pytest.mark.parametrize("args", [
    ("run", "cpu-smoke", "--thresholds", ""), ("run", "cpu-smoke", "--out", ""), ("run", "cpu-smoke", "--sign", ""),
    ("run", "cpu-smoke", "--topology", ""), ("platforms", "--thresholds", ""), ("probe", "env", "--thresholds", ""),
    ("probe", "env", "--input", ""), ("report", ""), ("report", "r", "--out", ""), ("compare", "", "r"),
    ("compare", "r", ""), ("compare", "r", "--out", ""), ("sign", "", "--key", "k"), ("sign", "r", "--key", ""),
    ("verify", "", "--key", "k"), ("verify", "r", "--key", ""),
    ("k8s", "render", "cpu-smoke", "--nodes", "2", "--image", "i", "--results-claim", ""),
])
def test_an_empty_path_is_refused_never_read_as_the_working_directory(
        args: tuple[str, ...], capsys: pytest.CaptureFixture[str]) -> None:
    """`Path('')` is `.`: `--thresholds ''` searched the working directory for profiles, `compare r ''`
    compared against OUT/latest. Every path flag (and positional) of every subcommand refuses it."""
    from clustercheck.cli import main

    with pytest.raises(SystemExit) as exited:
        main(list(args))
    err = capsys.readouterr().err
    assert exited.value.code == 4
    assert len(err.strip().splitlines()) == 1 and "needs a value, got an empty one" in err, err


def test_no_subcommand_declares_a_bare_path_type() -> None:
    """refuse_empty_paths reaches every parser: a new `type=Path` option gets the check without asking."""
    import argparse

    from clustercheck.cli import _parser

    def actions(parser: argparse.ArgumentParser) -> list[argparse.Action]:
        out = list(parser._actions)
        for a in parser._actions:
            if isinstance(a, argparse._SubParsersAction):
                out += [x for sub in a.choices.values() for x in actions(sub)]
        return out

    assert not [a.dest for a in actions(_parser()) if a.type is Path]


def test_no_conftest_above_the_rootdir_is_imported(tmp_path: Path) -> None:
    """isolation's `-c /dev/null` made pytest's confcutdir /dev: every conftest.py from the working directory
    up to / (a world-writable /tmp/conftest.py) was imported into the run; plain pytest stops at its rootdir."""
    here = tmp_path / "above" / "here"
    (here / "th").mkdir(parents=True)
    (here / "th" / "cpu.yaml").write_text(CPU_THRESHOLDS)
    (here / "s.yaml").write_text("checks:\n" + small_check("ok"))
    for where in (tmp_path / "above", here):
        (where / "conftest.py").write_text(f"open({str(tmp_path / ('imported-' + where.name))!r}, 'w').close()\n")
    out = cc("run", "s.yaml", "--thresholds", "th", "--out", "o", "--co", cwd=here)
    assert out.returncode == 0, out.stdout + out.stderr
    assert (tmp_path / "imported-here").exists()  # the rootdir's own conftest.py still is (hooks, docs/design.md)
    assert not (tmp_path / "imported-above").exists()
    (tmp_path / "imported-here").unlink()
    out = cc("run", "s.yaml", "--thresholds", "th", "--out", "o", "--co", f"--rootdir={tmp_path / 'above'}", cwd=here)
    assert out.returncode == 0 and (tmp_path / "imported-above").exists() and (tmp_path / "imported-here").exists()


def test_a_plugin_named_by_its_entry_point_has_its_options_known(tree: Path) -> None:
    """`-p xdist` names pytest-xdist by its entry point (its module is xdist.plugin): the pre-check imported
    the name as a module and refused --dist as an option of a plugin not loaded, 'add -p xdist'."""
    pytest.importorskip("xdist")
    (tree / "s.yaml").write_text("checks:\n" + small_check("ok"))
    out = cc("run", "s.yaml", "--thresholds", "th", "--out", "o", "-p", "xdist", "--dist=loadfile", "--co", cwd=tree)
    assert out.returncode == 0, out.stderr
    assert "1 test collected" in out.stdout


@pytest.mark.parametrize("junit", ["s.yaml/x.xml", "/proc/nope/x.xml", "th"])
def test_a_junitxml_path_that_cannot_be_written_is_one_line_before_anything_runs(tree: Path, junit: str) -> None:
    """pytest found out after measuring, in a 70-line traceback (exit 3), and the record had no end line."""
    (tree / "s.yaml").write_text("checks:\n" + small_check("ok"))
    out = cc("run", "s.yaml", "--thresholds", "th", "--out", "o", f"--junitxml={junit}", cwd=tree)
    assert out.returncode == 4, out.stdout + out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"clustercheck: error: --junitxml={junit}: the JUnit report "
                                                   "cannot be written there ("), lines
    assert not (tree / "o").exists()


@pytest.mark.parametrize("option", ["--lf", "--sw", "--stepwise-skip", "--cache-clear", "--ff"])
def test_pytests_cache_options_are_refused_in_one_line_naming_why(tree: Path, option: str) -> None:
    """They passed the pre-check (pytest knows them) and then met pytest's usage screen: isolation turns the
    cacheprovider off."""
    (tree / "s.yaml").write_text("checks:\n" + small_check("ok"))
    out = cc("run", "s.yaml", "--thresholds", "th", "--out", "o", option, cwd=tree)
    assert out.returncode == 4
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"clustercheck: error: {option}: clustercheck run keeps no pytest "
                                                   "cache"), lines


@pytest.mark.parametrize(("args", "said"), [
    (("run", "s.yaml", "--thresholds", "th", "--out", "o", "--duration", "-5s"), "--duration '-5s': expected a time"),
    (("compare", "o/latest", "--tolerance", "-5%"), "tolerance must be >= 0, got '-5%'"),
])
def test_a_negative_value_is_named_not_read_as_an_option(tree: Path, args: tuple[str, ...], said: str) -> None:
    """argparse read '-5s' as an option and said 'expected one argument' for --duration."""
    (tree / "s.yaml").write_text("checks:\n" + small_check("ok"))
    out = cc(*args, cwd=tree)
    assert out.returncode == 4
    assert said in out.stderr and "expected one argument" not in out.stderr, out.stderr


@pytest.mark.parametrize("extra", [("nvlink",), ("--platform", "cpu")])
def test_probe_list_refuses_what_it_would_ignore(extra: tuple[str, ...]) -> None:
    """`probe --list nvlink` listed every probe and said nothing of 'nvlink', exit 0."""
    out = cc("probe", "--list", *extra)
    assert out.returncode == 4 and out.stdout == ""
    assert out.stderr.startswith("clustercheck: error: probe --list takes no ") and len(out.stderr.splitlines()) == 1
    assert cc("probe", "--list").returncode == 0


@pytest.mark.parametrize(("option", "addopts"), [("--fixtures", ""), ("--fixtures-per-test", ""),
                                                 ("", "--fixtures")])
def test_fixtures_lists_and_measures_nothing_like_collect_only(tree: Path, option: str, addopts: str) -> None:
    """pytest collects for --fixtures: the session started ranks, wrote an INCOMPLETE record, moved `latest`
    and exited 0."""
    import os

    (tree / "s.yaml").write_text("checks:\n" + small_check("ok"))
    env = {**os.environ, "PYTEST_ADDOPTS": addopts}
    out = subprocess.run([sys.executable, "-m", "clustercheck", "run", "s.yaml", "--thresholds", "th", "--out", "o",
                          *filter(None, [option])], capture_output=True, text=True, cwd=tree, timeout=300, env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    assert not (tree / "o").exists()


@pytest.mark.parametrize("option", ["--co", "--markers"])
def test_a_listing_says_that_nothing_was_measured(tree: Path, option: str) -> None:
    """`run --co` exited 0 with nothing judged and not a word of it: a gate that passes it clears nothing."""
    (tree / "s.yaml").write_text("checks:\n" + small_check("ok"))
    out = cc("run", "s.yaml", "--thresholds", "th", "--out", "o", option, cwd=tree)
    assert out.returncode == 0, out.stderr
    named = {"--co": "--collect-only"}.get(option, option)  # as pytest parsed it, however spelled
    assert out.stderr.strip().splitlines() == [f"clustercheck: {named}: listed only; nothing was measured, no "
                                               "record was written and no node is cleared (exit 0)"]
    assert not (tree / "o").exists()
