"""Each node's platform facts at the start of a run, read where its ranks run (run/session.py asks)."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import socket
import sys
from typing import Mapping

from clustercheck.errors import HarnessError, NeverJoined, Unreachable, UserError
from clustercheck.judging import platform as platform_mod
from clustercheck.record.schema import PlanItem
from clustercheck.run.options import Options
from clustercheck.run.launcher import Launcher
from clustercheck.run.pool import PoolKey, WorkerPool
from clustercheck.run.rundir import make_dir

FACTS_TIMEOUT = 120.0  # seconds for every node's first rank to read NVML and sysfs


def node_facts(launcher: Launcher, nodes: list[str], options: Options, here_facts: platform_mod.Facts | None = None
               ) -> tuple[dict[str, platform_mod.Facts], WorkerPool | None]:
    """Each node's platform facts, read by its first rank: the controller may be a login or head
    node without GPUs. Where the controller is the only node (the local launcher, or a one-node
    allocation it runs in) its own facts are the node's and no pool starts. Otherwise the pool a
    CPU run would start first (gloo, --ranks or 2 per node) starts now and its first ranks answer."""
    here = socket.gethostname()
    if not launcher.remote or nodes in ([here], [here.split(".")[0]]):
        return {nodes[0]: cuda_counted(here_facts or platform_mod.read_facts())}, None
    logs = options.out / f".starting-{os.getpid()}" / "logs"
    fresh = not options.out.exists()
    make_dir(options.out, logs)
    number = 0
    while True:  # each try that fails without stopping the run loses a node, and the last node is never lost
        number += 1
        key = PoolKey("gloo", (options.ranks or 2) * len(nodes))
        pool = WorkerPool(key, logs, number, launcher)
        try:
            pool.start()
            answers = pool.run("ping", {"facts": True, **_fault(options, key.nranks)}, FACTS_TIMEOUT)
            break
        except KeyboardInterrupt:  # stopped before any check ran: no record, so no --out left behind (README)
            pool.close(kill=True)
            shutil.rmtree(logs.parent, ignore_errors=True)
            if fresh:
                with contextlib.suppress(OSError):  # only the --out this run made, and only while it is empty
                    options.out.rmdir()
            raise
        except HarnessError as exc:  # the ranks' own words stay in their logs, named here; a harness error (3)
            pool.close(kill=True)
            lost = _lost(launcher, nodes, exc, key.nranks)
            if not lost:
                raise HarnessError(f"could not read the nodes' platform facts: {str(exc).splitlines()[0]} "
                                   f"(the ranks' output: {pool.log_dir})") from None
            nodes = [n for n in nodes if n not in lost]
    try:
        facts = {a["host"]: platform_mod.Facts.from_dict(a["facts"]) for a in answers if "facts" in a}
    except (KeyError, TypeError, ValueError, AttributeError) as exc:  # a rank's facts of another shape: no traceback
        pool.close(kill=True)
        raise HarnessError(f"could not read the nodes' platform facts: a rank's answer is not of this clustercheck's "
                           f"shape ({type(exc).__name__}: {str(exc)[:120]}); one clustercheck across the run "
                           f"(the ranks' output: {pool.log_dir})") from None
    silent = [n for n in nodes if n not in facts]
    if silent:  # a launcher that gave a node no local rank 0: nothing was read there
        pool.close(kill=True)
        raise UserError(f"no platform facts from node(s) {', '.join(silent)}: no rank with local rank 0 there")
    try:
        launcher.check_facts(facts)
    except BaseException:
        pool.close(kill=True)
        raise
    return facts, pool


def cuda_counted(facts: platform_mod.Facts) -> platform_mod.Facts:
    """`facts` with the GPUs CUDA sees (torch) where NVML lists none and the PCI bus shows NVIDIA GPUs: a
    container given the GPUs but not NVML's library. A rank reads that count itself; a local run has no rank
    yet, and judged by NVML alone its GPUs ran as gloo ranks and failed `GPU count 0`, the harness's view
    blamed on the node. torch is imported only then (the controller otherwise never pays for it)."""
    if facts.gpus or not facts.pci_gpus or facts.torch_gpus is not None:
        return facts
    try:
        import torch
    except ImportError:  # no torch here: nothing but NVML to count with, and the ranks will say so
        return facts
    return dataclasses.replace(facts, torch_gpus=torch.cuda.device_count())


def _lost(launcher: Launcher, nodes: list[str], exc: HarnessError, nranks: int) -> list[str]:
    """The nodes `exc` found unreachable or dead, or whose ranks did not answer where the others' did (a rank
    killed, NVML hung past the timeout or raising on that node alone), left out as absent (`lost before any
    check: <why>`), where the launcher can start its pools without them and some nodes are left: they are then
    untested and the run INCOMPLETE, as for a node whose agent never joined (a node lost a moment earlier), never
    the whole run's error: one broken node would otherwise stop a gate of a thousand. [] where the run cannot go
    on without them (every node failed alike: it then stops, a harness error)."""
    found = {*(getattr(exc, "unreachable", None) or (exc.nodes if isinstance(exc, Unreachable) else ()))}
    if getattr(exc, "answered", None):  # ranks did answer: not a start that failed everywhere (then none is to blame)
        found |= {launcher.node_of(r, nranks) for r in getattr(exc, "failed", ())}
    lost = [n for n in nodes if n in found]
    if not launcher.shrinks or not lost or len(lost) == len(nodes) or launcher.over(settle=True) is not None:
        return []  # (the launch plane ended: no node is lost, and the run stops, INCOMPLETE: plugin.py)
    first = str(exc).splitlines()[0]
    whys = {n: f"lost before any check: {launcher.why_lost(n) or first}" for n in lost}
    launcher.leave_out(lost)  # no later pool places a rank there
    launcher.absent = {**launcher.absent, **whys}
    launcher.nodes = tuple(n for n in launcher.nodes if n not in whys)
    print("clustercheck: " + "; ".join(f"{n} {why}" for n, why in whys.items()) + ": untested, and the run is "
          "INCOMPLETE; reading the other nodes' facts again", file=sys.stderr, flush=True)
    return lost


def without_lost(plan: list[PlanItem], absent: Mapping[str, str], nodes: list[str]) -> list[PlanItem]:
    """The plan made at collection, less the items of nodes lost while their facts were read (`absent` plans
    them again, as for nodes that never joined: record/entries.py absent_plan), each item of every node over
    the nodes left."""
    return [item if item["node"] else {**item, "nodes": list(nodes)} for item in plan
            if absent.keys().isdisjoint((item["node"] or "").split(","))]


def lost_before(where: str | None, absent: Mapping[str, str]) -> NeverJoined | None:
    """What an item collected before its node was lost while the facts were read raises: not run, naming the
    node and why, as an item of a node that never joined (NeverJoined: the reports count it so)."""
    gone = [n for n in (where or "").split(",") if n in absent]
    if not gone:
        return None
    return NeverJoined(f"not run: {', '.join(gone)} never took part ("
                       + "; ".join(f"{n}: {absent[n]}" for n in gone) + ")", tuple(gone))


def _fault(options: Options, world: int) -> dict[str, dict[str, object]]:
    """The test-only fault asked for the facts pool (`--cc-inject-fault facts:KIND[@RANK]`), or none."""
    fault = options.faults.get("facts")
    if fault is None:
        return {}
    kind, rank, _ = fault
    return {"fault": {"kind": kind, "rank": world - 1 if rank is None else rank}}
