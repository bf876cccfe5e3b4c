"""CheckSession: one clustercheck run inside a pytest session: the platform, the pools, the record, and
each item's outcome (measured by `runner`, judged by `judge`). Plain objects only; plugin.py wires them
to pytest."""

from __future__ import annotations

import copy
import dataclasses
import os
import shutil
import sys
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping

import hostlist

from clustercheck.judging import platform as platform_mod
from clustercheck.errors import ClusterCheckError, HarnessError, NoThreshold, UserError
from clustercheck.judging.expect import merged
from clustercheck.judging.fabric import RunFabric, run_fabric
from clustercheck.run.judge import Baseline, check_run, judge, rules_for
from clustercheck.judging.measurement import Outcome
from clustercheck.run.expect_read import refuse_unjudged, refuse_unread
from clustercheck.run.launch import make_launcher
from clustercheck.run.launcher import Over
from clustercheck.run.losses import lost_any
from clustercheck.run.fit import check_fits, least as _least
from clustercheck.run.nodefacts import lost_before, node_facts, without_lost
from clustercheck.run.options import Options
from clustercheck.run.rundir import check_latest, opening, point_latest, sweep_starting, unique
from clustercheck.run.pool import PoolKey, WorkerPool
from clustercheck.run.pools import PoolManager
from clustercheck.record import inputs
from clustercheck.record.io import RecordWriteError, RunWriter, load, now
from clustercheck.record.schema import REPORT_FORMAT, SCHEMA_VERSION, ExcludeEntry, PlanItem, ResultEntry, Selection, counts, slim
from clustercheck.run.runner import Layout, Runner
from clustercheck.run import scopes
from clustercheck.run.scopes import Where
from clustercheck.run import prestart
from clustercheck.run.zygote import end_shared as end_shared_zygote
from clustercheck.run.timings import TIMINGS
from clustercheck.record.entries import absent_plan, short_node_results
from clustercheck.kinds import KINDS
from clustercheck.kinds.base import CheckSpec, Rules
from clustercheck.judging.thresholds import Profile

Found = dict[Where, Outcome | ClusterCheckError]


