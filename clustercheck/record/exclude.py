"""From verdicts to the scheduler: the exclusion list, draining, and resuming what we drained.

Only *failed* items put a node on the list (DESIGN: an error is the harness's problem, never the
node's). A failed verdict whose subject names one of the item's nodes (a counter window's `<host>
<device>`, an expectation about a host) lists that node, whatever the item's scope. Otherwise a
node-scope failure names its node; a pair failure implicates both nodes, so a node is listed only when
it failed pairs with two or more partners, or every pair it was in (the only one, it is listed but not
drained or tainted: either node of that pair may be the cause); a cluster-scope failure names no
node, unless the item measured one node (a one-node run: the node is the cluster, and nothing else
could have failed it). A node that stopped answering mid-check is listed (its own fault, not its
peers'), unless every node that took part did, more than one: the controller's network or store is then
the likelier cause, and none of them is listed.
"""

from __future__ import annotations

import math
import re
import shlex
import subprocess
from typing import Any, Callable, Mapping, NamedTuple, Sequence

import hostlist

from clustercheck.record.schema import DrainEntry, ResultEntry
from clustercheck.judging.verdicts import brief

PREFIX = "clustercheck:"
NOT_RESPONDING = "Not responding"  # slurmctld's reason for a node it set DOWN when its slurmd stopped answering


def _why(r: ResultEntry) -> str:
    failed = [v for v in r.get("verdicts") or [] if not v["passed"]]
    return f"{r['check']} {brief(failed[0])}" if failed else r["check"]


def not_judged(v: Mapping[str, Any]) -> bool:
    """windows.despite's verdict on an item that errored or skipped while a counter window failed: its own
    measurement was not judged, so it is no measurement of any node."""
    return v.get("metric") == "measurement" and v.get("measured") == "not judged"


def _nodes_of(r: ResultEntry) -> set[str]:
    return {*(r.get("nodes") or ()), *filter(None, (r.get("node") or "").split(",")), *(r.get("unreachable") or ())}


def named(r: ResultEntry) -> dict[str, str]:
    """node -> why, for each of the item's nodes that one of its failed verdicts names: the first word of the
    verdict's subject (a counter window's `<host> <device>`, an expectation's host)."""
    nodes = _nodes_of(r)
    out: dict[str, str] = {}
    for v in r.get("verdicts") or ():
        word = (v.get("subject") or "").split(maxsplit=1)[:1]
        if not v["passed"] and word and word[0] in nodes:
            out.setdefault(word[0], f"{r['check']} {brief(v)}")
    return out


def unnamed(r: ResultEntry) -> bool:
    """Whether the item failed by something that names none of its nodes (the busbw of a pair or of the
    cluster): a failed verdict with no node in its subject, other than despite()'s `not judged`; a failed
    item none of whose verdicts names a node counts too (fail closed: its failure is not lost)."""
    if r["outcome"] != "failed":
        return False
    nodes = _nodes_of(r)
    failed = [v for v in r.get("verdicts") or () if not v["passed"]]
    return not named(r) or any(not not_judged(v) and (v.get("subject") or "").split(maxsplit=1)[:1] not in
                               [[n] for n in nodes] for v in failed)


def excluded(results: Sequence[ResultEntry]) -> dict[str, str]:
    """node -> the first reason it is excluded for."""
    return _listed(results)[0]


def unproven(results: Sequence[ResultEntry]) -> dict[str, str]:
    """node -> its partner, for each node on the list only because the one pair that measured it failed
    (--pair-strategy random pairs each node once; a two-node run has one pair). Either node may be the
    cause: the list keeps both, since a gate must trust neither, but --drain and --taint leave them alone,
    as they would otherwise take a healthy node out with every bad one."""
    return _listed(results)[1]


