"""Running one check on the rank pools: its scope's rounds as groups of ranks, a failure kept to the items
whose ranks it touched, NCCL's untimed tuning pass, and how long the ranks worked. Knows nothing of any
measure kind beyond what `checks.Kind` says."""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Any, Mapping

from clustercheck.run import scopes
from clustercheck.run.applies import applies
from clustercheck.kinds import KINDS
from clustercheck.kinds.base import Answers
from clustercheck.judging.measurement import Outcome
from clustercheck.errors import HarnessError, NeverJoined, Skip
from clustercheck.localize.topology import Topology, source_of
from clustercheck.run.options import Options
from clustercheck.run.failure import RankFailure
from clustercheck.run.losses import Losses
from clustercheck.run.pool import PoolKey, WorkerPool
from clustercheck.run.pools import PoolManager
from clustercheck.run.scopes import Where
from clustercheck.kinds.base import CheckSpec

class _Shrunk(Exception):
    """A node was lost during a localize pass: the pass ends, and runs again on the nodes left."""


Round = tuple[list[tuple[Where, list[int]]], Any]  # (item, its global ranks) groups; the groups argument


@dataclass(frozen=True)
class Layout:
    """Where the ranks are: the backend, the nodes and the ranks per node."""

    backend: str
    nodes: list[str]
    per_node: int

    @property
    def nranks(self) -> int:
        return self.per_node * len(self.nodes)


