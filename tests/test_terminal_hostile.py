"""Hostile text on the terminal: a rank's exception, a tool's output, scontrol's answer, a profile's
`source:` reach the run's summary and pytest's FAILURES / ERRORS sections escaped (errors.escape: an
OSC 52 clipboard write or ESC[1A ESC[2K, which would hide a FAIL line, are shown as backslash text),
while the record keeps them as they were said."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import clustercheck
from clustercheck.errors import escape
from clustercheck.report.terminal import run_summary
from helpers import cpu_profile, small_check, write_suite

# an OSC 52 clipboard write, then cursor up and erase line (hides the line above), then a green PASS
HOSTILE = "tool said: \x1b]52;c;cHduZWQ=\x07\x1b[1A\x1b[2K\x1b[32mPASS\x1b[0m \x00nul \x9b2J"
SHOWN = escape(HOSTILE)


def test_escape_is_idempotent_on_what_it_wrote() -> None:
    assert "\x1b" not in SHOWN and escape(SHOWN) == SHOWN


def test_run_summary_escapes_reasons_drains_and_notes(tmp_path: Path) -> None:
    results = [
        {"name": "rank-error[n1]", "outcome": "error", "message": f"rank 0 (n1) raised RuntimeError: {HOSTILE}\nmore"},
        {"name": "nic[n2]", "outcome": "failed", "notes": [f"n2: {HOSTILE}"], "verdicts": [
            {"subject": f"NIC mlx5_0{HOSTILE}", "metric": "rate", "measured": 1.0, "unit": "Gb/s", "passed": False,
             "limit": ">= 2", "op": ">=", "threshold": 2.0}]},
    ]
    exclusion = {"hostlist": "n2", "reasons": {"n2": f"nic rate {HOSTILE}"},
                 "drain": [{"rc": 1, "output": f"scontrol: error: {HOSTILE}\nsecond", "command":
                            ["scontrol", "update", "NodeName=n2", "State=DRAIN", f"Reason={HOSTILE}"]},
                           {"rc": None, "output": HOSTILE, "command": ["scontrol"]}],
                 "taint": [{"rc": 2, "output": HOSTILE, "command": ["kubectl"]}]}
    lines = [line for line, _ in run_summary(results, exclusion, 2, f"INCOMPLETE: {HOSTILE}\n  n3 never joined",  # type: ignore[arg-type]
                                             False, tmp_path, False)]
    text = "\n".join(lines)
    assert not any(c in text for c in "\x1b\x07\x00\x9b\r"), text
    assert "tool said: \\x1b]52;c;cHduZWQ=\\x07\\x1b[1A\\x1b[2K" in text
    for said in ("ERROR: rank 0 (n1) raised RuntimeError: tool said:", "  n2: nic rate tool said:",
                 "  drain failed (exit 1: scontrol: error: tool said:", "  taint failed (tool said:",
                 "note: n2: tool said:", "NIC mlx5_0tool said:", "INCOMPLETE: tool said:"):
        assert " ".join(said.split()) in " ".join(text.split()), (said, text)  # a reason wraps
    assert "\n  n3 never joined" in text  # the incomplete lines stay lines


PLUGIN = '''\
from clustercheck.kinds.base import Kind
from clustercheck.kinds.subjects import per_subject


def _parse(f):
    f.done()
    return {}


def measure(ctx, params):
    if ctx.rank == 0:
        raise RuntimeError(%r)
    return {"subjects": {"rank1": {"answer": {"median": 8, "min": 8, "max": 8}}}}


KIND = Kind("hostile_kind", ("node",), {"answer": "count"}, _parse, "rank 0 raises a tool's hostile words",
            "hostilekind:measure", per_subject({"answer": "count"}))
''' % HOSTILE


def _run_hostile_kind(tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """`clustercheck run` of a kind whose rank 0 raises HOSTILE, in a process of its own (a kind from an
    entry point), its stdout UTF-8 (pytest would write an unencodable line as backslash text itself)."""
    (tmp_path / "hostilekind.py").write_text(PLUGIN)
    info = tmp_path / "hostilekind-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: hostilekind\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[clustercheck.kinds]\nentry = hostilekind:KIND\n")
    (tmp_path / "thresholds").mkdir()
    (tmp_path / "thresholds" / "cpu.yaml").write_text(cpu_profile(
        '  hostile:\n    answer: {limit: ">= 7", unit: count, source: "rank 1 answers 8"}\n'))
    (tmp_path / "s.yaml").write_text("checks:\n  - id: hostile\n    measure: hostile_kind\n")
    here = Path(clustercheck.__file__).parents[1]  # this checkout's clustercheck, whatever is installed
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{here}", "PYTHONIOENCODING": "utf-8"}
    res = subprocess.run([sys.executable, "-m", "clustercheck", "run", "s.yaml", "--thresholds", "thresholds",
                          "--out", "out"], cwd=tmp_path, env=env, text=True, capture_output=True, timeout=300)
    assert res.returncode == 3, res.stdout + res.stderr
    return res


@pytest.mark.pool
def test_a_ranks_hostile_exception_reaches_the_summary_escaped(tmp_path: Path) -> None:
    res = _run_hostile_kind(tmp_path)
    summary = res.stdout.partition(" clustercheck ===")[2].partition("short test summary")[0]
    assert "ERROR:" in summary and "\x1b" not in summary and "\x07" not in summary, summary
    assert "\\x1b]52;c;cHduZWQ=\\x07\\x1b[1A\\x1b[2K" in summary.replace("\n", "").replace(" ", ""), summary
    message = json.loads((tmp_path / "out" / "latest" / "results.json").read_text())["results"][0]["message"]
    assert HOSTILE in message  # the record keeps what the rank said


@pytest.mark.pool
def test_a_ranks_hostile_exception_reaches_errors_and_short_summary_escaped(tmp_path: Path) -> None:
    res = _run_hostile_kind(tmp_path)
    errors = res.stdout.partition("= ERRORS =")[2].partition(" clustercheck ===")[0]
    assert "raised RuntimeError" in errors and SHOWN in errors, errors
    assert "\n--- rank 0 last output" in errors  # each line escaped, the lines kept
    assert "\x1b" not in res.stdout and "\x07" not in res.stdout, res.stdout


def test_a_profiles_hostile_source_reaches_failures_escaped(project: pytest.Pytester) -> None:
    (project.path / "thresholds" / "cpu.yaml").write_text(cpu_profile(
        f'  too-fast:\n    busbw: {{limit: ">= 1000000", unit: GB/s, source: {json.dumps(HOSTILE)}}}\n'))
    write_suite(project, "checks:\n" + small_check("too-fast"))
    res = project.runpytest("suites/s.yaml", "--thresholds", "thresholds", "--cc-out", "out", "-p",
                            "no:cacheprovider", "-rA")
    assert res.ret == 1
    out = res.stdout.str()
    assert "\x1b" not in out and "\x07" not in out, out
    failure = res.stdout.str().partition("= FAILURES =")[2].partition(" clustercheck ===")[0]
    assert "busbw" in failure and SHOWN in failure, failure
    message = json.loads((project.path / "out" / "latest" / "results.json").read_text())["results"][0]["message"]
    assert HOSTILE in message  # the record keeps what the profile said
