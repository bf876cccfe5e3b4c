"""A step that hangs at launch: ccnode3's slurmd is stopped (SIGSTOP), so srun cannot start the step's task
there and, after its message timeout, ends the step. The refusal names the node the step did not start on,
with srun's words, and gives no advice about the controller's address (no agent ever ran to need it).

srun gives up on a task launch MessageTimeout + 10 s after it sent it (20 s with the cluster's default 10):
this run's own Slurm commands read a copy of the cluster's slurm.conf with MessageTimeout=4 (14 s); the
daemons keep theirs. Every other message of the run is answered in well under a second."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from cluster_fixture import slurm  # noqa: F401  (a fixture; tests/conftest.py keeps the name conftest)
from test_slurm import LIMITS, SUITE

pytestmark = [pytest.mark.pool, pytest.mark.slurm]


def test_a_step_that_does_not_start_on_a_node_names_it(slurm: dict, tmp_path: Path) -> None:
    (tmp_path / "th").mkdir()
    (tmp_path / "th" / "cpu.yaml").write_text(LIMITS)
    (tmp_path / "s.yaml").write_text(SUITE)
    home = Path(slurm["CC_SLURM_HOME"])
    slurmd = int((home / "run" / "slurmd-ccnode3.pid").read_text())
    conf = tmp_path / "conf"  # the client's copy (module docstring); topology.conf is read beside it
    conf.mkdir()
    (conf / "topology.conf").write_text((Path(slurm["SLURM_CONF"]).parent / "topology.conf").read_text())
    (conf / "slurm.conf").write_text(Path(slurm["SLURM_CONF"]).read_text() + "MessageTimeout=4\n")
    env = {**slurm, "SLURM_CONF": str(conf / "slurm.conf")}
    cmd = ["salloc", "-N3", sys.executable, "-m", "clustercheck", "run", "s.yaml", "--thresholds", "th", "--out",
           "out", "--launcher", "slurm", "-k", "nccl-env", "--join-timeout", "20", "--store-addr", "127.0.0.1"]
    os.kill(slurmd, signal.SIGSTOP)
    try:
        res = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=150)
    finally:
        os.kill(slurmd, signal.SIGCONT)
    # a node's slurmd that could not start the step is the cluster's, not the user's: exit 3 (it was 4, usage)
    assert res.returncode == 3, res.stdout[-2000:] + res.stderr[-2000:]
    (error,) = [line for line in res.stderr.splitlines() if "ERROR: no host's agent joined" in line]
    assert "ccnode3: the step did not start on ccnode3 (srun: error: Task launch for StepId=" in error, error
    assert "ccnode1: the step did not start on ccnode3, so srun ended it before this node's agent joined" in error
    assert "its agent ended before joining (srun: Killed)" not in error and "--store-addr" not in error, error
    assert "Traceback" not in res.stderr