def _listed(results: Sequence[ResultEntry]) -> tuple[dict[str, str], dict[str, str]]:
    out: dict[str, str] = {}
    silent: set[str] = set()  # nodes listed only for having stopped answering, so far
    partners: dict[str, dict[str, bool]] = {}  # node -> partner -> that pair failed (by what names neither)
    first_pair: dict[str, ResultEntry] = {}  # node -> its first pair that failed so
    for r in results:
        where, scope = r.get("node"), r.get("scope")
        blamed: dict[str, str] = {}  # what this item's own evidence lists
        if r["outcome"] == "failed":
            blamed.update(named(r))  # the evidence names it: it is to blame, not its peers
        if scope == "pair" and where:
            a, b = where.split(",")
            failed = unnamed(r)
            for x, y in ((a, b), (b, a)):
                partners.setdefault(x, {})[y] = partners.get(x, {}).get(y, False) or failed
                if failed:
                    first_pair.setdefault(x, r)
        elif r["outcome"] == "failed" and scope != "cluster" and where:
            blamed.setdefault(where, _why(r))
        elif unnamed(r) and scope == "cluster" and len(nodes := r.get("nodes") or []) == 1:
            blamed.setdefault(nodes[0], f"{_why(r)} (the only node the cluster item measured)")
        for node, why in blamed.items():
            out.setdefault(node, why)
            silent.discard(node)
        for node, why in _stopped(r).items():  # stopped answering mid-check: its own fault, not its peers'
            if why.startswith("the scheduler said"):  # its words are evidence of the node itself
                silent.discard(node)
            elif node not in out:
                silent.add(node)
            out.setdefault(node, f"{_during(r)}: {why}")
    lone: dict[str, str] = {}
    for node, seen in partners.items():
        bad = [p for p, failed in seen.items() if failed]
        if not bad or len(bad) < 2 and len(bad) < len(seen):
            continue
        silent.discard(node)  # its pairs list it too
        if node in out:
            continue
        if len(seen) == 1:
            out[node] = f"{_why(first_pair[node])} (failed its only pair, with {bad[0]}: either node may be the cause)"
            lone[node] = bad[0]
        else:
            out[node] = f"{_why(first_pair[node])} (failed pairs with {', '.join(bad)})"
    for node in _all_at_once(results, silent):  # every node went silent: the controller's side, not theirs
        out.pop(node)
        lone.pop(node, None)
    return out, lone


def _during(r: ResultEntry) -> str:
    return f"{r['check']} in repetition {r['repeat']}" if r.get("repeat") else r["check"]


def _stopped(r: ResultEntry) -> dict[str, str]:
    """node -> why, for each node the item names unreachable (it stopped answering mid-check): the scheduler's
    words where it said the node failed (launcher.Over.cost), else that it stopped answering."""
    out: dict[str, str] = {}
    for node in r.get("unreachable") or ():
        said = re.search(rf"(?:^|; ){re.escape(node)} failed \(((?:srun|scheduler): [^()\n]*)\)",
                         r.get("message") or "")
        out[node] = (f"the scheduler said it failed ({said.group(1)})" if said else
                     "stopped answering (no heartbeat: unreachable or dead)")
    return out


def _all_at_once(results: Sequence[ResultEntry], silent: set[str]) -> set[str]:
    """The nodes that stopped answering together in the check where the last of them did, where they are more
    than one, each listed for nothing but its silence (never by the scheduler's words), and every node still in
    the run then (that took part, less those lost in earlier checks): every node agent lost at once is the
    controller's network or store far likelier than every node (run/join.py `over()` stops such a run; this
    keeps a record's list, and `verify`'s, the same whatever the run saw in time). A node lost before them
    stays listed: its own loss."""
    first: dict[str, tuple[str, Any]] = {}  # node -> the check (and repetition) in which it stopped answering
    for r in results:
        for node in r.get("unreachable") or ():
            first.setdefault(node, (r["check"], r.get("repeat")))
    if not first:
        return set()
    last = list(first.values())[-1]
    group = {n for n, when in first.items() if when == last}
    took_part = set().union(*(_nodes_of(r) for r in results)) - {n for r in results for n in r.get("absent") or ()}
    still_in = took_part - {n for n, when in first.items() if when != last}
    return group if len(group) > 1 and group <= set(silent) and still_in <= group else set()


