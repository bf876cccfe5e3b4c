"""`--launcher slurm`: inside an allocation (salloc, sbatch), one srun step starts a node agent on every node
of the allocation (`clustercheck agent --slurm`, run/agent.py); each agent joins this controller as the
hosts launcher's agents do (run/hosts.py) and forks its node's ranks for every pool from its zygote.

Why one step of agents and not a step of ranks per pool: a rank that srun starts imports torch afresh, for
every pool (4-5 s on a GPU node; the checks of one run open a pool per backend, per `env:` and for NCCL's
untimed tuning), where an agent imports it once per node per run. One step for the run, not one per pool
or one per node: slurmctld creates one step, and the controller's node holds one srun.

The step: one task per node (`--ntasks-per-node=1`), sharing the allocation with any other step
(`--overlap`); a step without `--exact` has all of the job's CPUs and memory on each node and, by
default, every GRES (GPU) the job asked for (srun(1), slurm-wlm 22.05), so the ranks an agent forks see
the node's GPUs. An agent that dies does not end the others (`--kill-on-bad-exit=0`), unless srun loses
its I/O with that node's slurmstepd as the agent ends: srun then aborts the whole step (`srun_io_aborts`).
The run's secret reaches every agent on its stdin (`--input=all`). `--label` prefixes each line of output with the task
it came from; srun names a task that exited with its node, which is how an agent that ended before
joining, or mid-run, is named by its node at once.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path
from types import MappingProxyType
from typing import Collection, Mapping, NamedTuple, Sequence

from hostlist import collect_hostlist

from clustercheck.errors import ClusterCheckError, UserError, escape
from clustercheck.run.gang import NOT_THE_NODE, SLURM_PLAN_ENV
from clustercheck.run.launcher import Loss, Over
from clustercheck.run.hosts import (LAST_WORDS, REACH, HostsLauncher, bracketed, host_names, last_words,
                                    start_agent)

SETTLE_S = 3.0  # how long srun may take to print a step's end after its tasks died (it prints it as it tears the
# step down, while the controller may see a rank die first); waited only after a check lost nodes
STEP = ["--ntasks-per-node=1", "--overlap", "--kill-on-bad-exit=0", "--unbuffered", "--label", "--input=all"]
# srun's account of a task that ended badly, e.g. "srun: error: node3: task 4: Killed" ("tasks 0-3,6" too)
_ENDED = re.compile(r"^srun: error: (\S+): tasks? ([\d,\-]+): (.+)$", re.MULTILINE)
_LABEL = re.compile(r"^ *(\d+): ?(.*)$", re.MULTILINE)  # a line srun --label prefixed with its task
_OWN = re.compile(r"^srun: (.+)$", re.MULTILINE)  # srun's own words, e.g. why the step is not created yet
# srun's (and slurmstepd's, through a task's label) words that the job or the whole step ended, as srun 22.05
# printed them (tests/slurm): a node set DOWN ("srun: error: Node failure on ccnode3", "*** STEP 2.0 ON ccnode1
# CANCELLED AT ... DUE TO NODE FAILURE ... ***"), scancel ("srun: Job step aborted: Waiting up to 7 seconds
# for job step to finish."), the time limit ("... DUE TO TIME LIMIT ***"), a step killed ("Force Terminated")
_OVER = re.compile(r"^(?: *\d+: )?(srun: (?:error: )?(?:Node failure on \S+|Job step aborted\b.*|Force Terminated\b.*"
                   r"|.*\b(?:CANCELLED|TIME LIMIT|revoked)\b.*)|slurmstepd\S*: error: \*\*\* (?:STEP|JOB) .*\*\*\*)\s*$",
                   re.MULTILINE)
# srun could not start the step's task on a node (its slurmd did not answer): "srun: error: Task launch for
# StepId=43.0 failed on node ccnode3: Socket timed out on send/recv operation" (tests/slurm: slurmd SIGSTOPped)
_UNSTARTED = re.compile(r"^srun: error: Task launch for \S+ failed on node (\S+): .+$", re.MULTILINE)
_FAILED = re.compile(r"^srun: error: Node failure on (\S+)\s*$", re.MULTILINE)  # a node srun names as failed
_EXITED = re.compile(r"\bExited with exit code (\d+)\b")  # srun's words of a task that exited with a status
# srun aborts the whole step on an I/O error with one node's slurmstepd, whatever --kill-on-bad-exit says (Slurm's
# src/api/step_launch.c, step_launch_notify_io_failure; only an srun with SLURM_PTY_PORT set does not): an agent
# that dies at once can, by a race, take every agent of the step down with it. N is the node's index in the step
_IO_ABORT = re.compile(r"^srun: error: (?:\w+: )?(?:aborting, io error with slurmstepd|Aborting, io error and "
                       r"missing step) on node (\d+)\s*$", re.MULTILINE)


class Said(NamedTuple):
    """What the step's output says: node -> how srun said its agent ended, node -> that agent's last line,
    whether any task printed at all, srun's last words of its own that are no task's end, its words that the
    job or step ended (`_OVER`), and node -> srun's words where it named the node failed."""
    ended: dict[str, str]
    words: dict[str, str]
    spoke: bool
    own: str
    over: tuple[str, ...] = ()
    failed: Mapping[str, str] = MappingProxyType({})  # read-only: one default shared by every Said
    unstarted: Mapping[str, str] = MappingProxyType({})  # node -> srun's words where the step did not start on it
    aborted: Mapping[str, str] = MappingProxyType({})  # node -> srun's words: its I/O error aborted the step

    @classmethod
    def nothing(cls) -> Said:
        """What a step that has printed nothing says."""
        return cls({}, {}, False, "")

    @property
    def waits(self) -> str:
        """srun's own words while no task has printed a line: why no agent runs yet ("" once one has: then
        srun's last line of its own, "Step created ...", explains no missing agent)."""
        return "" if self.spoke else self.own


