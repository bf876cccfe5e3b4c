"""The agents' srun step ends mid-run (its job cancelled, a node set DOWN, so Slurm revokes the step): the launch
plane is gone, so the run stops INCOMPLETE (exit 2) in every report, its end line quoting srun; a node srun
names as failed is excluded with srun's words, and no other node is blamed (it was only not measured)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from cluster_fixture import slurm  # noqa: F401  (a fixture; tests/conftest.py keeps the name conftest)
from test_slurm import work  # noqa: F401  (a fixture: the suite and limits of test_slurm)

pytestmark = [pytest.mark.pool, pytest.mark.slurm]
JOB = "cc-step-end"


def _mid_run(env: dict[str, str], work: Path, action: list[str]) -> tuple[int, str]:
    """Run the suite with rank 4 (ccnode3) hung in ar-node; once ar-cluster's result is in the record, run
    `action` (JOB in it: the job's id). The controller's exit status and output."""
    cmd = ["salloc", "-N3", f"--job-name={JOB}", sys.executable, "-m", "clustercheck", "run", "s.yaml", "--thresholds",
           "th", "--out", "out", "--launcher", "slurm", "--cc-inject-fault=ar-node:hang@4"]
    ctl = subprocess.Popen(cmd, cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        record = work / "out" / "latest" / "run.jsonl"
        end = time.monotonic() + 180
        while not (record.is_file() and '"type": "result"' in record.read_text()) and time.monotonic() < end:
            time.sleep(0.2)
        time.sleep(1)  # ar-node's ranks started, rank 4 hangs
        job = subprocess.run(["squeue", "-h", "-n", JOB, "-o", "%i"], env=env, capture_output=True, text=True,
                             check=True).stdout.split()
        assert len(job) == 1, job
        subprocess.run([w.replace("JOB", job[0]) for w in action], env=env, check=True, timeout=60)
        out, _ = ctl.communicate(timeout=300)
    finally:
        ctl.kill()
    return ctl.returncode, out


def _incomplete_everywhere(work: Path, *said: str) -> dict:
    """Every report says INCOMPLETE, with srun's (or slurmstepd's) words as why: any of `said`, whichever of
    them Slurm printed first (the launcher quotes what it read once the step's end was said)."""
    run = work / "out" / "latest"
    end = json.loads((run / "run.jsonl").read_text().splitlines()[-1])
    assert end["type"] == "end" and end["stopped"].startswith("the job's step of node agents ended (") and \
        any(s in end["stopped"] for s in said), end
    data = json.loads((run / "results.json").read_text())
    assert data["verdict"] == "INCOMPLETE", data["verdict"]
    assert json.loads((run / "sla.json").read_text())["complete"] is False
    errors = [e.get("message") for e in ET.parse(run / "junit.xml").getroot().iter("error")]
    assert any(m.startswith("INCOMPLETE: stopped: the job's step of node agents ended") for m in errors), errors
    assert 'class="banner incomplete"' in (run / "report.html").read_text()
    return data


def test_a_cancelled_job_stops_the_run_incomplete_and_blames_no_node(slurm: dict, work: Path) -> None:
    rc, out = _mid_run(slurm, work, ["scancel", "JOB"])
    assert rc == 2, out[-3000:]
    assert "Traceback" not in out and "INCOMPLETE: stopped: the job's step of node agents ended" in out, out[-3000:]
    data = _incomplete_everywhere(work, "srun: Job step aborted", "CANCELLED AT")
    found = {r["name"]: r for r in data["results"]}
    hung = found["ar-node[ccnode3]"]
    assert hung["outcome"] == "error" and hung["message"].startswith(
        "not measured: the job's step of node agents ended (") and not hung.get("unreachable"), hung
    assert (work / "out" / "latest" / "exclude.txt").read_text() == ""
    assert "stopped answering" not in out


def test_a_node_slurm_sets_down_is_excluded_with_sruns_words_and_the_others_are_not(slurm: dict, work: Path) -> None:
    try:
        rc, out = _mid_run(slurm, work, ["scontrol", "update", "nodename=ccnode3", "state=down", "reason=cc test"])
    finally:  # ReturnToService=2 brings it back by itself; resume it all the same, and wait until it is idle
        subprocess.run(["scontrol", "update", "nodename=ccnode3", "state=resume"], env=slurm, capture_output=True)
        end = time.monotonic() + 60
        while "idle" not in subprocess.run(["sinfo", "-h", "-n", "ccnode3", "-o", "%t"], env=slurm,
                                           capture_output=True, text=True).stdout and time.monotonic() < end:
            time.sleep(0.5)
    assert rc == 2, out[-3000:]
    assert "Traceback" not in out, out[-3000:]
    data = _incomplete_everywhere(work, "srun: error: Node failure on ccnode3")
    found = {r["name"]: r for r in data["results"]}
    lost = found["ar-node[ccnode3]"]
    assert lost["outcome"] == "error" and lost["unreachable"] == ["ccnode3"], lost
    assert lost["message"].startswith("ccnode3 failed (srun: error: Node failure on ccnode3); not measured: "), lost
    assert (work / "out" / "latest" / "exclude.txt").read_text() == "ccnode3\n"
    exclude = [json.loads(line) for line in (work / "out" / "latest" / "run.jsonl").read_text().splitlines()
               if '"type": "exclude"' in line][-1]
    assert exclude["reasons"] == {
        "ccnode3": "ar-node: the scheduler said it failed (srun: error: Node failure on ccnode3)"}, exclude


def test_a_job_cancelled_while_the_nodes_facts_are_read_stops_the_run_incomplete(slurm: dict, work: Path) -> None:
    """The step ends under the opening pool that reads each node's facts (rank 4, on ccnode3, hangs in it): no
    record is open yet, so the one line says INCOMPLETE with srun's words, exit 2, never "ERROR ... exit 3"."""
    cmd = ["salloc", "-N3", f"--job-name={JOB}", sys.executable, "-m", "clustercheck", "run", "s.yaml", "--thresholds",
           "th", "--out", "out", "--launcher", "slurm", "--cc-inject-fault=facts:hang@4"]
    ctl = subprocess.Popen(cmd, cwd=work, env=slurm, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        end = time.monotonic() + 180
        while time.monotonic() < end and not any("injected hang" in log.read_text(errors="replace")
                                                 for log in (work / "out").glob(".starting-*/logs/*")):
            time.sleep(0.2)
        job = subprocess.run(["squeue", "-h", "-n", JOB, "-o", "%i"], env=slurm, capture_output=True, text=True,
                             check=True).stdout.split()
        assert len(job) == 1, job
        subprocess.run(["scancel", job[0]], env=slurm, check=True, timeout=60)
        out, _ = ctl.communicate(timeout=300)
    finally:
        ctl.kill()
    assert ctl.returncode == 2, out[-3000:]
    assert "Traceback" not in out and "nothing was measured" in out, out[-3000:]
    assert "clustercheck: INCOMPLETE: the job's step of node agents ended (" in out, out[-3000:]
    assert not (work / "out" / "latest").exists()
