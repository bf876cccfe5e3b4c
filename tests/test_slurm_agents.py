"""The pieces of `--launcher slurm` that need no Slurm (tests/slurm/ runs the launcher on a real one): how an
agent srun started finds its place in the allocation, and srun's reports of tasks that ended."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest

from clustercheck.errors import UserError
from clustercheck.run.gang import slurm_place
from clustercheck.run import hosts
from clustercheck.run.slurm import srun_ends, srun_own


def allocation(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, nodelist: str) -> None:
    """Inside a Slurm job of `nodelist` (SLURM_JOB_NODELIST, SLURM_JOB_ID), with an srun on PATH that no test
    here runs: the launcher only looks it up."""
    (tmp_path / "srun").write_text("#!/bin/sh\n")
    (tmp_path / "srun").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    monkeypatch.setenv("SLURM_JOB_NODELIST", nodelist)
    monkeypatch.setenv("SLURM_JOB_ID", "7")


@contextlib.contextmanager
def joined_step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """The Slurm launcher of a job of ccnode[1-2] whose two agents joined, its srun step running (a sleep)."""
    from clustercheck.run import gang, slurm

    allocation(tmp_path, monkeypatch, "ccnode[1-2]")
    launcher = slurm.SlurmLauncher("127.0.0.1")
    launcher.agent_dir = tmp_path
    (tmp_path / "agents.log").write_text("0: joined\n1: joined\n")
    srun = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])  # the step's srun, running
    try:
        launcher.agents = [srun]
        launcher.members = {i: gang.Member(i, f"ccnode{i + 1}", "k" * 64, None, f"ccnode{i + 1}", 1) for i in (0, 1)}
        yield launcher
    finally:
        srun.kill()
        srun.wait()



def test_an_agent_takes_its_index_from_where_its_node_stands_in_the_job_nodelist() -> None:
    env = {"SLURMD_NODENAME": "gpu-b07", "SLURM_JOB_NODELIST": "gpu-a[01-02],gpu-b[07-08]"}
    assert slurm_place(env) == ("2", "gpu-b07")
    assert slurm_place({"SLURMD_NODENAME": "n1", "SLURM_NODELIST": "n1"}) == ("0", "n1")  # older Slurm's name


@pytest.mark.parametrize(("env", "said"), [
    ({"SLURM_JOB_NODELIST": "n[1-2]"}, "SLURMD_NODENAME or SLURM_JOB_NODELIST is not set"),
    ({"SLURMD_NODENAME": "n3", "SLURM_JOB_NODELIST": "n[1-2]"}, "this node, 'n3', is not in SLURM_JOB_NODELIST 'n[1-2]'"),
    ({"SLURMD_NODENAME": "n1", "SLURM_JOB_NODELIST": "n[2-1"}, "SLURM_JOB_NODELIST 'n[2-1': "),
])
def test_an_agent_outside_a_job_step_is_told_in_one_line(env: dict[str, str], said: str) -> None:
    with pytest.raises(UserError) as err:
        slurm_place(env)
    assert said in str(err.value) and "\n" not in str(err.value), str(err.value)


def test_sruns_reports_of_ended_tasks_are_read_by_node_in_order() -> None:
    """As srun 22.05 (Debian 12 slurm-wlm, tests/slurm/cluster.sh) printed them: tasks killed on two nodes,
    tasks exiting 1, a range and a list; a line about the step is no task's."""
    killed = ("0: some output\nsrun: error: ccnode2: task 2: Killed\nsrun: error: ccnode1: tasks 0-1: Killed\n"
              "srun: Force Terminated StepId=6.0\n")
    assert list(srun_ends(killed).items()) == [("ccnode2", ((2,), "Killed")), ("ccnode1", ((0, 1), "Killed"))]
    exited = ("srun: error: ccnode1: task 0: Exited with exit code 1\n"
              "srun: error: ccnode2: tasks 2-3: Exited with exit code 1\n")
    assert srun_ends(exited) == {"ccnode1": ((0,), "Exited with exit code 1"),
                                 "ccnode2": ((2, 3), "Exited with exit code 1")}
    assert srun_ends("srun: error: ccnode1: tasks 0,2-3: Killed\n") == {"ccnode1": ((0, 2, 3), "Killed")}
    assert srun_ends("srun: error: Unable to create step for job 7: Invalid generic resource\n") == {}


@pytest.mark.parametrize(("addr", "said"), [
    ("127.0.0.1", "a loopback address (as --store-addr gave it), which other hosts cannot reach: give --store-addr"),
    ("10.0.0.1", "check that srun can start a step in this allocation"),
])
def test_when_no_nodes_agent_joined_the_refusal_says_what_to_look_at(tmp_path, monkeypatch: pytest.MonkeyPatch,
                                                                     addr: str, said: str) -> None:
    from clustercheck.run.slurm import SlurmLauncher

    allocation(tmp_path, monkeypatch, "n[1-2]")
    launcher = SlurmLauncher(addr)
    assert launcher.nodes == ("n1", "n2")
    launcher.agent_dir = tmp_path  # what the step printed: an agent that started, said why, and ended
    (tmp_path / "agents.log").write_text("0: clustercheck agent 0 (n1): could not reach the controller\n"
                                         "srun: error: n1: task 0: Exited with exit code 3\n")
    text = launcher.none_joined({"n1": "its agent ended before joining (srun: Exited with exit code 3)"})
    assert text.startswith("no host's agent joined (n1: its agent ended before joining") and said in text, text


