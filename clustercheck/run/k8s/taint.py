"""Taints as the drain (--taint, --taint-dry-run) and their undoing (clustercheck resume --k8s).

A failed node gets the taint `clustercheck.io/failed=<check>:NoSchedule` (no new pod lands there; what
runs stays, as with a Slurm drain), the label `clustercheck.io/failed=<check>` (to find such nodes with
a selector), and the annotations `clustercheck.io/reason` (the verdict, in full) and
`clustercheck.io/run` (the run directory's name). The convention is AWS's and GCP's GPU health checks'
(a NoSchedule taint with a label and an annotation giving the reason).

`resume --k8s` removes them only where clustercheck set them: the node carries our run annotation, and
only the very taint clustercheck sets (our key, NoSchedule, the value of our label). A node with the same
taint key but without the annotation was tainted by someone else, and is listed and left alone; so is a
taint with our key and another effect or value on a node we tainted (an operator's `...=ticket-42:NoExecute`).
"""

from __future__ import annotations

import shlex
import sys
from typing import Any, Mapping

from clustercheck.errors import HarnessError, UserError
from clustercheck.exitcodes import Exit
from clustercheck.run.k8s.api import Conflict
from clustercheck.run.k8s.labels import label_value
from clustercheck.record.schema import DrainEntry

KEY = "clustercheck.io/failed"
REASON = "clustercheck.io/reason"
RUN = "clustercheck.io/run"
EFFECT = "NoSchedule"
ATTEMPTS = 4  # a patch refused for a stale resourceVersion is read, checked and sent again up to this many times


def precheck() -> None:
    """--taint, before anything is measured: credentials, and get and patch on nodes (UserError in one line),
    not after a 4-hour burn-in."""
    from clustercheck.run.k8s.api import Need, connect

    try:
        kube = connect()
    except UserError as exc:
        raise UserError(f"--taint: {exc}") from None
    missing = kube.missing([Need("get", "nodes", namespaced=False), Need("patch", "nodes", namespaced=False)])
    if missing:
        raise UserError(f"--taint: forbidden ({kube.source}): this identity may not "
                        f"{', '.join(map(str, missing))} (docs/kubernetes.md: RBAC)")


def commands(node: str, why: str, run: str) -> list[list[str]]:
    """What --taint does to one node excluded for `why` (`<check> <verdict>`), as kubectl would say it (what
    --taint-dry-run prints)."""
    value = label_value(why.split()[0])
    return [["kubectl", "taint", "nodes", node, f"{KEY}={value}:{EFFECT}", "--overwrite"],
            ["kubectl", "label", "nodes", node, f"{KEY}={value}", "--overwrite"],
            ["kubectl", "annotate", "nodes", node, f"{REASON}={why}", f"{RUN}={run}", "--overwrite"]]


def taint(nodes: Mapping[str, str], run: str, dry_run: bool, kube: Any = None) -> list[DrainEntry]:
    """Taint each excluded node (node -> its reason, `<check> <verdict>`); with `dry_run` only say how.
    Each node's outcome is one entry (rc None: not run, or left alone; 0: done; 1: refused, with why).
    A node that already carries our taint key without our run annotation is someone else's: left alone."""
    out: list[DrainEntry] = []
    unread = ""  # a dry run without credentials: why the nodes were not read
    if kube is None:
        from clustercheck.run.k8s.api import connect

        try:
            kube = connect()
        except UserError as exc:
            if dry_run:  # --taint-dry-run needs no credentials: it says what it would do, unread
                unread = f" (the node was not read: {exc})"
            else:
                return [{"command": cmd, "rc": 1, "output": str(exc)} for node, why in nodes.items()
                        for cmd in commands(node, why, run)[:1]]
    for node, why in nodes.items():
        cmds = commands(node, why, run)
        if dry_run:  # what a real run would do: it reads the node first, and leaves someone else's taint alone
            here = unread  # no credentials: no node is read; else this node's own read error, if any
            try:
                theirs = None if unread else _held(kube.node(node))
            except (UserError, HarnessError) as exc:
                theirs, here = None, f" (the node could not be read: {exc})"
            if theirs is not None:
                out.append({"command": cmds[0], "rc": None, "output": f"dry run: would leave it alone: already "
                            f"tainted {theirs} by someone else (no {RUN} annotation)"})
            else:
                out += [{"command": cmd, "rc": None, "output": f"dry run{here}"} for cmd in cmds]
            continue
        try:
            for attempt in range(ATTEMPTS):  # a node written meanwhile (409 Conflict): _apply reads and checks again
                try:
                    theirs = _apply(kube, node, label_value(why.split()[0]), why, run)
                    break
                except Conflict:
                    if attempt == ATTEMPTS - 1:
                        raise
            if theirs is not None:  # someone else's quarantine: resume --k8s must never be able to lift it
                out.append({"command": cmds[0], "rc": None, "output": f"left alone: already tainted {theirs} by "
                            f"someone else (no {RUN} annotation)"})
                continue
            out += [{"command": cmd, "rc": 0, "output": "done through the Kubernetes API"} for cmd in cmds]
        except (UserError, HarnessError) as exc:  # said in the record's drain entry: the reports are written all the same
            out.append({"command": cmds[0], "rc": 1, "output": str(exc)})
    return out


