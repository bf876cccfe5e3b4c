"""Bad input to `--launcher slurm` and `--hosts` is one line and exit 4, never a traceback: a malformed or
odd SLURM_JOB_NODELIST, no SLURM_JOB_ID, and hosts named twice in another spelling."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SUITE = "checks:\n  - id: nccl-env\n    measure: probe\n    params: {probe: env}\n"


def _run(tmp_path: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "s.yaml").write_text(SUITE)
    (tmp_path / "bin").mkdir(exist_ok=True)
    (tmp_path / "bin" / "srun").write_text("#!/bin/sh\nexit 1\n")  # never reached: the input is refused first
    (tmp_path / "bin" / "srun").chmod(0o755)
    base = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    base["PATH"] = f"{tmp_path / 'bin'}:{base.get('PATH', '/usr/bin:/bin')}"
    cmd = [sys.executable, "-m", "clustercheck", "run", "s.yaml", "--out", "o", "--store-addr", "127.0.0.1", *args]
    return subprocess.run(cmd, cwd=tmp_path, env={**base, **env}, capture_output=True, text=True, timeout=120)


def _one_line(res: subprocess.CompletedProcess[str]) -> str:
    assert res.returncode == 4, res.stdout[-2000:] + res.stderr[-2000:]
    assert "Traceback" not in res.stdout + res.stderr and "INTERNALERROR" not in res.stdout + res.stderr, res.stderr
    (line,) = [ln for ln in res.stderr.splitlines() if ln.startswith("ERROR:")]
    return line


@pytest.mark.parametrize(("nodelist", "said"), [
    ("ccnode[1-", "ERROR: SLURM_JOB_NODELIST 'ccnode[1-': "),  # was an INTERNALERROR traceback, exit 3
    ("ccnode1, ", "ERROR: SLURM_JOB_NODELIST 'ccnode1, ': ' ' is no host name"),
    ("ccnode[1-2],ccnode2", "ERROR: SLURM_JOB_NODELIST names ccnode2 more than once: one agent per host"),
    (",", "ERROR: SLURM_JOB_NODELIST ',' names no host"),  # was "--launcher hosts needs --hosts"
    (",,", "ERROR: SLURM_JOB_NODELIST ',,' names no host"),
])
def test_a_bad_slurm_job_nodelist_is_one_line(tmp_path: Path, nodelist: str, said: str) -> None:
    line = _one_line(_run(tmp_path, {"SLURM_JOB_NODELIST": nodelist, "SLURM_JOB_ID": "7"}, "--launcher", "slurm"))
    assert line.startswith(said), line


def test_a_nodelist_without_a_job_is_refused(tmp_path: Path) -> None:
    line = _one_line(_run(tmp_path, {"SLURM_JOB_NODELIST": "ccnode[1-2]"}, "--launcher", "slurm"))
    assert line == "ERROR: --launcher slurm runs inside an allocation (salloc or sbatch): SLURM_JOB_ID is not set"


@pytest.mark.parametrize(("hosts", "said"), [
    ("n1,N1", "ERROR: --hosts names n1 (as n1 and N1) more than once: one agent per host"),
    ("n1.,n1", "ERROR: --hosts names n1. (as n1. and n1) more than once: one agent per host"),
])
def test_one_host_in_two_spellings_is_named_twice(tmp_path: Path, hosts: str, said: str) -> None:
    """Host names ignore case and a trailing dot: n1 and N1 (or n1.) would get two agents on one host."""
    line = _one_line(_run(tmp_path, {}, "--launcher", "hosts", f"--hosts={hosts}", "--host-command", "{python}"))
    assert line.startswith(said), line


def test_hosts_that_expand_to_no_host_are_named_as_given(tmp_path: Path) -> None:
    line = _one_line(_run(tmp_path, {}, "--launcher", "hosts", "--hosts=,", "--host-command", "{python}"))
    assert line == "ERROR: --hosts ',' names no host", line


@pytest.mark.parametrize("nodes", [",", ",,"])
def test_resume_of_a_hostlist_that_names_no_host_is_one_line(tmp_path: Path, nodes: str) -> None:
    """`clustercheck resume ','` printed nothing and exited 0: the list expanded to nothing, so no node was
    wanted and none was said. A malformed or empty HOSTLIST is one line, exit 4 (docs/multi-node.md)."""
    (tmp_path / "scontrol").write_text("#!/bin/sh\necho 'NodeName=n1 State=IDLE+DRAIN Reason=clustercheck: x'\n")
    (tmp_path / "scontrol").chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ.get('PATH', '/usr/bin:/bin')}"}
    res = subprocess.run([sys.executable, "-m", "clustercheck", "resume", nodes, "--dry-run"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 4 and res.stdout == "", (res.returncode, res.stdout, res.stderr)
    assert res.stderr.splitlines() == [f"clustercheck resume: error: argument HOSTLIST: {nodes!r} names no host "
                                       "(see clustercheck resume --help)"], res.stderr