class CheckSession:
    _cached_in = 1  # the repetition whose outcomes `_cache` holds

    def __init__(self, options: Options, argv: list[str]) -> None:
        self.options = options
        self.launcher = make_launcher(options)
        if options.topology is not None:  # a node under no switch: the user's error, before any agent starts
            from clustercheck.localize.topology import for_nodes

            for_nodes(options.topology, self.launcher.nodes)
        self.launcher.begin()
        if options.ranks is None and self.launcher.ranks_per_node:  # node agents said how many they run
            self.options = options = dataclasses.replace(options, ranks=self.launcher.ranks_per_node)
        self.argv = argv
        self.started = False
        self.facts: platform_mod.Facts | None = None
        self.profile: Profile | None = None
        self.pools: PoolManager | None = None
        self.runner: Runner | None = None
        self.record: RunWriter | None = None
        self.run_dir: Path | None = None
        self.results: list[ResultEntry] = []  # read back from the record at the end, for the summary
        self.backend = "gloo"
        self.nranks = 2
        self.per_node = 2
        self.nodes: list[str] = list(self.launcher.nodes)
        self._cache: dict[str, Found | Exception] = {}  # check.where -> this repetition's (`_cached_in`)
        self.exclusion: ExcludeEntry = {}
        self.baseline: Baseline | None = None
        self.expect: dict[str, Any] = {}  # the profile's expect: block with --expect over it
        self.fabric: RunFabric | None = None  # what multi-node floors depend on (judging/fabric.py)
        self.repetitions = 0  # repetitions of a repeated run that ran to their end
        self.stopped: str | None = None  # why clustercheck stopped the run before its end (disk space)
        self.over: tuple[str, Over] | None = None  # (the check, how) where the launch plane ended: the run stops
        self.selection: Selection | None = None  # fewer items than the suites hold: the plan line says so
        self.warnings: list[str] = []  # what the summary says of the run's input (run/judge.py near_misses)

    # -- start -----------------------------------------------------------------------------
    def start(self, checks: list[CheckSpec], suite_files: list[tuple[str, Path]],
              plan: list[PlanItem] | None = None) -> None:
        """Detect the platform, load and cross-check thresholds, open the run record and write the plan
        (every item this run sets out to measure). UserError on mistakes."""
        opts = self.options
        if opts.expect:  # a typed key no selected check reads would judge nothing and pass: refused first
            refuse_unread(opts.expect, checks, suite_files)
        check_latest(opts.out)  # before anything is measured: a `latest` clustercheck did not make is refused
        sweep_starting(opts.out)  # what a controller SIGKILLed while it started left under --out
        early = prestart.take()  # the local run's first pool, started before pytest was (run/prestart.py)
        if early is not None and self.launcher.remote:
            early.discard()
            early = None
        first: WorkerPool | None = None
        try:  # until the pools are the session's, a signal or a refusal here must end them
            topology = None
            if opts.topology is not None:  # a run node under no switch: the user's error, before any rank starts
                from clustercheck.localize.topology import for_nodes

                topology = for_nodes(opts.topology, self.nodes)
            nodes, first = node_facts(self.launcher, self.nodes, self.options, early.facts if early else None)
            self.nodes = [n for n in self.nodes if n in nodes]  # a node lost while they were read is absent
            self.facts = nodes[self.nodes[0]]
            if opts.platform:
                self.profile = opts.thresholds.load(opts.platform)
            else:
                self.profile = platform_mod.detect_nodes(opts.thresholds, nodes)
            self.warnings = check_run(checks, self.profile)  # each check's limits refused or fit; near-miss ids
            if opts.compare:
                self.baseline = Baseline(opts.compare, opts.out, opts.tolerance)
            self.backend, self.per_node = platform_mod.layout(opts.backend, opts.ranks, nodes)
            refuse_unjudged(opts.expect, checks, Layout(self.backend, self.nodes, self.per_node), self.profile,
                            list(self.launcher.absent))  # and one every check reading it cannot judge in this layout
            self.expect = merged(self.profile.expect, opts.expect)  # `topology` merged key by key
            self.fabric = run_fabric({n: f.as_dict() for n, f in nodes.items()}, self.backend, self.expect,
                                     self.profile.fabric)
            # refuse, before anything runs, a suite whose buffers cannot fit (never 7 minutes into the OOM killer);
            # a check this run skips for want of nodes holds no buffer
            gpu_free, gpu_where = _least(nodes, "gpu_memory_free")
            host_free, host_where = _least(nodes, "host_memory")
            check_fits([c for c in checks if c.min_nodes <= len(self.nodes)], self.per_node, self.backend,
                       gpu_free if self.backend == "nccl" else None, host_free, gpu_where, host_where)
            self._open(checks, suite_files, plan, nodes, first, early, topology)
        except BaseException as exc:
            _drop(exc, first, early, run_dir=self.run_dir)
            raise
        self.started = True
        assert self.run_dir is not None
        point_latest(opts.out, self.run_dir)  # a run that started: never a stub a signal left behind

    def _open(self, checks: list[CheckSpec], suite_files: list[tuple[str, Path]], plan: list[PlanItem] | None,
              nodes: dict[str, platform_mod.Facts], first: WorkerPool | None, early: prestart.Prestarted | None,
              topology: Any) -> None:
        """The run directory, its record and plan, and the session's pools, the first ones adopted."""
        opts = self.options
        assert self.profile is not None and self.facts is not None
        self.nranks = self.per_node * len(self.nodes)
        stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
        self.run_dir = unique(opts.out / f"{stamp}-{self.profile.name}")
        with opening(opts.out, self.run_dir):  # a full disk here: one line, and no stub run directory
            self.record = RunWriter(self.run_dir / "run.jsonl")
            kept = inputs.keep(self.run_dir, self.profile.file, self.profile.name, suite_files)  # exactly as run
            self.pools = PoolManager(self.run_dir / "logs", on_start=self._pool_started, launcher=self.launcher)
            self.runner = Runner(self.pools, opts, Layout(self.backend, self.nodes, self.per_node), topology)
            self.runner.allowances = self.profile.counters or None
            header: dict[str, Any] = {
                "type": "run", "schema": SCHEMA_VERSION, "started": now(), "argv": self.argv, "cwd": os.getcwd(),
                "platform": self.profile.name, "platform_detected": not opts.platform,
                "run_id": str(uuid.uuid4()), "thresholds": kept.thresholds, "suites": kept.suites,
                "facts": self.facts.as_dict(), "launcher": self.launcher.kind, "backend": self.backend, "ranks": self.nranks,
                "ranks_per_node": self.per_node, "counters": opts.counters,
                "nodes": self.nodes, "python": sys.executable, "report_format": REPORT_FORMAT,
                **({"absent": dict(self.launcher.absent)} if self.launcher.absent else {}),  # never joined: INCOMPLETE
                **({"expect": opts.expect} if opts.expect else {}),
                "fabric": {"line_rate_from_nodes": self.fabric.node_rate[1] if self.fabric and self.fabric.node_rate else None,
                           "rule": (self.profile.fabric.describe() if self.profile.fabric else "built in")},
                **({"repeat": {"count": opts.repeat} if opts.repeat else {"duration_s": opts.duration}}
                   if opts.repeating else {}),
                **({"node_facts": {n: f.as_dict() for n, f in nodes.items()}} if first is not None else {}),
            }
            self.record.append(header)
            if self.baseline is not None:
                self.baseline.now = header  # its like-for-like test reads this run's nodes, ranks and hardware
            self.record.append({"type": "plan", "items": [*without_lost(plan or [], self.launcher.absent, self.nodes),
                                                          *absent_plan(checks, self.launcher.absent, self._full_items)],
                                **({"selection": self.selection} if self.selection else {})})
        if not opts.ranks and self.backend == "nccl":
            for entry in short_node_results(platform_mod.short_nodes(nodes, self.per_node), self.per_node):
                self.record.append(entry)
        if first is not None:
            self._adopt(first)
        elif early is not None and (pool := early.ready()) is not None:
            self._adopt(pool)

    def _full_items(self, check: CheckSpec) -> list[Where]:
        """`check`'s items as a run with every planned node would have named them: the hosts in the order
        given (a pair is named in that order), else the nodes that joined and then those that never did."""
        planned = list(getattr(self.launcher, "hosts", None) or [*self.nodes, *self.launcher.absent])
        return [where for items in scopes.rounds(check.scope, planned, self.options.pair_strategy,
                                                 self.options.pair_seed) for where in items]

    def _adopt(self, pool: WorkerPool) -> None:
        """A pool started before the run directory existed (the facts pool, or a local run's first pool)
        joins the run: its logs move into the run directory (its ranks keep writing to the same files)
        and it serves the checks whose pool it already is, or ends."""
        assert self.pools is not None and self.run_dir is not None and self.runner is not None
        starting = pool.log_dir.parent
        pool.move_logs(self.run_dir / "logs")
        shutil.rmtree(starting, ignore_errors=True)
        self.pools.starts = pool.number
        self._pool_started(pool)
        if pool.key == PoolKey(self.backend, self.nranks, nccl_log=self.runner.log_mode("init")):
            self.pools.pools[pool.key] = pool
        else:
            pool.close()

    def _pool_started(self, pool: WorkerPool) -> None:
        assert self.record is not None
        TIMINGS.pool(pool.number, pool.start_seconds, pool.ranks)
        self.record.append({"type": "pool", "number": pool.number, "backend": pool.key.backend,
                            "nccl_log": pool.key.nccl_log,
                            "ranks": pool.ranks, "env": dict(pool.key.env), "pids": pool.pids, "started": now()})

    # -- one item --------------------------------------------------------------------------
    def measure(self, check: CheckSpec, item_id: str = "", where: Where = None) -> Outcome:
        """The outcome of one item: `where` is its node, node pair ("a,b") or None for scope cluster.
        The first item of a check measures every node (or pair) at once; the others read the cache."""
        if (lost := lost_before(where, self.launcher.absent)) is not None:  # collected, then lost (nodefacts)
            raise lost
        if (repetition := getattr(self.runner, "repetition", 1)) != self._cached_in:  # a burn-in's next one:
            self._cache, self._cached_in = {}, repetition  # each check is measured again, an error included
        if (key := check.where) not in self._cache:  # not its id alone: two suites may each have a check `ar`
            if self.runner is not None:
                self.runner.windows_of = None  # no window is this check's until its ranks ran (run, localize)
            try:
                self._cache[key] = self._measure_all(check)
            except Exception as exc:  # every item of the check gets the same error or skip
                self._cache[key] = exc
            if self.over is None and (over := self.launcher.over(settle=lost_any(self._cache[key]))) is not None:
                self.over, self.stopped = (check.id, over), self.stopped or over.why  # plugin: the run stops
        found = self._cache[key]
        if isinstance(found, ClusterCheckError) and self.runner is not None and self.runner.windows_of == check.id:
            if isinstance(failed := self._with_counters(check, where, copy.copy(found)), Outcome):
                return failed  # the whole check errored, and a window of this item's nodes failed (an Xid)
        if isinstance(found, Exception):  # each item raises its own copy, with every field the original had
            raise self._unmeasured(item_id, self._ended(check, where, copy.copy(found)))
        outcome = found.pop(where, None)  # each item reads its outcome once; nothing stays for the session
        if not found:
            del self._cache[key]
        if outcome is None:
            raise HarnessError(f"{check.id}: no result for {where} (its ranks took no part)")
        if isinstance(outcome, Exception):  # this node's or pair's ranks failed (or its own judging did)
            raise self._unmeasured(item_id, self._ended(check, where, outcome))
        if self.baseline is None:
            return outcome
        members = scopes.members(where, self.runner.live() if self.runner else self.nodes)
        verdicts, whys = self.baseline.regressions(check, item_id, outcome, members)
        hosts = hostlist.collect_hostlist(members)
        return dataclasses.replace(outcome, verdicts=outcome.verdicts + verdicts,
                                   notes=(*outcome.notes, *(f"{hosts}: {why}" for why in whys)))

    def _ended(self, check: CheckSpec, where: Where, exc: Exception) -> Exception:
        """An item's error, or, where the launch plane ended during its check, what that cost it (Over.cost)."""
        if self.over is None or self.over[0] != check.id or not isinstance(exc, HarnessError):
            return exc
        return self.over[1].cost(scopes.members(where, self.nodes))

    def _unmeasured(self, item_id: str, exc: Exception) -> Exception:
        """What an item that measured nothing raises: its own error or skip, or under --compare a skip of
        what passed in the baseline as not judged (Baseline.skipped_now)."""
        return exc if self.baseline is None else self.baseline.skipped_now(item_id, exc)

    def _measure_all(self, check: CheckSpec) -> Found:
        assert self.runner is not None and self.profile is not None
        self.runner.applies(check)  # a check that does not apply here is skipped, and needs no threshold
        try:
            rules = rules_for(check, self.profile, self.fabric)
            missing: NoThreshold | None = None
        except NoThreshold as exc:
            if not KINDS[check.measure].needs_tool:
                raise
            # whether the tool is on the nodes is known only once the ranks looked: a node without it is
            # skipped (its kind's judge says so), and only a node that ran it gets "no threshold"
            rules, missing = Rules({}), exc
        if check.scope == "localize":
            return self._localize(check, rules)
        found: Found = {}
        for where, answered in self.runner.run(check, self.expect).items():
            try:
                if isinstance(answered, HarnessError):
                    raise answered
                outcome = self.runner.left_out(where, judge(answered[0], rules, answered[1]))
                if missing is not None and all(v.passed for v in outcome.verdicts):
                    raise copy.copy(missing)  # a built-in verdict that failed (#wrong, a crash) stands without one
                found[where] = self._with_counters(check, where, outcome)
            except ClusterCheckError as exc:  # a skip or an error of this item's own (its ranks', a probe's)
                found[where] = self._with_counters(check, where, exc)
        return found

    def _localize(self, check: CheckSpec, rules: Any) -> Found:
        """`scope: localize`: each node's outcome from the planner's verdict (an error when it could not
        tell), the cluster item's from the links and uplinks it named; the group floor is busbw's limit."""
        from clustercheck.judging.measurement import Measurement
        from clustercheck.units import UNITS

        assert self.runner is not None
        limit = rules.limits.get("busbw")
        if limit is None or limit.op != ">=" or UNITS.get(limit.unit, ("",))[0] != "bandwidth":  # the planner's `>=`
            got = f" ({limit.origin}: {limit.op} {limit.value:g} {limit.unit})" if limit is not None else ""
            raise HarnessError(f"{check.id}: scope localize needs a busbw floor (>=, a bandwidth) for the check in "
                               f"the profile{got}")
        items, rows, info = self.runner.localize(check, float(limit.value), limit.unit)  # the planner's GB/s: check.py
        found: Found = {}
        for where, said in items.items():
            if isinstance(said, HarnessError):  # a node lost before the check (Runner.lost)
                found[where] = said
                continue
            verdicts, message = said
            if not verdicts:
                found[where] = HarnessError(f"{check.id}: {where or 'the cluster'}: {message}")
                continue
            # groups with no result beside a verdict (a node cleared elsewhere, a link named): said, never lost
            notes = (f"{where}: {message}" if where else message,) if message and (
                where is None or all(v.passed for v in verdicts)) else ()
            outcome = self.runner.left_out(where, Outcome(Measurement({}, {}, rows=rows), verdicts, info, notes=notes))
            found[where] = self._with_counters(check, where, outcome)
        return found

    def _with_counters(self, check: CheckSpec, where: Where,
                       outcome: Outcome | ClusterCheckError) -> Outcome | ClusterCheckError:
        """--counters: the outcome with a verdict per counter that rose on its nodes in the check (failed beyond
        its allowance; HarnessError if unread); an error or skip fails if its window did (windows.despite)."""
        assert self.runner is not None
        if not self.options.counters:
            return outcome
        from clustercheck.judging.windows import despite, item_verdicts, window_notes

        # a node lost mid-run has no window after it (no rank there): a cluster item measured the nodes left
        members, windows = scopes.members(where, self.runner.live()), self.runner.windows
        if isinstance(outcome, ClusterCheckError):
            return despite(check.id, outcome, windows, members)
        return dataclasses.replace(outcome, verdicts=outcome.verdicts + item_verdicts(check.id, windows, members),
                                   notes=outcome.notes + window_notes(windows, members))

    def add_result(self, entry: ResultEntry) -> None:
        # the record is the only copy: a week of burn-in must not grow the controller with every check
        if self.record is not None:
            self.record.append(entry)

    # -- end -------------------------------------------------------------------------------
    def kill_ranks(self) -> None:
        if self.pools is not None:
            self.pools.kill_all()

    def finish(self, interrupted: bool = False, signal: str | None = None, stopped: str | None = None) -> None:
        """Tell the ranks to leave; write the exclusion list and the end line. An interrupted run's end line
        says so (by which signal, or why clustercheck stopped it): every report then reads INCOMPLETE."""
        if not self.started:
            return
        assert self.pools is not None and self.record is not None and self.run_dir is not None
        self.pools.close(kill=interrupted, wait=False)  # after Ctrl-C ranks may be mid-collective: killed now
        self.results = [slim(r) for r in load(self.record.path).results]
        from clustercheck.run import exclusion

        try:
            self.exclusion = exclusion.write(self.run_dir, self.record, self.results, self.nodes,
                                             self.launcher.absent, self.options)
            self.record.append({"type": "exclude", **self.exclusion})
            self.record.append({"type": "end", "finished": now(), "counts": counts(self.results),
                                "pool_starts": self.pools.starts, "interrupted": interrupted,
                                "signal": signal if interrupted else None, **({"stopped": stopped} if stopped else {}),
                                **({"repetitions": self.repetitions} if self.options.repeating else {}),
                                **({"compare": self.baseline.judged(self.results)} if self.baseline else {})})
        except RecordWriteError:  # said when it first failed; without its end line the run reads INCOMPLETE
            pass
        self.record.close()

    def release(self) -> None:
        """After the reports: wait for the ranks (killed after 10 s), then let the node agents go."""
        if self.pools is not None:
            self.pools.close()
        self.launcher.close()

    def read_back(self) -> Any:
        """The record this run wrote, read as `clustercheck report` reads it; None, said in one line with the
        ranks released, when its own reader refuses it (a bug of clustercheck's: never a traceback at the end)."""
        from clustercheck.report import read

        assert self.run_dir is not None
        try:
            return read(self.run_dir / "run.jsonl")
        except UserError as exc:
            self.release()
            print(f"clustercheck: internal error: the run's record cannot be read back ({exc})", file=sys.stderr)
            return None


def _drop(exc: BaseException, *pools: WorkerPool | prestart.Prestarted | None, run_dir: Path | None) -> None:
    """End the pools started before the run directory existed, when the run will not start (`exc`). After
    a signal the zygote goes too, even mid-import (it would outlive the run by its torch import), and so
    does a run directory just opened: a signal before any check ran leaves no record (README)."""
    for pool in pools:
        if isinstance(pool, prestart.Prestarted):  # the run directory goes before the --out it made, if any
            pool.discard(also=run_dir if isinstance(exc, KeyboardInterrupt) else None)
        elif pool is not None:
            pool.close(kill=True)
            shutil.rmtree(pool.log_dir.parent, ignore_errors=True)
    if isinstance(exc, KeyboardInterrupt):
        end_shared_zygote()
        if run_dir is not None:
            shutil.rmtree(run_dir, ignore_errors=True)