def _apply(kube: Any, node: str, value: str, why: str, run: str) -> str | None:
    """Taint, label and annotate `node`; None when done. A node already tainted with our key but without our
    run annotation was tainted by someone else: it is left as it is, and its taint is returned."""
    current = kube.node(node)
    if (theirs := _held(current)) is not None:
        return theirs
    taints = [_as_dict(t) for t in (current.spec.taints or []) if not (t.key == KEY and t.effect == EFFECT)]
    taints.append({"key": KEY, "value": value, "effect": EFFECT})
    # the node's resourceVersion makes the write conditional: a taint added meanwhile is never lost
    kube.patch_node(node, {"metadata": {"resourceVersion": current.metadata.resource_version,
                                        "labels": {KEY: value}, "annotations": {REASON: why[:1000], RUN: run}},
                           "spec": {"taints": taints}})
    return None


def _held(current: Any) -> str | None:
    """Our taint key on a node without our run annotation (someone else's quarantine), as it reads; else None."""
    held = [t for t in current.spec.taints or [] if t.key == KEY]
    if held and RUN not in (current.metadata.annotations or {}):
        return ", ".join(f"{KEY}={t.value or ''}:{t.effect}" for t in held)
    return None


def _as_dict(t: Any) -> dict[str, Any]:
    return {k: v for k, v in (("key", t.key), ("value", t.value), ("effect", t.effect),
                               ("timeAdded", t.time_added.isoformat() if t.time_added else None)) if v is not None}


def resume(hostlist_text: str | None, dry_run: bool, kube: Any = None) -> int:
    """`clustercheck resume --k8s [NODES] [--dry-run]`: untaint the nodes clustercheck tainted."""
    import hostlist

    from clustercheck.run.k8s.api import connect

    wanted = set(hostlist.expand_hostlist(hostlist_text)) if hostlist_text else None
    kube = kube or connect()
    ours, status = 0, 0
    for node in kube.nodes():
        name = node.metadata.name
        if wanted is not None and name not in wanted:
            continue
        mine = [t for t in node.spec.taints or [] if t.key == KEY]
        if not mine:
            continue
        annotations = node.metadata.annotations or {}
        if RUN not in annotations:
            print(f"left alone {name}: tainted {KEY} without the {RUN} annotation clustercheck sets, so not by "
                  "clustercheck")
            continue
        value = (node.metadata.labels or {}).get(KEY)
        exact = [t for t in mine if t.effect == EFFECT and value is not None and (t.value or "") == value]
        for t in mine:
            if t not in exact:
                print(f"left alone on {name}: the taint {KEY}={t.value or ''}:{t.effect}, not the one clustercheck "
                      f"set ({KEY}={value or '?'}:{EFFECT})")
        if not exact:
            continue
        ours += 1
        cmds = [["kubectl", "taint", "nodes", name, f"{KEY}:{EFFECT}-"], ["kubectl", "label", "nodes", name, f"{KEY}-"],
                ["kubectl", "annotate", "nodes", name, f"{REASON}-", f"{RUN}-"]]  # key and effect name one taint
        if dry_run:
            for cmd in cmds:
                print(f"would run: {shlex.join(cmd)}")
            continue
        try:
            for attempt in range(ATTEMPTS):  # a node written meanwhile (409 Conflict): read again, and check again
                keep = [_as_dict(t) for t in node.spec.taints if t not in exact]
                try:
                    kube.patch_node(name, {"metadata": {"resourceVersion": node.metadata.resource_version,
                                                        "labels": {KEY: None}, "annotations": {REASON: None, RUN: None}},
                                           "spec": {"taints": keep}})
                    break
                except Conflict:
                    if attempt == ATTEMPTS - 1:
                        raise
                    node = kube.node(name)
                    value = (node.metadata.labels or {}).get(KEY)
                    exact = [t for t in node.spec.taints or [] if t.key == KEY and t.effect == EFFECT and
                             value is not None and (t.value or "") == value]
                    if not exact or RUN not in (node.metadata.annotations or {}):
                        raise UserError("no longer tainted by clustercheck once read again") from None
            print(f"untainted {name} (tainted by run {annotations[RUN]})")
        except (UserError, HarnessError) as exc:
            print(f"could not untaint {name}: {exc}", file=sys.stderr)
            status = 1
    if not ours:
        print("no node is tainted by clustercheck")
    return Exit.ERROR if status else Exit.PASSED