class Runner:
    def __init__(self, pools: PoolManager, options: Options, layout: Layout, topology: Topology | None = None) -> None:
        self.pools = pools
        self.options = options
        self.layout = layout
        self.topology = topology  # --topology, read once when the session started, cut to the run's nodes
        self.repetition = 1  # of a repeated run (--repeat, --duration): a fault may target one
        # --counters: each node's last snapshot (as_dict), and per node what rose in the last check's window
        self.snapshots: dict[str, dict[str, Any]] = {}
        self.windows: dict[str, Any] = {}
        self.windows_of: str | None = None  # the check whose windows `windows` holds (none of an earlier one)
        # nodes lost mid-run (unreachable or dead) -> "h3 was lost during <check> (<why>)" ("... during <check> in
        # repetition <n> (...)" in a repeated run): no later pool has ranks there (where the launcher `shrinks`),
        # and each later item of theirs is an error saying so (run/losses.py: and whom it blames)
        self.losses = Losses(layout.nodes)
        self.lost = self.losses.lost

    def live(self) -> list[str]:
        """The run's nodes still answering: its nodes less those lost mid-run (`lost`)."""
        return [n for n in self.layout.nodes if n not in self.lost]

    def groups(self, items: list[Where], pool: WorkerPool) -> tuple[list[tuple[Where, list[int]]], Any]:
        """One round's (item, global ranks) groups on `pool`, with the groups argument for the ranks (None:
        the whole world)."""
        by_node: dict[str, list[int]] = {}
        for r in pool.ranks:
            by_node.setdefault(r["host"], []).append(r["rank"])
        groups = [(where, [r for node in scopes.members(where, self.live()) for r in by_node[node]]) for where in items]
        whole = len(groups) == 1 and len(groups[0][1]) == len(pool.ranks)
        return groups, None if whole else [g for _, g in groups]

    def applies(self, check: CheckSpec) -> None:
        """Skip (with the reason) a check this run cannot do; an error where nodes that never joined would
        have made enough, or a group cannot work (run/applies.py, which `verify` asks again); an error naming
        the nodes lost mid-run where the run's nodes would have done it and those left cannot."""
        absent = list(self.pools.launcher.absent)  # the launcher knows who never joined
        try:
            applies(check, self.layout.backend, len(self.live()), self.layout.per_node, absent)
        except Skip as skip:
            if not self.lost:
                raise
            try:  # as the run was when it started: a skip then is the run's own, whatever was lost since
                applies(check, self.layout.backend, len(self.layout.nodes), self.layout.per_node, absent)
            except Skip:
                raise skip from None
            except NeverJoined:
                pass
            raise self.losses.blame(f"not run: {check.id} cannot run on the {len(self.live())} node(s) left ({skip}): "
                                    f"{'; '.join(self.lost.values())}", tuple(self.lost)) from None

    def lose(self, check: CheckSpec, exc: HarnessError) -> bool:
        """The nodes `exc` found unreachable or dead, left out of every later pool where the launcher can start
        pools without them: the run goes on on the nodes still answering, and each later item of a lost node
        is an error naming it (`lost`). True when a node was newly lost so."""
        launcher = self.pools.launcher
        new = [n for n in getattr(exc, "unreachable", ()) if n in self.layout.nodes and n not in self.lost]
        self.losses.ask(launcher, new)  # Kubernetes may have ended its agent: then the node is not to blame
        if not new or not launcher.shrinks or len(new) >= len(self.live()):
            return False
        during = f"{check.id} in repetition {self.repetition}" if self.options.repeating else check.id
        for node in new:
            self.lost[node] = f"{node} was lost during {during} ({self.losses.why(launcher, node)})"
        launcher.leave_out(new)
        for key in list(self.pools.pools):  # every pool spans the lost nodes: none serves a later check
            self.pools.discard(key)
        return True

    def _start(self, check: CheckSpec) -> WorkerPool:
        """The check's pool on the nodes still answering; a node found lost as its ranks start is left out
        and the pool starts again without it (RankFailure where it cannot)."""
        while True:
            try:
                return self.pools.get(self._key(check, self.log_mode("init")))
            except RankFailure as exc:
                if not self.lose(check, exc):
                    raise
                self.applies(check)  # the nodes left may be too few for it: an error naming the lost

    def _gone(self, items: list[Where]) -> tuple[list[Where], dict[Where, Any]]:
        return self.losses.gone(items)

    def left_out(self, where: Where, outcome: Outcome) -> Outcome:
        """An item over every node (scope cluster) measured once nodes were lost mid-run: it measured the nodes
        left (the ones a training run would be given), and says so in a note naming the lost ones; its pool's
        `nodes` are those it measured (its result's `nodes`)."""
        if where is not None or not self.lost:
            return outcome
        note = (f"{','.join(self.lost)}: lost mid-run, so this item measured {len(self.live())} of the run's "
                f"{len(self.layout.nodes)} nodes ({', '.join(self.live())}): {'; '.join(self.lost.values())}")
        return dataclasses.replace(outcome, notes=(*outcome.notes, note), pool={**outcome.pool, "nodes": self.live()})

    def run(self, check: CheckSpec, expect: Mapping[str, Any]) -> dict[Where, tuple[Answers, dict[str, Any]] | HarnessError]:
        """Every item of `check`: its ranks' answers with the pool that measured them, or the error it gets.
        Items are planned over the run's nodes; those of nodes lost mid-run are errors naming them."""
        self.applies(check)
        self.windows, self.windows_of = {}, check.id
        kind = KINDS[check.measure]
        rounds = scopes.rounds(check.scope, list(self.layout.nodes), self.options.pair_strategy, self.options.pair_seed)
        out: dict[Where, tuple[Answers, dict[str, Any]] | HarnessError] = {}
        try:
            pool = self._start(check)
        except RankFailure as exc:  # an agent found silent as the ranks start: its node is named unreachable
            if self.options.counters and self.snapshots:  # its window closes all the same (a rank's Xid is its)
                self._close_window(self._key(check, self.log_mode("init")), check)
            return self._lost([where for items in rounds for where in items], exc)
        params = self._with_fault(check, kind.task(check, expect))
        infos = [self._pool_info(pool, check)]
        if self.options.counters and not self.snapshots:
            self.snapshots = self._snapshot(pool, check)  # the first window opens here
        t0, tuning = time.monotonic(), 0.0
        for number, planned in enumerate(rounds):
            items, gone = self._gone(planned)
            out.update(gone)
            failure: RankFailure | None = None
            if items and not pool.alive():  # an earlier round lost a rank: the rest run on a fresh pool
                try:
                    pool = self._start(check)
                except HarnessError as exc:
                    out.update(self._lost([where for later in rounds[number:] for where in later if where not in out],
                                          exc, "not measured: "))
                    break
                infos.append(self._pool_info(pool, check))
                items, gone = self._gone(items)  # the start may have lost another node
                out.update(gone)
            if not items:
                continue
            groups, arg = self.groups(items, pool)
            try:
                answers = dict(enumerate(pool.run(check.measure, params, check.timeout, groups=arg,
                                                  runner=kind.runner)))
            except RankFailure as exc:
                self.pools.discard(pool.key)
                failure, answers = exc, exc.answered
                self.lose(check, exc)  # the later rounds, and checks, go on without its nodes
            except HarnessError as exc:
                self.pools.discard(pool.key)
                self._close_after_error(pool.key, exc)
                raise
            t1 = time.monotonic()
            tuned, tuning_error = self._tuning_pass(check, params, arg) if kind.tuning_pass and not failure \
                else (None, "")
            tuning += time.monotonic() - t1
            for where, ranks in groups:
                if failure is not None and not failure.failed.isdisjoint(ranks):
                    out.update(self._lost([where], failure))  # the whole story, the cause first: it may be
                    continue  # on another node than this item's
                out[where] = (Answers(check, [answers[r] for r in ranks], [pool.ranks[r] for r in ranks],
                                      self.layout.backend, tuned and [tuned[r] for r in ranks], tuning_error),
                              infos[-1])
        for info in infos:
            # how long the ranks worked on this check, all nodes or pairs of it together, pool starts excluded
            info["measure_seconds"] = round(time.monotonic() - t0 - tuning, 3)
            if kind.tuning_pass and self.log_mode("tuning") != "off":  # NCCL's untimed pass, its pool's start included
                info["tuning_seconds"] = round(tuning, 3)
            info["rounds"] = len(rounds)
        if self.options.counters:
            self._close_window(self._key(check, self.log_mode("init")), check)
        return out

    def _lost(self, items: list[Where], exc: HarnessError, prefix: str = "") -> dict[Where, Any]:
        return self.losses.cost(items, exc, prefix)

    def localize(self, check: CheckSpec, threshold: float, unit: str = "GB/s") -> tuple[dict[Where, Any], list[dict[str, Any]], dict[str, Any]]:
        """`scope: localize`: the planner's rounds on this run's pool (a rank that fails costs its group a
        result, and the next round gets a fresh pool; a node lost mid-check is left out and the rounds run
        again on the nodes left, its item an error naming it); per item (node, None) its verdicts and
        message, the rounds as rows, and the pool's info."""
        from clustercheck.localize.check import localize

        self.applies(check)
        self.windows, self.windows_of = {}, check.id
        kind = KINDS[check.measure]
        key = self._key(check, self.log_mode("init"))
        params = self._with_fault(check, kind.task(check, {}))
        topology = self.topology
        while True:  # again on the nodes left when one is lost mid-check: its ranks, and their numbers, change
            try:
                pool = self._start(check)  # on the nodes still answering
            except RankFailure as exc:  # every item of it is lost: those that stopped answering are named
                lost = self.losses.blame(str(exc), exc.unreachable) if exc.unreachable else exc
                self._close_after_error(self._key(check, self.log_mode("init")), lost)  # its window closes too
                raise lost from None
            key, info = pool.key, self._pool_info(pool, check)
            if self.options.counters and not self.snapshots:
                self.snapshots = self._snapshot(pool, check)  # the first window opens here, as in `run`
            ranks_of: dict[str, list[int]] = {}
            for r in pool.ranks:
                ranks_of.setdefault(r["host"], []).append(r["rank"])
            t0 = time.monotonic()
            info["topology"] = "none" if topology is None else \
                f"{source_of(str(self.options.topology))} ({len(set(topology.leaf_of.values()))} leaf switch(es))"
            found: dict[Where, Any]
            try:
                found, rows = localize(self.live(), ranks_of, threshold, self._localize_run(check, params, pool),
                                       check.id, topology=topology, unit=unit, judge_at=check.params.get("judge_at"),
                                       checked=bool(check.params.get("check_iters", 1)))
            except _Shrunk:
                if len(live := self.live()) >= 2:
                    continue
                # too few left to localize (the planner needs 2): nobody is judged, each item says why
                why = (f"not judged: {len(live)} node is left ({', '.join(live)}) after {', '.join(self.lost)} "
                       f"{'was' if len(self.lost) == 1 else 'were'} lost: localizing needs at least 2")
                found, rows = {where: HarnessError(why) for where in [*live, None]}, []
            except HarnessError as exc:
                self._close_after_error(key, exc)
                raise
            break
        info["measure_seconds"], info["rounds"] = round(time.monotonic() - t0, 3), max((r["round"] for r in rows), default=0)
        found.update(self._gone(list(self.lost))[1])  # a node lost before or in the check: an error naming it
        if self.options.counters:
            self._close_window(key, check)
        return found, rows, info

    def _localize_run(self, check: CheckSpec, params: dict[str, Any], pool: WorkerPool) -> Any:
        """The planner's `run` on `pool`: a rank that fails costs its group a result and the next round gets
        a fresh pool; a node lost (the launcher shrinks) ends the pass (_Shrunk), to run again without it."""
        kind, current = KINDS[check.measure], [pool]

        def run(groups: list[list[int]]) -> dict[int, Any]:
            try:
                return dict(enumerate(current[0].run(check.measure, params, check.timeout, groups=groups,
                                                     runner=kind.runner)))
            except RankFailure as exc:
                self.pools.discard(current[0].key)
                live = len(self.live())
                if self.lose(check, exc):
                    raise _Shrunk() from exc
                current[0] = self._start(check)  # may lose a node too: then its ranks are others'
                if len(self.live()) < live:
                    raise _Shrunk() from exc
                return {**dict.fromkeys((r for g in groups for r in g), exc), **exc.answered}  # a silent rank: why
        return run

    SNAPSHOT_TIMEOUT = 60.0

    def _snapshot(self, pool: WorkerPool, check: CheckSpec | None = None) -> dict[str, dict[str, Any]]:
        """host -> a snapshot of its counters and kernel log (its first rank's), the log read after that
        node's last snapshot; HarnessError when a node's first rank could not take one. A node lost while
        they take it (`check`'s) is left out and the nodes left take it again: it has no window, and its
        items are errors naming it, where the snapshot's failure would have errored every node's."""
        def take(on: WorkerPool) -> list[Any]:
            return on.run("counters", {"previous": self.snapshots}, self.SNAPSHOT_TIMEOUT,
                          runner="clustercheck.counters.snapshot:rank_snapshot")

        try:
            answers = take(pool)
        except RankFailure as exc:
            if check is None or not self.lose(check, exc):
                raise
            answers = take(self._start(check))
        return {a["snapshot"]["host"]: a["snapshot"] for a in answers if a.get("snapshot")}

    allowances: Mapping[str, Any] | None = None  # the profile's counters: block; None: the built-in allowances

    def _close_window(self, key: PoolKey, check: CheckSpec | None = None) -> None:
        """Snapshot every node after the check and judge what rose since its last snapshot: the window is
        the check, with whatever happened since the previous check's end (nothing falls between windows)."""
        from clustercheck.counters import allowances
        from clustercheck.counters.delta import delta
        from clustercheck.counters.facts import Snapshot

        pool: WorkerPool | None = None
        try:  # any pool whose ranks still answer will do; a fresh one if a rank died in the check
            pool = self._answering(key) or self.pools.get(key)
            after = self._snapshot(pool, check)
        except HarnessError as exc:  # every node's window reads "could not be read": never silently dropped
            self.pools.discard(pool.key if pool is not None else key)
            self.windows = {node: f"counters could not be read after the check: {str(exc).splitlines()[0]}"
                            for node in self.layout.nodes}
            return  # self.snapshots kept: the next window starts where the last good one ended, its log cursor
        self.windows = {}
        for node in self.layout.nodes:
            if node not in after or node not in self.snapshots:
                self.windows[node] = f"no counter snapshot from {node} {'after' if node not in after else 'before'} the check"
                continue
            self.windows[node] = allowances.judge(delta(Snapshot.from_dict(self.snapshots[node]),
                                                        Snapshot.from_dict(after[node])), self.allowances)
        self.snapshots = after

    def _answering(self, key: PoolKey) -> WorkerPool | None:
        """The live pool of `key`, else any live pool over the nodes still answering (a snapshot needs no
        check's environment), else None."""
        nranks = self.layout.per_node * len(self.live())
        pools = [p for k, p in list(self.pools.pools.items()) if k == key] + list(self.pools.pools.values())
        return next((p for p in pools if p.key.nranks == nranks and p.alive()), None)

    def _close_after_error(self, key: PoolKey, exc: HarnessError) -> None:
        """--counters, a check that ended in a harness error: its window closes all the same (else the next
        check's window would hold this one's events and be blamed for them), and what it found beyond its
        allowances joins the error's first line, as no item of the check gets verdicts."""
        if not self.options.counters or not self.snapshots:
            return
        from clustercheck.judging.windows import errored_check

        self._close_window(key)
        if said := errored_check(self.windows):
            first, sep, rest = str(exc).partition("\n")
            exc.args = (f"{first}; counters in the check's window: {said}{sep}{rest}", *exc.args[1:])

    def _key(self, check: CheckSpec, nccl_log: str) -> PoolKey:
        """The pool a check's task runs in: one per backend, rank count (over the nodes still answering),
        environment and NCCL log mode."""
        return PoolKey(self.layout.backend, self.layout.per_node * len(self.live()), check.env, nccl_log=nccl_log)

    def _pool_info(self, pool: WorkerPool, check: CheckSpec) -> dict[str, Any]:
        return {"number": pool.number, "pids": pool.pids, "backend": self.layout.backend, "ranks": pool.ranks,
                "env": dict(check.env), "starts": self.pools.starts}

    def log_mode(self, mode: str) -> str:
        """What NCCL logs in a pool for `mode` (init: timed pools, tuning: the sibling), per --nccl-log."""
        wanted = {"full": ("init", "tuning"), "init": ("init",), "off": ()}[self.options.nccl_log]
        return mode if self.layout.backend == "nccl" and mode in wanted else "off"

    def _tuning_pass(self, check: CheckSpec, params: dict[str, Any],
                     groups: Any) -> tuple[list[dict[str, Any]] | None, str]:
        """Each size once more in the untimed sibling pool, whose NCCL logs its algorithm and protocol per
        call: (per-rank results, why there are none). Its failure costs the labels only: the timed
        measurement stands."""
        if self.log_mode("tuning") == "off":
            return None, ""
        key = self._key(check, "tuning")
        task = {k: v for k, v in params.items() if k != "fault"}  # a test fault belongs to the timed run
        try:
            return self.pools.get(key).run(check.measure, {**task, "tuning_pass": True}, check.timeout,
                                           groups=groups, runner=KINDS[check.measure].runner), ""
        except HarnessError as exc:
            self.pools.discard(key)
            return None, f"the tuning pass failed, so no algorithm is known: {str(exc).splitlines()[0]}"

    def _with_fault(self, check: CheckSpec, params: dict[str, Any]) -> dict[str, Any]:
        """The task's parameters, with the test-only fault for this check when one was asked for."""
        fault = self.options.faults.get(check.id)
        if fault is None:
            return params
        kind, rank, repetition = fault
        if repetition is not None and repetition != self.repetition:
            return params
        return {**params, "fault": {"kind": kind, "rank": self.layout.per_node * len(self.live()) - 1 if rank is None else rank}}
