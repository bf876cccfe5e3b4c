"""CheckSession: one clustercheck run inside a pytest session (options, platform, pools, record).
Plain objects only; plugin.py wires them to pytest."""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from clustercheck import platform as platform_mod
from clustercheck.checks import GPU_ONLY, KINDS
from clustercheck.comm import describe as describe_comm
from clustercheck.comm import tag_rows
from clustercheck.formulas import PLACEMENTS as COLLECTIVES
from clustercheck.launch import make_launcher
from clustercheck.pairs import pair_name, schedule
from clustercheck.errors import UserError
from clustercheck.paths import display
from clustercheck.pool import HarnessError, PoolKey, PoolManager, RankFailure, WorkerPool
from clustercheck.results import (SCHEMA_VERSION, Measurement, RunRecord, Verdict, counts, evaluate, now, read_record,
                                  reduce_collective, reduce_p2p, reduce_subjects, sha256)
from clustercheck.suite import CheckSpec
from clustercheck.thresholds import Limit, Profile, load_named
from clustercheck.units import fmt


@dataclass(frozen=True)
class Options:
    platform: str | None
    thresholds: Path
    ranks: int | None
    backend: str  # auto, gloo or nccl
    out: Path
    faults: dict[str, tuple[str, int | None]] = field(default_factory=dict)  # check id -> (kind, rank)
    compare: str | None = None  # a saved run to judge regressions against, item by item
    launcher: str = "local"
    hosts: str | None = None
    host_command: str = "ssh {host} {python}"
    pair_strategy: str = "rounds"
    pair_seed: int = 0
    drain: bool = False
    drain_dry_run: bool = False
    tolerance: float = 0.05
    nccl_log: str = "full"  # full (init log + tuning pool), init, off


class Skip(Exception):
    """Hardware or layout absent: the check does not apply here."""


class SizeTooSmall(Exception):
    """A size that moves no data with this many ranks: a harness error naming the suite line."""


class NoThreshold(Exception):
    """The platform profile has no limit for this check: an error, never a silent pass."""


@dataclass(frozen=True)
class Outcome:
    measurement: Measurement
    verdicts: list[Verdict]
    pool: dict[str, Any]

    @property
    def passed(self) -> bool:
        return all(v.passed for v in self.verdicts)


# Correctness is not a threshold a platform may relax: any wrong element fails (nccl-tests #wrong).
WRONG_LIMIT_SOURCE = "correctness: every element of a reduction on exactly summable data must match (nccl-tests #wrong)"