def unblamed(results: Sequence[ResultEntry]) -> list[str]:
    """The checks of cluster- and pair-scope items, and of localize's cluster item (a link or uplink it names),
    that failed by something naming no node and put no node on the list for it (the busbw of the whole
    cluster): the terminal says so rather than "no node failed"."""
    listed = excluded(results)
    out: list[str] = []
    for r in results:
        # localize's cluster item names links and uplinks, never a node: a node listed does not explain it
        links = r.get("scope") == "localize" and not r.get("node")
        blank = links or r.get("scope") in ("cluster", "pair") and not listed.keys() & _nodes_of(r)
        if blank and unnamed(r):
            if (said := f"{r['scope']} check {r['check']}") not in out:
                out.append(said)
    return out


def _measured(r: ResultEntry) -> set[str]:
    """The nodes an item measured: every node of one that passed or failed, but of one that failed only by
    its counter windows (its own measurement `not judged`: windows.despite) only the nodes a window failed on."""
    if r["outcome"] not in ("passed", "failed"):
        return set()
    if any(not_judged(v) for v in r.get("verdicts") or ()):
        return set(named(r))
    return set(r.get("nodes") or [])


def unmeasured(results: Sequence[ResultEntry]) -> dict[str, list[str]]:
    """node -> its items that ended in error (or failed only by another node's counter window, their own
    measurement not judged), each of a repeated run by its repetition (`node-ar[h3]#2`). Never a reason to
    exclude (the harness could not measure), but a gate must say which nodes went unmeasured rather than
    pass them in silence."""
    out: dict[str, list[str]] = {}
    for r in results:
        if r.get("scope") == "cluster" or not r.get("node"):
            continue
        if r["outcome"] == "error" or r["outcome"] == "failed" and any(not_judged(v) for v in r.get("verdicts") or ()):
            for node in (r.get("node") or "").split(","):
                if node not in _measured(r):  # a burn-in's item by its repetition: node-ar[h3]#2
                    out.setdefault(node, []).append(f"{r['name']}#{r['repeat']}" if r.get("repeat") else r["name"])
    return out


def untested(nodes: Sequence[str], results: Sequence[ResultEntry]) -> list[str]:
    """Nodes that no item measured: none of the items covering them passed or failed (all errored, were
    skipped or never ran), or failed only by another node's counter window. Never excluded, never silently
    absent: the gate knows nothing of them."""
    measured: set[str] = set()
    for r in results:
        measured |= _measured(r)
    return [n for n in nodes if n not in measured]


def breaker(results: Sequence[ResultEntry], nodes: Mapping[str, str], run_nodes: int, share: float) -> str | None:
    """The circuit breaker of --drain and --taint: None when they may act on `nodes` (the exclusion
    list), else the one line that says why nothing is drained or tainted. It trips when more of the run's
    `run_nodes` nodes than `share` of them, and more than one, failed the same check: the cause is then
    more likely the threshold, the fabric or software every node shares than every one of those nodes
    (on a 3-node Slurm, a floor set too high drained all three in one run). NVSentinel's fault quarantine
    has such a breaker for cordoning. Nodes that stopped answering count together, over the whole run:
    every agent lost at once is the controller's network, or the Job deleted, far likelier than every node."""
    allowed = max(1, math.floor(share * run_nodes + 1e-9))
    failing: dict[str, set[str]] = {}
    for r in results:  # an item of the whole cluster (cluster, localize's) counts the nodes its verdicts name
        if r["outcome"] == "failed":  # (an Xid on every node trips it; a slow link names none)
            blamed = set(named(r)) | (set(r.get("nodes") or []) if r.get("node") else set())
            failing.setdefault(f"failed {r['check']}", set()).update(n for n in blamed if n in nodes)
        failing.setdefault("stopped answering", set()).update(n for n in _stopped(r) if n in nodes)
    why, failed = max(failing.items(), key=lambda kv: (len(kv[1]), kv[0]), default=("", set()))
    if len(failed) <= allowed:
        return None
    return (f"circuit breaker: {len(failed)} of {run_nodes} nodes ({len(failed) / run_nodes:.0%}) {why}, "
            f"more than --drain-max {share:.0%} lets act on ({allowed}): drained and tainted nothing, since the "
            "threshold, the fabric, the controller's network or shared software is the likelier cause; the "
            "verdicts and exclude.txt stand")


