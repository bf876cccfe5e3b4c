"""One exit-code table (clustercheck.exitcodes) for every subcommand and for plain pytest runs of suites:
each row is driven here through the real command. INCOMPLETE (2) by SIGINT/SIGTERM is driven in
tests/test_incomplete.py and, for `report` on a killed run, tests/test_faults.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from clustercheck.exitcodes import MEANING, Exit, for_verdict
from helpers import small_check, write_suite
from evidence import TOOLS

REPO = Path(__file__).resolve().parent.parent
RUN = ("--thresholds", "thresholds", "--cc-out", "out")


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "clustercheck", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=300)


def test_every_run_verdict_has_its_row():
    assert [for_verdict(v) for v in ("PASS", "FAIL", "INCOMPLETE", "ERROR", "SKIPPED")] == [0, 1, 2, 3, 5]


def test_readme_and_help_state_the_table():
    readme = (REPO / "README.md").read_text()
    help_text = cli("--help").stdout
    for code, meaning in MEANING.items():
        assert f"| {int(code)} | {meaning} |" in readme, meaning
        assert f"  {int(code)}  {meaning}" in help_text, meaning


def test_passed_0_failed_1_and_report_repeats_the_runs_code(project: pytest.Pytester):
    write_suite(project, "checks:\n" + small_check("ok"))
    assert project.runpytest("suites/s.yaml", *RUN).ret == Exit.PASSED
    assert cli("report", str(project.path / "out" / "latest")).returncode == Exit.PASSED
    write_suite(project, "checks:\n" + small_check("ok") + small_check("too-fast"))
    assert project.runpytest("suites/s.yaml", *RUN).ret == Exit.FAILED
    assert cli("report", str(project.path / "out" / "latest")).returncode == Exit.FAILED


def test_a_harness_error_with_no_failure_is_3_and_a_failure_outranks_it(project: pytest.Pytester):
    write_suite(project, "checks:\n" + small_check("ok") + small_check("too-fast"))
    res = project.runpytest("suites/s.yaml", *RUN, "--cc-inject-fault", "ok:raise@1")
    res.assert_outcomes(failed=1, errors=1)
    assert res.ret == Exit.FAILED
    write_suite(project, "checks:\n" + small_check("ok"))
    res = project.runpytest("suites/s.yaml", *RUN, "--cc-inject-fault", "ok:raise@1")
    res.assert_outcomes(errors=1)
    assert res.ret == Exit.ERROR


def test_every_item_skipped_is_5_nothing_judged(project: pytest.Pytester):
    write_suite(project, "checks:\n  - id: h2d\n    measure: host_device\n")
    res = project.runpytest("suites/s.yaml", *RUN)
    res.assert_outcomes(skipped=1)  # a check that does not apply here needs no threshold either
    assert res.ret == Exit.NOTHING
    assert json.loads((project.path / "out" / "latest" / "results.json").read_text())["verdict"] == "SKIPPED"


def test_a_bad_suite_is_4_under_pytest_too_and_nothing_starts(project: pytest.Pytester):
    write_suite(project, "checks:\n  - id: ok\n    measure: all_reduce\n    scpoe: node\n")
    write_suite(project, "checks:\n" + small_check("ok"), name="good.yaml")
    res = project.runpytest("suites/s.yaml", "suites/good.yaml", *RUN)
    assert res.ret == Exit.BAD_INPUT
    res.stdout.fnmatch_lines(["*s.yaml:4: checks[[]0[]].scpoe: unknown key*"])
    assert not (project.path / "out").exists()  # the good suite did not start a run


@pytest.mark.parametrize("args", [("run", "--ranks", "x"), ("compare",), ("frob",), ("report",),
                                  ("platforms", "show", "no-such-profile"), ("probe", "nope")])
def test_usage_and_bad_input_are_4_on_every_subcommand(args):
    out = cli(*args)
    assert out.returncode == Exit.BAD_INPUT, out.stderr
    assert "Traceback" not in out.stderr


def test_compare_regression_1_nothing_compared_5_bad_baseline_4(project: pytest.Pytester):
    write_suite(project, "checks:\n" + small_check("ok"))
    project.runpytest("suites/s.yaml", *RUN)
    first = (project.path / "out" / "latest").resolve()
    assert cli("compare", str(first), str(first), "--out", str(project.path / "out")).returncode == Exit.BAD_INPUT  # itself
    write_suite(project, "checks:\n" + small_check("too-fast"))  # another item: nothing in common with the first
    project.runpytest("suites/s.yaml", *RUN)
    second = (project.path / "out" / "latest").resolve()
    out = cli("compare", str(first), str(second), "--out", str(project.path / "out"))
    assert out.returncode == Exit.FAILED, out.stdout + out.stderr  # too-fast fails: never a pass, nor nothing
    write_suite(project, "checks:\n" + small_check("ok2", limits="ok"))  # the suite's passed item gone, another
    project.runpytest("suites/s.yaml", *RUN)
    third = (project.path / "out" / "latest").resolve()
    out = cli("compare", str(first), str(third), "--out", str(project.path / "out"))
    assert out.returncode == Exit.ERROR, out.stdout + out.stderr  # s::ok passed there, not measured now: never 5
    write_suite(project, "checks:\n" + small_check("ok2", limits="ok"), name="t.yaml")  # another suite alone
    project.runpytest("suites/t.yaml", *RUN)
    fourth = (project.path / "out" / "latest").resolve()
    out = cli("compare", str(first), str(fourth), "--out", str(project.path / "out"))
    # nothing in common, but s::ok passed there in a suite this run did not run: not measured now, never 5
    # (nothing compared, exit 5, where nothing that passed is missing: test_compare_rules)
    assert out.returncode == Exit.ERROR, out.stdout + out.stderr
    assert "NOT MEASURED NOW  s::ok[" in out.stdout, out.stdout
    (project.path / "bad.jsonl").write_text("not json\n")
    assert cli("compare", str(project.path / "bad.jsonl"), str(first)).returncode == Exit.BAD_INPUT
    res = project.runpytest("suites/s.yaml", *RUN, "--compare", str(project.path / "bad.jsonl"))
    assert res.ret == Exit.BAD_INPUT


def test_probe_rows_passed_failed_skipped_bad_input():
    assert cli("probe", "nvlink", "--input", str(TOOLS / "nvlink-status" / "a100-sxm4-gpu7-nvlink-s-azure.txt")
               ).returncode == Exit.PASSED
    assert cli("probe", "nvlink", "--input", str(TOOLS / "nvlink-status" / "a100-sxm4-gpu6-all-links-inactive-azure.txt")
               ).returncode == Exit.FAILED
    numa_without_nic = TOOLS / "nvidia-smi-topo" / "3x-rtxa6000-nv4-pair-plus-node-ansi-escapes.txt"
    assert cli("probe", "numa", "--input", str(numa_without_nic)).returncode == Exit.NOTHING
    assert cli("probe", "topo", "--input", str(TOOLS / "gdscheck")).returncode == Exit.BAD_INPUT


def test_a_bug_in_a_subcommand_is_a_harness_error_3_never_1_which_blames_the_hardware(monkeypatch, capsys):
    import dataclasses

    from clustercheck import cli
    from clustercheck.probes import get, topo

    def broken(*_: object) -> None:
        raise ZeroDivisionError("division by zero")

    # a judge with a bug, as an unforeseen capture could hit one
    monkeypatch.setattr(topo, "PROBE", dataclasses.replace(get("topo"), judge=broken))
    capture = next(p for p in (TOOLS / "nvidia-smi-topo").iterdir() if p.suffix == ".txt")
    assert cli.main(["probe", "topo", "--input", str(capture)]) == Exit.ERROR  # a traceback and exit 1 before
    err = capsys.readouterr().err
    assert "Traceback" in err and err.splitlines()[-1].startswith(
        "clustercheck: internal error: ZeroDivisionError: division by zero (a bug in clustercheck ")
