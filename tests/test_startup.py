"""`clustercheck run`'s start-up: the first rank pool starts before pytest (run/prestart.py) and is the
pool the checks run on; `--timings` says where the seconds went; input refused before pytest starts
leaves no rank and no directory behind. Real processes: the CLI as a user runs it, gloo ranks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from clustercheck.exitcodes import Exit

REPO = Path(__file__).resolve().parent.parent


def cli(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CLUSTERCHECK_", "CC_"))}
    return subprocess.run([sys.executable, "-m", "clustercheck", "run", *args], cwd=tmp, env=env,
                          capture_output=True, text=True, timeout=300)


def processes_naming(text: str) -> list[int]:
    """Live processes whose environment or command line holds `text` (a rank carries its log directory)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            seen = (entry / "environ").read_bytes() + (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if text.encode() in seen:
            found.append(int(entry.name))
    return found


@pytest.mark.pool
def test_the_prestarted_pool_runs_the_checks_and_timings_say_where_the_seconds_went(tmp_path: Path) -> None:
    res = cli(tmp_path, "cpu-smoke", "--out", "out", "--timings")
    assert res.returncode == Exit.PASSED, res.stdout[-3000:] + res.stderr[-3000:]
    timings = res.stdout[res.stdout.index("clustercheck timings"):]
    for part in ("interpreter and clustercheck's imports", "suites and profiles checked", "pytest start-up and plugins",
                 "collection", "checks", "reports", "pool 1 started (2 rank(s)); slowest rank:", "import_torch",
                 "check allreduce-sweep", "in all"):
        assert part in timings, timings
    record = [json.loads(ln) for ln in (tmp_path / "out" / "latest" / "run.jsonl").read_text().splitlines()]
    (end,) = [e for e in record if e["type"] == "end"]
    assert end["pool_starts"] == 1  # the pool started before pytest is the one every check ran on
    # every check that ran (the across-nodes one says it needs two nodes and starts nothing)
    assert {e["pool"]["number"] for e in record if e["type"] == "result" and e["outcome"] != "skipped"} == {1}
    assert sorted(p.name for p in (tmp_path / "out" / "latest" / "logs").glob("pool1-rank*.log")) == \
        ["pool1-rank0.log", "pool1-rank1.log"]  # its logs moved into the run directory
    assert not list((tmp_path / "out").glob(".starting-*"))


def test_a_suite_refused_before_pytest_leaves_no_rank_and_no_directory(tmp_path: Path) -> None:
    """The first pool's ranks start at once, but a suite that does not read ends them with the run: no
    process carrying the run's directory lives on, and no --out directory is left behind."""
    (tmp_path / "bad.yaml").write_text("checks:\n  - id: x\n    measure: all_reducee\n")
    out = tmp_path / "deep" / "out"
    res = cli(tmp_path, "bad.yaml", "--out", str(out))
    assert res.returncode == Exit.BAD_INPUT and res.stderr.startswith("clustercheck: error: bad.yaml:3:"), res.stderr
    assert "Traceback" not in res.stdout + res.stderr
    assert processes_naming(str(out)) == []
    assert not (tmp_path / "deep").exists()
