"""CheckSession: one clustercheck run inside a pytest session (options, platform, pools, record).
Plain objects only; plugin.py wires them to pytest."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from clustercheck import platform as platform_mod
from clustercheck.checks import GPU_ONLY, KINDS
from clustercheck.formulas import PLACEMENTS as COLLECTIVES
from clustercheck.errors import UserError
from clustercheck.paths import display
from clustercheck.pool import HarnessError, PoolKey, PoolManager, WorkerPool
from clustercheck.results import (SCHEMA_VERSION, Measurement, RunRecord, Verdict, counts, evaluate, now,
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
    tolerance: float = 0.05


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
        self.argv = argv
        self.started = False
        self.facts: platform_mod.Facts | None = None
        self.profile: Profile | None = None
        self.pools: PoolManager | None = None
        self.record: RunRecord | None = None
        self.run_dir: Path | None = None
        self.results: list[dict[str, Any]] = []
        self.backend = "gloo"
        self.nranks = 2
        self.nodes: list[str] = []
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
        self.nranks = opts.ranks or (gpus if self.backend == "nccl" and gpus else 2)
        self.nodes = [self.facts.host]
        stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
        self.run_dir = _unique(opts.out / f"{stamp}-{self.profile.name}")
        self.run_dir.mkdir(parents=True)
        _point_latest(opts.out, self.run_dir)
        self.record = RunRecord(self.run_dir / "run.jsonl")
        self.pools = PoolManager(self.run_dir / "logs", on_start=self._pool_started)
        self.record.append({
            "type": "run", "schema": SCHEMA_VERSION, "started": now(), "argv": self.argv, "cwd": os.getcwd(),
            "platform": self.profile.name, "platform_detected": not opts.platform,
            "thresholds": {"file": self.profile.file, "sha256": sha256(self.profile.file)},
            "suites": [{"file": f, "sha256": sha256(f)} for f in suite_files],
            "facts": self.facts.as_dict(), "launcher": "local", "backend": self.backend, "ranks": self.nranks,
            "nodes": self.nodes, "python": sys.executable,
        })
        self.started = True

    def _pool_started(self, pool: WorkerPool) -> None:
        assert self.record is not None
        self.record.append({"type": "pool", "number": pool.number, "backend": pool.key.backend,
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

    def measure(self, check: CheckSpec, item_id: str = "") -> Outcome:
        outcome = self._measure(check)
        if not self.options.compare:
            return outcome
        return Outcome(outcome.measurement, outcome.verdicts + self._regressions(check, item_id, outcome.verdicts),
                       outcome.pool)

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

    def _measure(self, check: CheckSpec) -> Outcome:
        assert self.pools is not None and self.profile is not None
        if check.measure == "probe":
            return self._probe(check)
        limits = self.limits_for(check)
        collective = check.measure in COLLECTIVES
        if check.measure in GPU_ONLY and self.backend != "nccl":
            raise Skip(f"{check.measure} needs GPUs and this node has none")
        if (collective or check.measure == "p2p") and self.nranks < 2:
            raise Skip(f"{check.measure} over a single rank moves no data between devices")
        if collective:
            self._check_layouts(check)
        key = PoolKey(self.backend, self.nranks, check.env)
        pool = self.pools.get(key)
        try:
            per_rank = pool.run(check.measure, self._params(check), check.timeout)
        except HarnessError:
            self.pools.discard(key)
            raise
        hosts = [r["host"] for r in pool.ranks]
        metric_units = KINDS[check.measure].metrics
        if collective:
            m = reduce_collective(check.measure, per_rank, hosts, check.params["judge_at"])
            limits = {**{k: v for k, v in limits.items() if k != "wrong"}, "wrong": _wrong_limit(check)}
        elif check.measure == "p2p":
            m = reduce_p2p(per_rank, metric_units)
        else:
            m = reduce_subjects(per_rank, metric_units)
        verdicts = evaluate(m, limits)
        return Outcome(m, verdicts, {"number": pool.number, "pids": pool.pids, "backend": self.backend,
                                     "ranks": pool.ranks, "env": dict(check.env), "starts": self.pools.starts})

    def _probe(self, check: CheckSpec) -> Outcome:
        """A probe judged against the profile's expect: block, overridden by the check's own expect:."""
        assert self.pools is not None and self.profile is not None
        expect = {**self.profile.expect, **check.params["expect"]}
        key = PoolKey(self.backend, self.nranks, check.env)
        pool = self.pools.get(key)
        try:
            per_rank = pool.run("probe", {"probe": check.params["probe"], "expect": expect}, check.timeout)
        except HarnessError:
            self.pools.discard(key)
            raise
        result = per_rank[0]
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
        return Outcome(m, verdicts, {"number": pool.number, "pids": pool.pids, "backend": self.backend,
                                     "ranks": pool.ranks, "env": dict(check.env), "starts": self.pools.starts})

    def _check_layouts(self, check: CheckSpec) -> None:
        from clustercheck.checks import DTYPES
        from clustercheck.formulas import layout

        for size in check.params["sizes"]:
            if layout(check.measure, size, DTYPES[check.params["dtype"]], self.nranks).param_count == 0:
                raise SizeTooSmall(f"{check.where}: {check.measure} of {size} B over {self.nranks} ranks moves "
                                   f"nothing (nccl-tests rounds per-rank counts down to 16 B); use larger sizes")

    def _params(self, check: CheckSpec) -> dict[str, Any]:
        fault = self.options.faults.get(check.id)
        if fault is None:
            return check.params
        kind, rank = fault
        return {**check.params, "fault": {"kind": kind, "rank": self.nranks - 1 if rank is None else rank}}

    def add_result(self, entry: dict[str, Any]) -> None:
        self.results.append(entry)
        if self.record is not None:
            self.record.append(entry)

    # -- end -------------------------------------------------------------------------------
    def finish(self, interrupted: bool = False) -> None:
        if not self.started:
            return
        assert self.pools is not None and self.record is not None and self.run_dir is not None
        self.pools.close(kill=interrupted)  # after Ctrl-C, ranks may be mid-collective: end them now
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