def srun_own(log: str) -> str:
    """srun's last line about the step itself ("Job 7 step creation still disabled, retrying (Requested
    nodes are busy)"), not one of its reports of a task that ended; "" when it said none."""
    own = [m.group(1) for m in _OWN.finditer(log) if not _ENDED.match(m.group(0))]
    return own[-1].strip() if own else ""


def srun_io_aborts(log: str, hosts: Sequence[str]) -> dict[str, str]:
    """The nodes whose slurmstepd srun had an I/O error with, for which it aborted the whole step, in the order
    it said so (the first is the cause; the rest died with the step): node -> srun's words. srun names the node by
    its index in the step. With one task per node (`--ntasks-per-node=1`, block distribution) node N runs task
    N, so the node srun reported task N on names it ("srun: error: ccnode3: task 2: Exited with exit code 1");
    else the step's N-th planned host (the step lays its nodes out in the allocation's order, as
    SLURM_JOB_NODELIST lists them, which `hosts` is); else `node N of the step`."""
    by_task = {task: node for node, (tasks, _) in srun_ends(log).items() for task in tasks}
    found: dict[str, str] = {}
    for m in _IO_ABORT.finditer(log):
        n = int(m.group(1))
        found.setdefault(by_task.get(n) or (hosts[n] if n < len(hosts) else f"node {n} of the step"),
                         escape(m.group(0).strip()))
    return found


def aborted_for(node: str) -> str:
    """Why every other agent of a step srun aborted for `node` ended."""
    return (f"srun aborted the whole step after an I/O error with {node}'s slurmstepd (Slurm ends every task of "
            "a step then)")


def srun_ends(log: str) -> dict[str, tuple[tuple[int, ...], str]]:
    """The nodes whose tasks srun reported as ended badly, in the order it reported them: node -> (its
    tasks, srun's words)."""
    found: dict[str, tuple[tuple[int, ...], str]] = {}
    for node, tasks, reason in _ENDED.findall(log):
        ids: list[int] = []
        for part in tasks.split(","):
            lo, _, hi = part.partition("-")
            ids.extend(range(int(lo), int(hi or lo) + 1))
        found.setdefault(node, (tuple(ids), reason.strip()))
    return found