# srun 22.05.8 (Debian 12 slurm-wlm, tests/slurm/cluster.sh), captured 2026-11-27: the agents' step asked for
# 3 nodes of a 2-node allocation (`salloc -N2 env SLURM_JOB_NODELIST='ccnode[1-3]' clustercheck run ...
# --launcher slurm`), and srun waited for them, printing these two lines and nothing else in 180 s
WAITING = ("srun: Job 1 step creation temporarily disabled, retrying (Requested nodes are busy)\n"
           "srun: Job 1 step creation still disabled, retrying (Requested nodes are busy)\n")


def test_sruns_own_last_words_are_read_and_its_reports_of_tasks_are_not_among_them() -> None:
    assert srun_own(WAITING) == "Job 1 step creation still disabled, retrying (Requested nodes are busy)"
    assert srun_own("0: joined\nsrun: error: ccnode1: task 0: Killed\n") == ""
    assert srun_own("srun: error: Unable to create step for job 7: Invalid generic resource\n") == \
        "error: Unable to create step for job 7: Invalid generic resource"
    assert srun_own("") == ""


def test_a_step_srun_never_created_is_named_with_sruns_words_and_no_store_addr_hint(
        tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where no task of the step printed a line, no agent ran: the refusal quotes srun and does not send the
    user after the controller's address (the hint a run gave before, which the real run above printed)."""
    from clustercheck.run.slurm import SlurmLauncher

    allocation(tmp_path, monkeypatch, "ccnode[1-3]")
    launcher = SlurmLauncher("127.0.0.1")
    launcher.agent_dir = tmp_path
    (tmp_path / "agents.log").write_text(WAITING)
    assert launcher.waiting() == ("srun: Job 1 step creation still disabled, retrying (Requested nodes are "
                                  "busy)")  # what the controller's "still waiting" line adds
    why = launcher.explain([0, 1, 2], {})
    assert why["ccnode1"] == ("its agent did not join within 180 s: srun: Job 1 step creation still disabled, "
                              "retrying (Requested nodes are busy)"), why
    text = launcher.none_joined(why)
    assert "no task of the agents' srun step printed a line, so no agent ran" in text, text
    assert "--store-addr" not in text and "check that srun can start a step" in text, text
    (tmp_path / "agents.log").write_text("")  # nothing yet, srun's words included (it waits ~60 s to say them)
    text = launcher.none_joined(launcher.explain([0], {}))
    assert "no task of the agents' srun step printed a line, srun may not have created the step yet" in text, text
    assert "--store-addr" not in text, text
    # once a task has printed, the agents ran: the address is in question again, and srun's "step created"
    # line explains no missing node
    (tmp_path / "agents.log").write_text(WAITING + "srun: Step created for job 1\n"
                                         "0: clustercheck agent 0 (ccnode1): waiting for the controller\n")
    why = launcher.explain([0], {})
    assert why == {"ccnode1": "its agent did not join within 180 s"}, why
    assert launcher.waiting() == ""
    assert "--store-addr" in launcher.none_joined(why)


@pytest.mark.parametrize(("launcher", "given", "waits"), [
    ("hosts", None, 180.0), ("hosts", 20.0, 20.0), ("slurm", None, 180.0), ("slurm", 900.0, 900.0)])
def test_join_timeout_sets_how_long_the_hosts_and_slurm_launchers_wait_for_their_agents(
        tmp_path, monkeypatch: pytest.MonkeyPatch, launcher: str, given: float | None, waits: float) -> None:
    """--join-timeout was read by the join and k8s launchers only; a step srun cannot create held a run for
    the fixed 180 s (docs/multi-node.md). Unset, each launcher keeps its own default."""
    from types import SimpleNamespace

    from clustercheck.run.launch import make_launcher

    allocation(tmp_path, monkeypatch, "n[1-2]")
    options = SimpleNamespace(launcher=launcher, nodes=None, hosts="h[1-2]", host_command="env {python}",
                              store_addr="10.0.0.1", join_timeout=given)
    made = make_launcher(options)
    assert made.kind == launcher and made.timeout == waits


def test_a_check_that_lost_nodes_waits_a_moment_for_sruns_words_that_the_step_ended(
        tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A rank seen dead before srun printed that the job's step ended (scancel) blamed its node and excluded it;
    after a check that lost nodes the launcher now waits up to SETTLE_S for srun's words. The words are those
    the real scancel test printed (tests/slurm/test_slurm_step_end.py)."""
    import threading

    with joined_step(tmp_path, monkeypatch) as launcher:
        assert launcher.over() is None and launcher.over(settle=True) is None  # nothing said: no end, after 3 s
        late = threading.Timer(0.5, lambda: (tmp_path / "agents.log").write_text(
            "0: joined\n1: joined\nsrun: Job step aborted: Waiting up to 7 seconds for job step to finish.\n"))
        late.start()
        assert launcher.over() is None  # without settle: read at once, before srun spoke
        over = launcher.over(settle=True)
        assert over is not None and "srun: Job step aborted" in over.why and over.failed == {}, over
        late.join()


def test_every_agent_silent_at_once_while_srun_runs_on_stops_the_run(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """srun runs on and says nothing, but every agent still in the run went silent in one check (the
    controller cut off from the nodes): as under --launcher join, the run stops naming none of them. Failed
    before the fix: the Slurm launcher's over() read only srun, so each node was blamed, and excluded."""
    with joined_step(tmp_path, monkeypatch) as launcher:
        assert launcher.over() is None  # both present
        launcher._silent = {i: f"its node's agent (ccnode{i + 1}), silent for 10 s" for i in (0, 1)}
        over = launcher.over()
        assert over is not None and "every node agent still in the run (2) stopped answering at once" in over.why
        assert over.failed == {} and launcher.over() is over, over


def test_an_agents_last_words_through_srun_are_escaped(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What an agent printed (srun --label's `0: ...`) is quoted in why its node never joined or ended: a
    terminal escape in it (an OSC 52 clipboard write, a cursor move that hides a line) reached the terminal raw."""
    from clustercheck.run import slurm

    allocation(tmp_path, monkeypatch, "ccnode[1-2]")
    launcher = slurm.SlurmLauncher("127.0.0.1")
    launcher.agent_dir = tmp_path
    (tmp_path / "agents.log").write_text("0: boom\x1b]52;c;cHduZWQ=\x07\x1b[1A\x1b[2K\n"
                                         "srun: error: ccnode1: task 0: Exited with exit code 1\n")
    said = launcher._said().words["ccnode1"]
    assert "\x1b" not in said and said.startswith("boom\\x1b]52"), said


@pytest.mark.parametrize(("code", "blamed"), [(70, False), (4, False), (1, True)])
def test_an_agent_srun_saw_exit_with_clustercheck_s_own_bug_does_not_blame_its_node(
        tmp_path, monkeypatch: pytest.MonkeyPatch, code: int, blamed: bool) -> None:
    """One srun serves every agent, so its exit code is no one agent's: the hosts launcher's rule gave up and
    ccnode3, whose agent exited 70 (clustercheck's own bug) mid-run, was excluded and drained as "stopped
    answering". srun names the task's code: 70 or 4 excuse the node, any other code leaves it blamed."""
    from clustercheck.run.losses import Losses

    with joined_step(tmp_path, monkeypatch) as launcher:
        (tmp_path / "agents.log").write_text(
            "0: joined\n1: clustercheck: internal error: ValueError: boom\n"
            f"srun: error: ccnode2: task 1: Exited with exit code {code}\n")
        loss = launcher.disrupted(1, "ccnode2")
        assert (loss is None) is blamed, loss
        if not blamed:
            assert loss.why == "its agent crashed: clustercheck: internal error: ValueError: boom", loss.why
        losses = Losses(["ccnode1", "ccnode2"])
        losses.ask(launcher, ["ccnode2"])
        assert ("ccnode2" in losses.excused) is not blamed
        said = losses.why(launcher, "ccnode2")
        assert said.count("ValueError: boom") == 1 and f"Exited with exit code {code}" in said, said
        monkeypatch.setattr(hosts, "EXIT_WAIT", 0.3)
        launcher.losing()  # a new window, of 0.3 s
        assert launcher.disrupted(0, "ccnode1") is None  # srun said nothing of ccnode1's task: it stands


def test_srun_s_words_of_a_crashed_agent_that_come_after_its_loss_still_excuse_the_node(
        tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """srun prints a task's end a moment after the agent's connection dropped: the controller that asked at
    once read no words and blamed (excluded, drained) a node whose agent exited 70. It waits for them."""
    import threading

    monkeypatch.setattr(hosts, "EXIT_WAIT", 30.0)  # a bound for a slow machine; the words come after 0.3 s
    with joined_step(tmp_path, monkeypatch) as launcher:
        log = tmp_path / "agents.log"
        log.write_text("0: joined\n1: clustercheck: internal error: ValueError: boom\n")
        late = threading.Timer(0.3, lambda: log.write_text(
            log.read_text() + "srun: error: ccnode2: task 1: Exited with exit code 70\n"))
        late.start()
        try:
            launcher.losing()  # the node just found lost (Losses.ask)
            loss = launcher.disrupted(1, "ccnode2")
        finally:
            late.join()
        assert loss is not None and not loss.blamed, loss
