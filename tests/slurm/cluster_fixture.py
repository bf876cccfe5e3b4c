"""A real Slurm cluster on this machine (tests/slurm/cluster.sh): one slurmctld, three slurmd -N ccnodeN.
Reused when .ci/run started one (SLURM_CONF set and answering), else started here and stopped after."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent / "cluster.sh"


def _answers(env: dict[str, str]) -> bool:
    try:
        return subprocess.run(["sinfo", "-h"], env=env, capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.fixture(scope="session")
def slurm(tmp_path_factory: pytest.TempPathFactory):
    """The environment (SLURM_CONF, CC_SLURM_HOME) of a running 3-node test cluster."""
    if not (shutil.which("srun") and (shutil.which("slurmctld") or Path("/usr/sbin/slurmctld").exists())):
        pytest.skip("needs Debian's slurm-wlm and munge (bash tests/slurm/cluster.sh install)")
    if os.geteuid() != 0:
        pytest.skip("the test Slurm cluster runs its daemons as root")
    env = dict(os.environ)
    if env.get("SLURM_CONF") and env.get("CC_SLURM_HOME") and _answers(env):
        for leftover in (Path(env["CC_SLURM_HOME"]) / "node-env").glob("*"):
            leftover.unlink()  # a per-node misconfiguration from an interrupted run
        yield env
        return
    home = tmp_path_factory.mktemp("slurm")
    subprocess.run(["bash", str(SCRIPT), "start", str(home)], check=True, capture_output=True, timeout=180)
    env.update(SLURM_CONF=str(home / "slurm.conf"), CC_SLURM_HOME=str(home))
    try:
        yield env
    finally:
        subprocess.run(["bash", str(SCRIPT), "stop", str(home)], capture_output=True, timeout=120)
