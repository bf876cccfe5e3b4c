"""Each node's platform facts at the start of a run, read where its ranks run (run/session.py asks)."""

from __future__ import annotations

import os
import socket

from clustercheck.errors import HarnessError, UserError
from clustercheck.judging import platform as platform_mod
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
        return {nodes[0]: here_facts or platform_mod.read_facts()}, None
    key = PoolKey("gloo", (options.ranks or 2) * len(nodes))
    logs = options.out / f".starting-{os.getpid()}" / "logs"
    make_dir(options.out, logs)
    pool = WorkerPool(key, logs, 1, launcher)
    try:
        pool.start()
        answers = pool.run("ping", {"facts": True, **_fault(options, key.nranks)}, FACTS_TIMEOUT)
    except HarnessError as exc:  # the ranks' own words stay in their logs, named here; a harness error (3)
        pool.close(kill=True)
        raise HarnessError(f"could not read the nodes' platform facts: {str(exc).splitlines()[0]} "
                           f"(the ranks' output: {pool.log_dir})") from None
    facts = {a["host"]: platform_mod.Facts.from_dict(a["facts"]) for a in answers if "facts" in a}
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


def _fault(options: Options, world: int) -> dict[str, dict[str, object]]:
    """The test-only fault asked for the facts pool (`--cc-inject-fault facts:KIND[@RANK]`), or none."""
    fault = options.faults.get("facts")
    if fault is None:
        return {}
    kind, rank, _ = fault
    return {"fault": {"kind": kind, "rank": world - 1 if rank is None else rank}}
