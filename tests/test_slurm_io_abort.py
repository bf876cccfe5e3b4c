"""srun aborts the whole step of node agents on an I/O error with one node's slurmstepd, whatever
--kill-on-bad-exit says (Slurm's src/api/step_launch.c, step_launch_notify_io_failure): one node whose agent
dies at once can, by a race, take every agent down. The run names that node as the cause, not each node's
own agent, and does not send the user to check that srun can start a step."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from clustercheck.errors import HarnessError
from clustercheck.run.slurm import SlurmLauncher
from test_slurm_agents import allocation, joined_step

# the agents' srun log of a real run on the test cluster (its source line says which), the line after it
CAPTURE = Path(__file__).parent / "fixtures" / "slurm" / "srun-io-abort-22.05.txt"
IO_ABORT = CAPTURE.read_text().split("\n", 1)[1]
SAID = "srun: error: step_launch_notify_io_failure: aborting, io error with slurmstepd on node 2"
ABORTED = ("srun aborted the whole step after an I/O error with ccnode3's slurmstepd (Slurm ends every task of "
           "a step then)")


def test_the_node_srun_aborted_the_step_for_is_read_by_its_task_then_its_place_in_the_step() -> None:
    from clustercheck.run.slurm import srun_io_aborts

    hosts = ["ccnode1", "ccnode2", "ccnode3"]
    assert srun_io_aborts(IO_ABORT, hosts) == {"ccnode3": SAID}
    # srun's "ccnode3: task 2" names node 2 of the step, wherever the plan put ccnode3
    assert srun_io_aborts(IO_ABORT, ["ccnode3", "ccnode1", "ccnode2"]) == {"ccnode3": SAID}
    # no word of srun's of task 2: the step's node 2 is the plan's third host
    alone = IO_ABORT.replace("srun: error: ccnode3: task 2: Exited with exit code 1\n", "")
    assert srun_io_aborts(alone, hosts) == {"ccnode3": SAID}
    missing = "srun: error: Aborting, io error and missing step on node 0\n"  # the same abort, the other words
    assert srun_io_aborts(missing, hosts) == {"ccnode1": missing.strip()}
    assert list(srun_io_aborts(missing.replace("node 0", "node 5"), hosts)) == ["node 5 of the step"]
    assert srun_io_aborts("srun: error: ccnode3: task 2: Exited with exit code 1\n", hosts) == {}


def ended_step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, log: str) -> SlurmLauncher:
    """The Slurm launcher of a job of ccnode[1-3] whose agents' srun step printed `log` and exited 1."""
    allocation(tmp_path, monkeypatch, "ccnode[1-3]")
    launcher = SlurmLauncher("10.0.0.1")
    launcher.agent_dir = tmp_path
    (tmp_path / "agents.log").write_text(log)
    srun = subprocess.Popen([sys.executable, "-c", "raise SystemExit(1)"])
    srun.wait()
    launcher.agents = [srun] * 3
    return launcher


def test_agents_srun_aborted_with_the_step_are_explained_by_the_node_that_caused_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: ccnode1 and ccnode2 read `its agent ended before joining (srun: Killed)`, ccnode3 quoted
    ccnode2's end as its last line, and the run said `check that srun can start a step in this allocation`."""
    launcher = ended_step(tmp_path, monkeypatch, IO_ABORT)
    why = launcher.explain([0, 1, 2], {})
    assert why["ccnode1"] == f"{ABORTED}, before its agent joined (srun: Killed)", why
    assert why["ccnode2"] == f"{ABORTED}, before its agent joined (srun: Killed)", why
    assert why["ccnode3"] == ("its agent ended before joining (srun: Exited with exit code 1); srun then aborted the "
                              f"whole step ({SAID})"), why
    err = launcher.not_started(why)
    text = str(err)
    assert isinstance(err, HarnessError), err  # nothing was measured: exit 3, as any step no agent joined
    assert text.startswith("no host's agent joined (ccnode3: its agent ended before joining (srun: Exited with "
                           "exit code 1)"), text
    assert f"ccnode3 is the cause: {ABORTED}" in text and "check that srun can start a step" not in text, text
    # the agent's own last line, where srun passed it on, is quoted as ccnode3's words
    (tmp_path / "agents.log").write_text("2: Fatal Python error: init_fs_encoding\n" + IO_ABORT)
    assert launcher.explain([2], {})["ccnode3"].startswith(
        "its agent ended before joining (srun: Exited with exit code 1): Fatal Python error: init_fs_encoding; "
        "srun then aborted the whole step"), launcher.explain([2], {})


def test_without_an_io_abort_the_words_stay_each_nodes_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The usual path: ccnode3's agent ended, the others ran on; nothing is said of an abort."""
    launcher = ended_step(tmp_path, monkeypatch, "0: joined\n1: joined\n2: Fatal Python error: init_fs_encoding\n"
                          "srun: error: ccnode3: task 2: Exited with exit code 1\n")
    assert launcher.explain([2], {}) == {"ccnode3": "its agent ended before joining (srun: Exited with exit code 1): "
                                                    "Fatal Python error: init_fs_encoding"}


def test_a_step_srun_aborted_after_the_agents_joined_names_the_node_that_caused_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The run stops INCOMPLETE as for any end of the step (`over`), and its words name ccnode3 first."""
    with joined_step(tmp_path, monkeypatch) as launcher:
        # the capture's lines, for the 2-node job whose agents joined: ccnode2's ended the step
        (tmp_path / "agents.log").write_text(
            "0: joined\n1: joined\nsrun: error: ccnode2: task 1: Exited with exit code 1\n"
            "srun: error: step_launch_notify_io_failure: aborting, io error with slurmstepd on node 1\n"
            "srun: Job step aborted: Waiting up to 7 seconds for job step to finish.\n"
            "srun: error: ccnode1: task 0: Killed\n")
        over = launcher.over()
        assert over is not None and over.why.startswith(
            "the job's step of node agents ended (srun aborted the whole step after an I/O error with ccnode2's "
            "slurmstepd (Slurm ends every task of a step then): srun: error: step_launch_notify_io_failure: "
            "aborting, io error with slurmstepd on node 1; srun: Job step aborted"), over
        assert over.failed == {}, over  # its agent ended; the node is not named failed by the scheduler