def as_hostlist(nodes: list[str]) -> str:
    return hostlist.collect_hostlist(nodes) if nodes else ""


def drain_commands(nodes: dict[str, str]) -> list[list[str]]:
    return [["scontrol", "update", f"NodeName={node}", "State=DRAIN", f"Reason={PREFIX} {why}"[:255]]
            for node, why in nodes.items()]


def spared(nodes: Mapping[str, str], commands: Sequence[list[str]]) -> list[DrainEntry]:
    """--drain's or --taint's entry for each node it leaves alone as unproven (node -> partner: `unproven`),
    with the command it would have run."""
    return [{"command": cmd, "rc": None, "output": f"left alone: its only pair failed, with {partner}, and either "
             "node may be the cause"} for cmd, partner in zip(commands, nodes.values())]


def drain(nodes: dict[str, str], dry_run: bool) -> list[DrainEntry]:
    """--drain (or, with `dry_run`, what it would run): one entry per node. A node already drained,
    draining or down for a reason not ours is the admin's: left alone (rc None), since draining it would
    overwrite their reason and let `clustercheck resume` bring back a node they took out. One Slurm itself
    set DOWN (its slurmd stopped answering) is drained: left DOWN, it returns to service when slurmd
    registers again."""
    out: list[DrainEntry] = []
    for cmd, node in zip(drain_commands(nodes), nodes):
        if node.upper() == "ALL":  # a node list's reserved word: `scontrol update NodeName=ALL` takes every node
            out.append({"command": cmd, "rc": None, "output": "refused: ALL is Slurm's word for every node, "
                        "never drained by name (drain this node by hand)"})
            continue
        if dry_run:
            out.append({"command": cmd, "rc": None, "output": "dry run"})
            continue
        rc, shown = run(["scontrol", "show", "node", "-o", node])
        if rc != 0:  # not known whose it is: draining could overwrite an admin's reason, so it is not drained
            said = (shown.splitlines() or [f"exit {rc}"])[-1][:200]
            out.append({"command": cmd, "rc": rc, "output": f"not drained: its state could not be read ({said})"})
            continue
        theirs = _held_by_others(shown, slurm_user)
        if theirs is not None:
            out.append({"command": cmd, "rc": None,
                        "output": f"left alone: already {theirs[0]} by someone else ({theirs[1]})"})
            continue
        rc, said = run(cmd)
        out.append({"command": cmd, "rc": rc, "output": said})
    return out


class NodeRow(NamedTuple):
    """A line of `scontrol show node -o`: its node, state, reason without its `[user@time]`, and that user."""
    node: str
    state: str
    reason: str
    by: str | None


def _node_lines(show_node_output: str) -> list[NodeRow]:
    """A NodeRow for each line of `scontrol show node -o`."""
    rows = []
    for line in show_node_output.splitlines():
        name = re.search(r"\bNodeName=(\S+)", line)
        state = re.search(r"\bState=(\S+)", line)
        if not name or not state:
            continue
        reason = re.search(r"\bReason=(.*?)(?: \[([^\]@]*)@[^\]]*\])?\s*$", line)
        rows.append(NodeRow(name.group(1), state.group(1), reason.group(1) if reason else "",
                            reason.group(2) if reason else None))
    return rows


