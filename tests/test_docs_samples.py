"""README's and the docs' samples against what the commands print: the commands block's flags exist, the
nvlink sample is the probe's real output, `probe all` lists every probe, the exit codes the docs state are
the codes the commands give. Fast: no suite runs (the one-machine hosts example runs in test_first_hour)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
README = (REPO / "README.md").read_text()


def cc(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "clustercheck", *args], capture_output=True, text=True, cwd=REPO,
                          timeout=120)


def block_after(text: str, marker: str) -> str:
    """The first fenced block after `marker`."""
    start = text.index("```", text.index(marker))
    start = text.index("\n", start) + 1
    return text[start:text.index("```", start)]


def commands() -> list[str]:
    return [line for line in block_after(README, "## Commands").splitlines() if line.startswith("clustercheck ")]


@pytest.mark.parametrize("line", commands(), ids=lambda line: " ".join(line.split()[:2]))
def test_every_flag_in_the_commands_block_is_one_the_command_takes(line: str) -> None:
    words = line.split("#")[0].split()
    sub = words[1]
    if len(words) > 2 and words[2].isalpha() and cc(sub, words[2], "--help").returncode == 0:
        sub = f"{sub} {words[2]}"  # a command of its own (k8s render): its flags are in its own help
    helped = cc(*sub.split(), "--help")
    assert helped.returncode == 0, helped.stderr
    own = set(re.findall(r"--[a-z][a-z-]*", helped.stdout))
    flags = set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", line.split("#")[0]))
    pytest_side = {"--junitxml"}  # given to pytest, as the line says
    assert flags - own - pytest_side == set(), f"{line}: not in `clustercheck {sub} --help`"


def test_the_nvlink_sample_is_what_the_probe_prints() -> None:
    block = block_after(README, "e.g. evidence a vendor sent:")
    command, *expected = block.strip().splitlines()
    args = command.removeprefix("$ clustercheck ").split()
    out = cc(*args)
    assert out.returncode == 1
    assert out.stdout.splitlines() == expected


def test_the_probe_all_sample_lists_every_probe_in_order() -> None:
    from clustercheck.probes import _MODULES

    PROBES = list(_MODULES)
    sample = block_after(README, "`clustercheck probe all` runs every probe on this machine").splitlines()
    named = [line.split()[1] for line in sample if line.split() and line.split()[0] in ("PASSED", "SKIPPED", "FAILED",
                                                                                      "ERROR")]
    out = cc("probe", "all")
    shown = [line.split()[1] for line in out.stdout.splitlines()
             if line.split() and line.split()[0] in ("PASSED", "SKIPPED", "FAILED", "ERROR")]
    assert named == shown == PROBES
    counts = re.fullmatch(r"(\d+) passed; (\d+) failed; (\d+) not judged; (\d+) skipped; (\d+) error", sample[-1])
    assert counts and sum(map(int, counts.groups())) == len(PROBES)
    assert re.fullmatch(r"\d+ passed; \d+ failed; \d+ not judged; \d+ skipped; \d+ error", out.stdout.splitlines()[-1])


def test_run_help_names_every_default_suite() -> None:
    helped = re.sub(r"-\s+", "-", " ".join(cc("run", "--help").stdout.split()))  # argparse wraps at hyphens
    for suite in ("cpu-smoke", "gpu-smoke", "quick-gate-nvlink8", "quick-gate-mi300x"):
        assert suite in helped


def test_the_compare_sample_has_the_shape_compare_prints() -> None:
    sample = block_after(README, "### Comparing runs").strip().splitlines()
    assert sample[0].startswith("$ clustercheck compare ")
    assert sample[1].startswith("baseline ") and sample[2].startswith("run      ")
    for row in sample[3:-1]:
        assert row.split()[0] in ("REGRESSION", "improved", "same", "noise", "latency", "FAILED", "not"), row
    assert re.fullmatch(r"\d+ metric\(s\) compared at tolerance \d+%: \d+ regression\(s\), \d+ improvement\(s\)"
                        r"(, \d+ [a-z' ]+)*, \d+ not compared", sample[-1])


@pytest.mark.parametrize(("doc", "claim", "args", "code"), [
    ("docs/probes.md", "**4** bad input", ("probe", "ecc", "--input", "README.md"), 4),
    ("docs/probe-rules.md", "| (bad input) | 4 |", ("probe", "ecc", "--input", "README.md"), 4),
    ("docs/probes.md", "**5** skipped", ("probe", "gds"), 5),
])
def test_the_exit_codes_the_docs_state(doc: str, claim: str, args: tuple[str, ...], code: int) -> None:
    from clustercheck.probes import gds

    assert claim in (REPO / doc).read_text()
    if args[:2] == ("probe", "gds") and not isinstance(gds.collect(), gds.Absent):  # (d89d34f: no ProbeSkip there)
        pytest.skip("GPUDirect Storage is installed here: the probe does not skip")
    assert cc(*args).returncode == code


def test_run_record_doc_says_what_compare_exits_on_an_unknown_schema() -> None:
    text = " ".join((REPO / "docs" / "run-record.md").read_text().split())
    assert "whose schema it does not know or that has none, in one line naming the file and exit 4" in text