class CheckSession:
    def __init__(self, options: Options, argv: list[str]) -> None:
        self.options = options
        self.launcher = make_launcher(options.launcher, options.hosts, options.host_command)
        self.argv = argv
        self.started = False
        self.facts: platform_mod.Facts | None = None
        self.profile: Profile | None = None
        self.pools: PoolManager | None = None
        self.record: RunRecord | None = None
        self.run_dir: Path | None = None
        self.results: list[dict[str, Any]] = []  # read back from the record at the end, for the summary
        self.backend = "gloo"
        self.nranks = 2
        self.per_node = 2
        self.nodes: list[str] = []
        self._cache: dict[str, dict[str | None, Outcome | HarnessError] | Exception] = {}
        self.exclusion: dict[str, Any] = {}
        self.baseline: dict[str, dict[str, Any]] = {}  # testcase id -> the baseline run's result
        self.baseline_path = ""

    # -- start -----------------------------------------------------------------------------
    def start(self, checks: list[CheckSpec], suite_files: list[str]) -> None:
        """Detect the platform, load and cross-check thresholds, open the run record. UserError on mistakes."""
        self.facts = platform_mod.read_facts()
        opts = self.options
        if opts.platform:
            self.profile = load_named(opts.thresholds, opts.platform)
        else:
            self.profile = platform_mod.detect(opts.thresholds, self.facts)
        for check in checks:
            self._check_metrics(check)
        if opts.compare:
            from clustercheck.compare import load_run
            from clustercheck.report.junit import testcase_id

            run = load_run(opts.compare, opts.out)
            self.baseline = {testcase_id(r): r for r in run.results}
            self.baseline_path = display(run.path)
        gpus = self.facts.gpu_count
        self.backend = opts.backend if opts.backend != "auto" else ("nccl" if gpus else "gloo")
        self.per_node = opts.ranks or (gpus if self.backend == "nccl" and gpus else 2)
        self.nodes = list(self.launcher.nodes)
        self.nranks = self.per_node * len(self.nodes)
        stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
        self.run_dir = _unique(opts.out / f"{stamp}-{self.profile.name}")
        self.run_dir.mkdir(parents=True)
        _point_latest(opts.out, self.run_dir)
        self.record = RunRecord(self.run_dir / "run.jsonl")
        self.pools = PoolManager(self.run_dir / "logs", on_start=self._pool_started, launcher=self.launcher)
        self.record.append({
            "type": "run", "schema": SCHEMA_VERSION, "started": now(), "argv": self.argv, "cwd": os.getcwd(),
            "platform": self.profile.name, "platform_detected": not opts.platform,
            "thresholds": {"file": self.profile.file, "sha256": sha256(self.profile.file)},
            "suites": [{"file": f, "sha256": sha256(f)} for f in suite_files],
            "facts": self.facts.as_dict(), "launcher": self.launcher.kind, "backend": self.backend, "ranks": self.nranks,
            "ranks_per_node": self.per_node,
            "nodes": self.nodes, "python": sys.executable,
        })
        self.started = True

    def _pool_started(self, pool: WorkerPool) -> None:
        assert self.record is not None
        self.record.append({"type": "pool", "number": pool.number, "backend": pool.key.backend,
                            "nccl_log": pool.key.nccl_log,
                            "ranks": pool.ranks, "env": dict(pool.key.env), "pids": pool.pids, "started": now()})

    def _check_metrics(self, check: CheckSpec) -> None:
        assert self.profile is not None
        limits = self.profile.limits_for(check.id) or {}
        known = KINDS[check.measure].metrics
        for metric, limit in limits.items():
            if metric not in known:
                file, _, line = limit.origin.rpartition(":")
                raise UserError(f"{check.measure} reports no metric {metric!r} (it reports {', '.join(known)})",
                                file=file, line=int(line), key=f"checks.{check.id}.{metric}")
            if limit.unit != known[metric] and not _convertible(limit.unit, known[metric]):
                file, _, line = limit.origin.rpartition(":")
                raise UserError(f"unit {limit.unit} does not fit {metric}, which is measured in {known[metric]}",
                                file=file, line=int(line), key=f"checks.{check.id}.{metric}.unit")

    # -- one check -------------------------------------------------------------------------
    def limits_for(self, check: CheckSpec) -> dict[str, Limit]:
        assert self.profile is not None
        limits = self.profile.limits_for(check.id)
        if not limits:
            raise NoThreshold(f"no threshold for check {check.id!r} on platform {self.profile.name!r} "
                              f"({self.profile.file}); add one under checks.{check.id}")
        return limits

    def measure(self, check: CheckSpec, item_id: str = "", where: str | None = None) -> Outcome:
        """The outcome of one item: `where` is its node, node pair ("a,b") or None for scope cluster.
        The first item of a check measures every node (or pair) at once; the others read the cache."""
        if check.id not in self._cache:
            try:
                self._cache[check.id] = self._measure_all(check)
            except Exception as exc:  # every item of the check gets the same error or skip
                self._cache[check.id] = exc
        found = self._cache[check.id]
        if isinstance(found, Exception):
            raise type(found)(*found.args)
        outcome = found.pop(where, None)  # each item reads its outcome once; nothing stays for the session
        if not found:
            del self._cache[check.id]
        if outcome is None:
            raise HarnessError(f"{check.id}: no result for {where} (its ranks took no part)")
        if isinstance(outcome, HarnessError):  # this node's or pair's ranks failed; the others measured
            raise outcome
        if not self.options.compare:
            return outcome
        return Outcome(outcome.measurement, outcome.verdicts + self._regressions(check, item_id, outcome.verdicts),
                       outcome.pool)

    def groups(self, check: CheckSpec, pool: WorkerPool) -> list[tuple[list[tuple[str | None, list[int]]], Any]]:
        """Rounds of (item key, global ranks) groups that run at the same time, with the groups argument
        for the ranks (None: the whole world)."""
        by_node: dict[str, list[int]] = {}
        for r in pool.ranks:
            by_node.setdefault(r["host"], []).append(r["rank"])
        if check.scope == "cluster":
            return [([(None, list(range(self.nranks)))], None)]
        if check.scope == "pair":
            rounds = []
            for pairs in schedule(self.options.pair_strategy, self.nodes, self.options.pair_seed):
                groups = [(pair_name(p), by_node[p[0]] + by_node[p[1]]) for p in pairs]
                rounds.append((groups, [g for _, g in groups]))
            return rounds
        groups = [(node, by_node[node]) for node in self.nodes]
        return [(groups, [g for _, g in groups] if len(groups) > 1 else None)]

    def _regressions(self, check: CheckSpec, item_id: str, verdicts: list[Verdict]) -> list[Verdict]:
        from clustercheck.compare import regression_verdicts

        found = regression_verdicts(self.baseline.get(item_id), [v.as_dict() for v in verdicts],
                                    self.options.tolerance, f"--compare {self.baseline_path}")
        out = []
        for r in found:
            limit = Limit(check.id, r["metric"], r["op"], r["limit"], "ratio",
                          f"change {r['op']} {r['limit']:+.0%}", f"baseline measured {fmt(r['baseline'])}",
                          r["origin"])
            out.append(Verdict(r["metric"], r["change"], "ratio", limit, r["passed"], limit.margin(r["change"]),
                               subject=r["subject"]))
        return out

    def _measure_all(self, check: CheckSpec) -> dict[str | None, Outcome | HarnessError]:
        assert self.pools is not None and self.profile is not None
        probe = check.measure == "probe"
        limits = {} if probe else self.limits_for(check)
        collective = check.measure in COLLECTIVES
        if check.measure in GPU_ONLY and self.backend != "nccl":
            raise Skip(f"{check.measure} needs GPUs and this node has none")
        if check.scope == "pair" and len(self.nodes) < 2:
            raise Skip(f"scope pair needs two nodes or more; this run has {len(self.nodes)}")
        group_size = self.per_node * (2 if check.scope == "pair" else 1 if check.scope != "cluster" else len(self.nodes))
        if (collective or check.measure == "p2p") and group_size < 2:
            raise Skip(f"{check.measure} over a single rank moves no data between devices")
        if collective:
            self._check_layouts(check, group_size)
        key = PoolKey(self.backend, self.nranks, check.env, nccl_log=self._log_mode("init"))
        pool = self.pools.get(key)
        params = self._params(check, {"probe": check.params["probe"],
                                      "expect": {**self.profile.expect, **check.params["expect"]}}
                              if probe else check.params)
        outcomes: dict[str | None, Outcome | HarnessError] = {}
        infos = [self._pool_info(pool, check)]
        rounds = self.groups(check, pool)
        t0, tuning = time.monotonic(), 0.0
        for number, (groups, arg) in enumerate(rounds):
            failure: RankFailure | None = None
            if number and not pool.alive():  # an earlier round lost a rank: the rest run on a fresh pool
                try:
                    pool = self.pools.get(key)
                except HarnessError as exc:
                    outcomes.update((where, HarnessError(f"not measured: {exc}")) for later in rounds[number:]
                                    for where, _ in later[0])
                    break
                infos.append(self._pool_info(pool, check))
            try:
                answers = dict(enumerate(pool.run(check.measure, params, check.timeout, groups=arg)))
            except RankFailure as exc:
                self.pools.discard(key)
                failure, answers = exc, exc.answered
            except HarnessError:
                self.pools.discard(key)
                raise
            t1 = time.monotonic()
            tuned, tuning_error = self._tuning_pass(check, params, arg) if collective and not failure else (None, "")
            tuning += time.monotonic() - t1
            for where, ranks in groups:
                if failure is not None and not failure.failed.isdisjoint(ranks):
                    outcomes[where] = HarnessError(str(failure))  # the whole story: the cause may be elsewhere
                    continue
                mine = [answers[r] for r in ranks]
                hosts = [pool.ranks[r]["host"] for r in ranks]
                comm = None
                if collective:
                    comm = describe_comm(self.backend, mine, [pool.ranks[r] for r in ranks],
                                         tuned and [tuned[r] for r in ranks], dict(check.env), tuning_error)
                outcomes[where] = (self._probe_outcome(check, mine, infos[-1]) if probe
                                   else self._judge(check, limits, mine, hosts, infos[-1], comm))
        for info in infos:
            # how long the ranks worked on this check, all nodes or pairs of it together, pool starts excluded
            info["measure_seconds"] = round(time.monotonic() - t0 - tuning, 3)
            if collective and self._log_mode("tuning") != "off":  # NCCL's untimed pass, its pool's start included
                info["tuning_seconds"] = round(tuning, 3)
            info["rounds"] = len(rounds)
        return outcomes

    def _pool_info(self, pool: WorkerPool, check: CheckSpec) -> dict[str, Any]:
        assert self.pools is not None
        return {"number": pool.number, "pids": pool.pids, "backend": self.backend, "ranks": pool.ranks,
                "env": dict(check.env), "starts": self.pools.starts}

    def _log_mode(self, mode: str) -> str:
        """What NCCL logs in a pool for `mode` (init: timed pools, tuning: the sibling), per --nccl-log."""
        wanted = {"full": ("init", "tuning"), "init": ("init",), "off": ()}[self.options.nccl_log]
        return mode if self.backend == "nccl" and mode in wanted else "off"

    def _tuning_pass(self, check: CheckSpec, params: dict[str, Any],
                     groups: Any) -> tuple[list[dict[str, Any]] | None, str]:
        """Each size once more in the untimed sibling pool, whose NCCL logs its algorithm and protocol per
        call: (per-rank results, why there are none). Its failure costs the labels only: the timed
        measurement stands."""
        if self._log_mode("tuning") == "off":
            return None, ""
        assert self.pools is not None
        key = PoolKey(self.backend, self.nranks, check.env, nccl_log="tuning")
        task = {k: v for k, v in params.items() if k != "fault"}  # a test fault belongs to the timed run
        try:
            return self.pools.get(key).run(check.measure, {**task, "tuning_pass": True}, check.timeout,
                                           groups=groups), ""
        except HarnessError as exc:
            self.pools.discard(key)
            return None, f"the tuning pass failed, so no algorithm is known: {str(exc).splitlines()[0]}"

    def _judge(self, check: CheckSpec, limits: dict[str, Limit], per_rank: list[dict[str, Any]], hosts: list[str],
               info: dict[str, Any], comm: dict[str, Any] | None = None) -> Outcome:
        metric_units = KINDS[check.measure].metrics
        if check.measure in COLLECTIVES:
            m = reduce_collective(check.measure, per_rank, hosts, check.params["judge_at"])
            if comm is not None:
                tag_rows(m.rows, comm.get("algorithms", {}))
                m = dataclasses.replace(m, comm=comm)
            limits = {**{k: v for k, v in limits.items() if k != "wrong"}, "wrong": _wrong_limit(check)}
        elif check.measure == "p2p":
            m = reduce_p2p(per_rank, metric_units)
        else:
            m = reduce_subjects(per_rank, metric_units)
        return Outcome(m, evaluate(m, limits), info)

    def _probe_outcome(self, check: CheckSpec, per_rank: list[dict[str, Any]], info: dict[str, Any]) -> Outcome:
        """A probe's verdicts from the node's first rank, judged against the profile's expect: block
        (overridden by the check's own expect:)."""
        assert self.profile is not None
        result = next(r for r in per_rank if "outcome" in r)
        if result["outcome"] == "skipped":
            raise Skip(result["reason"])
        if result["outcome"] == "error":
            raise HarnessError(f"probe {check.params['probe']} on {result['host']}: {result['reason']}")
        origin = f"{self.profile.file} expect" if self.profile.expect else "the probe's built-in expectation"
        verdicts = [Verdict(v["what"], v["measured"], "",  # type: ignore[arg-type]
                            Limit(check.id, v["what"], "", v["expected"] or "-", "", str(v["expected"] or "-"),  # type: ignore[arg-type]
                                  v["detail"], origin), v["passed"], None, subject=v["subject"], detail=v["detail"])
                    for v in result["verdicts"]]
        m = Measurement(metrics={}, units={}, worst=next((v.subject for v in verdicts if not v.passed), None))
        return Outcome(m, verdicts, info)

    def _check_layouts(self, check: CheckSpec, nranks: int) -> None:
        from clustercheck.checks import DTYPES
        from clustercheck.formulas import layout

        for size in check.params["sizes"]:
            if layout(check.measure, size, DTYPES[check.params["dtype"]], nranks).param_count == 0:
                raise SizeTooSmall(f"{check.where}: {check.measure} of {size} B over {nranks} ranks moves "
                                   f"nothing (nccl-tests rounds per-rank counts down to 16 B); use larger sizes")

    def _params(self, check: CheckSpec, params: dict[str, Any]) -> dict[str, Any]:
        """The task's parameters, with the test-only fault for this check when one was asked for."""
        fault = self.options.faults.get(check.id)
        if fault is None:
            return params
        kind, rank = fault
        return {**params, "fault": {"kind": kind, "rank": self.nranks - 1 if rank is None else rank}}

    def add_result(self, entry: dict[str, Any]) -> None:
        # the record is the only copy: a week of burn-in must not grow the controller with every check
        if self.record is not None:
            self.record.append(entry)

    # -- end -------------------------------------------------------------------------------
    def _exclude(self) -> None:
        """Write the exclusion list (exclude.txt, Slurm hostlist syntax) and drain if asked."""
        from clustercheck import exclude

        assert self.record is not None and self.run_dir is not None
        nodes = exclude.excluded(self.results)
        text = exclude.as_hostlist(list(nodes))
        (self.run_dir / "exclude.txt").write_text(text + "\n" if text else "")
        self.exclusion = {"hostlist": text, "reasons": nodes, "drain": [], "unmeasured": exclude.unmeasured(self.results)}
        if nodes and (self.options.drain or self.options.drain_dry_run):
            for cmd in exclude.drain_commands(nodes):
                rc, out = (None, "dry run") if not self.options.drain else exclude.run(cmd)
                self.exclusion["drain"].append({"command": cmd, "rc": rc, "output": out})
        self.record.append({"type": "exclude", **self.exclusion})

    def finish(self, interrupted: bool = False) -> None:
        if not self.started:
            return
        assert self.pools is not None and self.record is not None and self.run_dir is not None
        self.pools.close(kill=interrupted)  # after Ctrl-C, ranks may be mid-collective: end them now
        self.results = [{k: v for k, v in r.items() if k not in ("rows", "pool", "params")}
                        for r in read_record(self.record.path)[1]]
        self._exclude()
        self.record.append({"type": "end", "finished": now(), "counts": counts(self.results),
                            "pool_starts": self.pools.starts, "interrupted": interrupted})
        self.record.close()
        from clustercheck.report import render_all

        render_all(self.run_dir / "run.jsonl", self.run_dir)


def _wrong_limit(check: CheckSpec) -> Limit:
    return Limit(check.id, "wrong", "==", 0.0, "count", "== 0", WRONG_LIMIT_SOURCE, "built in")


def _convertible(a: str, b: str) -> bool:
    from clustercheck import units

    return units.UNITS[a][0] == units.UNITS[b][0]


def _unique(path: Path) -> Path:
    candidate, n = path, 1
    while candidate.exists():
        n += 1
        candidate = path.with_name(f"{path.name}-{n}")
    return candidate


def _point_latest(out: Path, run_dir: Path) -> None:
    link = out / "latest"
    try:
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(run_dir.name)
    except OSError:
        pass  # a convenience only