def _held_by_others(show_node_output: str, slurm_user: Callable[[], str | None] = lambda: None
                    ) -> tuple[str, str] | None:
    """(how, reason) when the node is drained, draining or down for a reason that is not clustercheck's, nor
    Slurm's own (`_slurms_down`): slurmctld's DOWN is no one's decision, and a node left DOWN comes back
    by itself when its slurmd registers again (ReturnToService), where DOWN+DRAIN stays out."""
    for row in _node_lines(show_node_output):
        if ("DRAIN" in row.state or "DOWN" in row.state or "FAIL" in row.state) and \
                not row.reason.startswith(PREFIX) and not _slurms_down(row, slurm_user):
            return ("down" if "DRAIN" not in row.state else "drained"), row.reason or "no reason given"
    return None


def _slurms_down(row: NodeRow, slurm_user: Callable[[], str | None]) -> bool:
    """Whether slurmctld set the node DOWN itself: its reason is Slurm's own words for a node whose slurmd
    stopped answering ("Not responding"), or was set by the SlurmUser where that is no admin's account too
    (`slurm_user()`; under root, as admins act, only Slurm's words tell)."""
    if "DOWN" not in row.state or "DRAIN" in row.state or "FAIL" in row.state:
        return False
    if row.reason == NOT_RESPONDING:
        return True
    return row.by not in (None, "root") and row.by == slurm_user()


def slurm_user() -> str | None:
    """The SlurmUser slurmctld runs as (`scontrol show config`), None where it cannot be read."""
    rc, out = run(["scontrol", "show", "config"])
    found = re.search(r"^SlurmUser\s*=\s*([^\s(]+)", out, re.MULTILINE) if rc == 0 else None
    return found.group(1) if found else None


def drained_by_us(show_node_output: str) -> tuple[list[str], list[tuple[str, str]]]:
    """From `scontrol show node -o`: (nodes drained with our prefix, [(node, reason)] drained otherwise)."""
    ours: list[str] = []
    others: list[tuple[str, str]] = []
    for name, state, text, _ in _node_lines(show_node_output):
        if "DRAIN" not in state:
            continue
        (ours.append(name) if text.startswith(PREFIX) else others.append((name, text)))
    return ours, others


def run(cmd: list[str], timeout: float = 60.0) -> tuple[int, str]:
    """(exit status, output) of a scheduler command. A command that cannot run (not installed, not
    executable, hung) is a status too, never an exception: a drain that fails must not cost a run its
    reports. 127 and 124 as a shell and timeout(1) would say."""
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        return 127, f"{cmd[0]}: not found on the PATH"
    except subprocess.TimeoutExpired:
        return 124, f"{cmd[0]}: no answer in {timeout:g} s"
    except OSError as exc:
        return 126, f"{cmd[0]}: {exc.strerror or type(exc).__name__}"
    return proc.returncode, (proc.stdout + proc.stderr).strip()


def acts(ex: Mapping[str, Any]) -> list[tuple[str, DrainEntry]]:
    """The drains and taints an exclusion line records, each as ("drain" or "taint", its entry)."""
    return [*(("drain", d) for d in ex.get("drain") or []), *(("taint", d) for d in ex.get("taint") or [])]


def act_line(act: str, d: DrainEntry) -> str:
    """`drain failed (exit 1: <scontrol's first line>): scontrol update ...`, `drain done: ...`; rc None: a
    dry run, or a node someone else drained or tainted (left alone). The terminal and report.html say it so."""
    said = (d["output"].splitlines() or [""])[0][:200]  # scontrol's first line (the record keeps all)
    state = ("would run" if d["output"] == "dry run" else d["output"]) if d["rc"] is None else \
        "done" if d["rc"] == 0 else f"failed (exit {d['rc']}: {said})" if act == "drain" else f"failed ({d['output']})"
    return f"{act} {state}: {shlex.join(d['command'])}"