class SlurmLauncher(HostsLauncher):
    kind = "slurm"
    check = "check that srun can start a step in this allocation"

    def __init__(self, store_addr: str | None = None, *, timeout: float | None = None) -> None:
        # the allocation's: outside one, srun would make a job of its own and place the agents anywhere
        name = "SLURM_JOB_NODELIST" if os.environ.get("SLURM_JOB_NODELIST") else "SLURM_NODELIST"
        nodelist = os.environ.get(name)
        for var, value in (("SLURM_JOB_NODELIST", nodelist), ("SLURM_JOB_ID", os.environ.get("SLURM_JOB_ID"))):
            if not value:
                raise UserError(f"--launcher slurm runs inside an allocation (salloc or sbatch): {var} is not set")
        assert nodelist is not None
        hosts = host_names(nodelist, name)
        if shutil.which("srun") is None:  # before any check, not when the agents start
            raise UserError("--launcher slurm starts its node agents with srun, which is not on the PATH here")
        super().__init__(hosts, "srun", store_addr, timeout=timeout)
        self._read_size = -1  # what _said last read of the step's output, and what it found there
        self._read = Said.nothing()

    def launch(self) -> None:
        """One srun step of agents, one per node; its output, labelled by task, in one log."""
        self.agent_dir = Path(tempfile.mkdtemp(prefix="clustercheck-slurm-"))
        n = len(self.nodes)
        argv = ["srun", f"--nodes={n}", f"--ntasks={n}", f"--nodelist={collect_hostlist(self.hosts)}", *STEP,
                sys.executable, "-m", "clustercheck", "agent",
                "--slurm", "--controller", f"{bracketed(self.host)}:{self.port}", "--token-stdin",
                "--join-timeout", f"{REACH:g}"]
        plan = {**os.environ, SLURM_PLAN_ENV: ",".join(self.hosts)}  # each agent's index: where its node stands
        step = start_agent(argv, self.agent_log(0), self.token, plan)
        self.agents = [step] * n  # every node's agent lives and ends with the step, as far as this process sees

    def agent_log(self, index: int) -> Path:
        assert self.agent_dir is not None, "agents have logs once launched"
        return self.agent_dir / "agents.log"

    def _said(self) -> Said:
        """What the step's output says; read again only when it grew (the pools ask on every look at their
        ranks)."""
        if self.agent_dir is None:  # not launched: the step has said nothing
            return Said.nothing()
        try:
            size = self.agent_log(0).stat().st_size
            if size == self._read_size:
                return self._read
            text = self.agent_log(0).read_text(errors="replace")
        except OSError:
            return Said.nothing()
        ends = srun_ends(text)
        labelled = _LABEL.findall(text)
        last = {int(task): escape(line.strip()) for task, line in labelled if line.strip()}  # an agent's own words
        words = {node: last[t] for node, (tasks, _) in ends.items() for t in tasks[:1] if t in last}
        over = tuple(dict.fromkeys(m.group(1).strip()[:200] for m in _OVER.finditer(text)))
        failed = {m.group(1): m.group(0).strip() for m in _FAILED.finditer(text)}
        unstarted = {m.group(1): m.group(0).strip() for m in _UNSTARTED.finditer(text)}
        # an agent spoke: a task printed a line of its own (slurmstepd's, through the label, is none)
        spoke = any(line.strip() and not line.startswith("slurmstepd") for _, line in labelled)
        self._read_size = size
        self._read = Said({node: why for node, (_, why) in ends.items()}, words, spoke, srun_own(text),
                          over, failed, unstarted, srun_io_aborts(text, self.hosts))
        return self._read

    def over(self, settle: bool = False) -> Over | None:
        """Once the agents joined: the step ended (srun exited), or srun said the job or the step ended (a node
        failed, the job was cancelled or ran out of time). Every agent then ends with it: the run stops. Where
        srun runs on and said nothing, the join launcher's rule still holds: every agent still in the run
        silent at once (the controller cut off from the nodes) stops the run, naming none of them."""
        return self._step_over(settle) or super().over(settle)

    def _step_over(self, settle: bool = False) -> Over | None:
        """What srun said of the step's end, if it ended. With `settle` (the check lost nodes) srun is given
        SETTLE_S to say so: its tasks die as it prints the end, and ranks seen dead first would otherwise
        blame, and exclude, their nodes for a cancelled job."""
        if not self.members or not self.agents:
            return None
        end, spoke = time.monotonic() + (SETTLE_S if settle else 0.0), None
        while True:  # settling, the words of the end are read on for up to 1 s more: the nodes srun names failed
            said, code, now = self._said(), self.agents[0].poll(), time.monotonic()
            spoke = spoke if spoke is not None or not (said.over or said.aborted) else now
            if code is not None or spoke is not None and now >= min(end, spoke + 1.0):
                break
            if now >= end:
                return None
            time.sleep(0.1)
        # an abort for one node's I/O error names that node first: its end ended every agent
        cause = [f"{aborted_for(node)}: {words}" for node, words in list(said.aborted.items())[:1]]
        words = "; ".join([*cause, *said.over[:3]]) or (
            "srun " + (f"was killed by {signal.Signals(-code).name}" if code is not None and code < 0
                       else f"exited with {code}"))
        return Over(f"the job's step of node agents ended ({words})", dict(said.failed))

    def disrupted(self, index: int, node: str, stopped: str = "") -> Loss | None:
        """How agent `index` (on `node`) was lost mid-run, as srun said its task ended: one srun serves every
        agent, so its exit code is no one agent's (the hosts launcher's rule reads none), but srun names each
        task's ("srun: error: ccnode3: task 2: Exited with exit code 70"). A bug of clustercheck's own
        (AGENT_BUG) or input the agent refused (4) excuses the node, which is only not measured; any other end
        (killed, a signal, another code, or no words of srun's) leaves the node's going standing. srun prints a
        task's end a moment after the agent's connection drops: it is given EXIT_WAIT to say it, a window the
        nodes lost together share."""
        said, end = self._said(), time.monotonic() + self.settling()
        while node not in said.ended and time.monotonic() < end:
            time.sleep(0.1)
            said = self._said()
        exited = _EXITED.search(said.ended.get(node, ""))
        if exited is None or int(exited.group(1)) not in NOT_THE_NODE:
            return None
        last = said.words.get(node, "")[:LAST_WORDS]
        return Loss(f"its agent crashed: {last}" if last else f"its agent crashed (srun: {said.ended[node]})",
                    blamed=False)

    def _read_joins(self) -> dict[int, str]:
        """As the join launcher's, and an agent that joined from another node than its index's planned host is
        refused: its ranks would be measured, and judged, as that host's."""
        bad = super()._read_joins()
        for i, member in list(self.members.items()):
            if member.node != self.hosts[i]:
                del self.members[i]
                self._beats.pop(i, None)
                bad[i] = (f"the agent that joined as {self.hosts[i]}'s (index {i}) runs on {member.node}, which is not "
                          "that planned host; it was refused")
        return bad

    def ended(self, joined: Collection[int], expected: int) -> bool:
        if self.agents and self.agents[0].poll() is not None:
            return True
        ended = self._said().ended
        return all(self.hosts[i] in ended for i in range(expected) if i not in joined)

    def explain(self, missing: list[int], bad: Mapping[int, str], timeout: float | None = None) -> dict[str, str]:
        """Why each missing node's agent never joined; the step goes on (the others may have joined), and an
        agent that joins after the gang closed leaves at once."""
        said = self._said()
        ended, words = said.ended, said.words
        step = self.agents[0].poll() if self.agents else None
        cause = next(iter(said.aborted), None)  # the node whose I/O error made srun abort the whole step
        out = {}
        for i in missing:
            node = self.hosts[i]
            if i in bad:
                why = bad[i]
            elif node in said.unstarted:
                out[node] = f"the step did not start on {node} ({said.unstarted[node][:LAST_WORDS]})"
                continue
            elif said.unstarted and not said.spoke:  # srun ended the step for it: this agent never ran either
                out[node] = (f"the step did not start on {', '.join(said.unstarted)}, so srun ended it before this "
                             f"node's agent joined ({next(iter(said.unstarted.values()))[:LAST_WORDS]})")
                continue
            elif cause is not None:  # not "ended before joining (srun: Killed)", which blamed each node's own agent
                out[node] = (self._aborted_cause(node) if node == cause else aborted_for(cause) +
                             (f", before its agent joined (srun: {ended[node]})" if node in ended else ""))
                continue
            elif node in ended:
                why = f"its agent ended before joining (srun: {ended[node]})"
            elif step is not None:
                why = f"the agents' srun step ended with {step} before its agent joined"
            else:
                why = f"its agent did not join within {self.timeout:g} s"
            # srun's own last line where the step itself failed ("Unable to create step ...") or waits to be
            # created ("step creation temporarily disabled, retrying"): no agent of it could have joined
            last = words.get(node, "")[:LAST_WORDS] or (last_words(self.agent_log(0)) if step is not None
                                                        else self.waiting())
            out[node] = why + (f": {last}" if last else "")
        if foreign := [node for node in ended if node not in self.hosts]:  # srun placed agents off the plan
            off = "; ".join(f"{node}: srun: {ended[node]}" for node in foreign[:3])
            out = {node: f"{why}; srun ran agents on node(s) not in the plan ({off})" for node, why in out.items()}
        return out

    def _aborted_cause(self, node: str) -> str:
        """Why `node`, whose I/O error made srun abort the whole step, never joined: srun's words of its task and
        its agent's own last line (never the log's last line, another node's end), then srun's of the abort."""
        said = self._said()
        why = (f"its agent ended before joining (srun: {said.ended[node]})" if node in said.ended else
               "its agent never joined")
        last = said.words.get(node, "")[:LAST_WORDS]
        return why + (f": {last}" if last else "") + f"; srun then aborted the whole step ({said.aborted[node]})"

    def waiting(self) -> str:
        """srun's own words while no task has printed ("step creation temporarily disabled, retrying")."""
        waits = self._said().waits
        return f"srun: {waits}"[:LAST_WORDS] if waits else ""

    def not_started(self, absent: Mapping[str, str]) -> ClusterCheckError:
        """As the hosts launcher's, and srun's refusal to create the step (the allocation does not hold what
        the step asks: "Unable to create step ...", "step creation ... disabled") is the user's to mend (exit 4);
        a step that did not start on a node (its slurmd) is the cluster's, exit 3."""
        own = self._said().own
        if "Unable to create step" in own or "step creation" in own:
            return UserError(self.none_joined(absent))
        return super().not_started(absent)

    def none_joined(self, absent: Mapping[str, str]) -> str:
        """As the hosts launcher's, unless no task of the step ever printed a line: then no agent ran, the
        controller's address is not in question, and srun's own words say why."""
        said = self._said()
        if cause := next(iter(said.aborted), ""):  # not "check that srun can start a step": the cause is one node
            first = sorted(absent.items(), key=lambda item: item[0] != cause)[:3]
            nodes = "; ".join(f"{name}: {why}" for name, why in first)
            return (f"no host's agent joined ({nodes}); {cause} is the cause: {aborted_for(cause)}; look at "
                    f"{cause}'s agent and slurmstepd; the agents' output: {self.agent_dir}")
        if said.spoke or said.ended and not said.unstarted:
            return super().none_joined(absent)
        # an agent that cannot reach the controller says so within seconds ("waiting for the controller at")
        cause = (f"the step did not start on {', '.join(said.unstarted)}" if said.unstarted else
                 "so no agent ran" if said.own else "srun may not have created the step yet")
        nodes = "; ".join(f"{name}: {why}" for name, why in list(absent.items())[:3])
        return (f"no host's agent joined ({nodes}); no task of the agents' srun step printed a line, {cause}; "
                f"{self.check}; the agents' output: {self.agent_dir}")

    def silent(self) -> Mapping[int, str]:
        """As the join launcher's, and at once a node whose agent srun saw end; every node once the step ended
        (`over`): no agent of it lives on, and none is to wait for."""
        said = self._said()
        ended, words = said.ended, said.words
        over = self._step_over()
        for i, member in self.members.items():
            node = member.node
            if i not in self._silent and over is not None:
                self._silent[i] = f"its node's agent ({node}), " + (f"whose node failed ({over.failed[node]})"
                                                                    if node in over.failed else f"gone as {over.why}")
            elif i not in self._silent and node in ended:
                # a crash's last words are said once, by disrupted(), which excuses the node (Losses.why)
                last = words.get(node, "")[:LAST_WORDS] if self.disrupted(i, node) is None else ""
                self._silent[i] = f"its node's agent ({node}), which ended (srun: {ended[node]})" + \
                    (f" ({last})" if last else "")
        return super(HostsLauncher, self).silent()
