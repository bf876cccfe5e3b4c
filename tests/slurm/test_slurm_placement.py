"""Where `--launcher slurm` puts its agents, on a real Slurm cluster: on the planned hosts (the allocation's
nodes, --nodelist), never on nodes srun picks by itself; outside an allocation it refuses in one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cluster_fixture import slurm  # noqa: F401  (a fixture; tests/conftest.py keeps the name conftest)
from test_slurm import work  # noqa: F401  (a fixture: the suite and limits of test_slurm)

pytestmark = [pytest.mark.pool, pytest.mark.slurm]


RUN = [sys.executable, "-m", "clustercheck", "run", "s.yaml", "--thresholds", "th", "--out", "out", "--launcher",
       "slurm", "-k", "nccl-env"]


def test_outside_an_allocation_a_nodelist_in_the_environment_is_refused_in_one_line(slurm: dict, work: Path) -> None:
    """SLURM_JOB_NODELIST exported but no job: srun made a job of its own and ran the agents wherever Slurm
    put them, and the run passed (rc 0) on nodes nobody planned."""
    env = {k: v for k, v in slurm.items() if not k.startswith("SLURM_") or k == "SLURM_CONF"}
    env["SLURM_JOB_NODELIST"] = "ccnode[2-3]"
    res = subprocess.run(RUN, cwd=work, env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 4, res.stdout[-2000:] + res.stderr[-2000:]
    assert res.stderr.strip().splitlines()[-1] == ("ERROR: --launcher slurm runs inside an allocation (salloc or "
                                                   "sbatch): SLURM_JOB_ID is not set"), res.stderr
    assert "Traceback" not in res.stderr


def test_the_agents_run_on_the_planned_hosts_and_no_other(slurm: dict, work: Path) -> None:
    """A 3-node allocation whose SLURM_JOB_NODELIST names ccnode2 and ccnode3: srun, asked for 2 nodes without
    --nodelist, took ccnode1 and ccnode2, and ccnode1 was measured as if planned."""
    cmd = ["salloc", "-N3", "env", "SLURM_JOB_NODELIST=ccnode[2-3]", *RUN]
    res = subprocess.run(cmd, cwd=work, env=slurm, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    data = json.loads((work / "out" / "latest" / "results.json").read_text())
    assert data["run"]["nodes"] == ["ccnode2", "ccnode3"], data["run"]
    assert sorted(r["name"] for r in data["results"]) == ["nccl-env[ccnode2]", "nccl-env[ccnode3]"]
    assert os.path.exists(work / "out" / "latest" / "exclude.txt")
