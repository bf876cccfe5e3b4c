"""Measure kinds: each `measure:` a suite may name, with everything the controller needs to know about it
(its parameters, scopes, metrics and units, which rank-side function measures, how the ranks' answers
become a measurement and verdicts, what it needs to apply). The session holds no knowledge of any kind:
adding one is one `register(Kind(...))` plus its rank-side function. No torch here."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping

from clustercheck import memory as mem
from clustercheck import params as p
from clustercheck.errors import HarnessError, Skip, SizeTooSmall
from clustercheck.formulas import PLACEMENTS, layout
from clustercheck.memory import Need
from clustercheck.results import COLLECTIVE_UNITS, Measurement, evaluate, reduce_collective, reduce_p2p, reduce_subjects
from clustercheck.schema import Fields
from clustercheck.thresholds import Limit
from clustercheck.verdicts import Expectation, Verdict

if TYPE_CHECKING:
    from clustercheck.suite import CheckSpec

# kept here for callers that knew them as checks.DTYPES / checks.MAX_SIZE
DTYPES, MAX_SIZE = p.DTYPES, p.MAX_SIZE


@dataclass(frozen=True)
class Answers:
    """What one item's ranks returned (a node's, a pair's or the whole cluster's), with what judging needs."""

    check: CheckSpec
    per_rank: list[dict[str, Any]]
    ranks: list[dict[str, Any]]  # the pool's description of each of these ranks: host, device, NCCL version
    backend: str
    tuned: list[dict[str, Any]] | None = None  # the untimed pass in which NCCL logs its algorithm
    tuning_error: str = ""

    @property
    def hosts(self) -> list[str]:
        return [r["host"] for r in self.ranks]


@dataclass(frozen=True)
class Rules:
    """What an item is judged against: the profile's limits for its check; where expectations come from."""

    limits: Mapping[str, Limit]
    expect_origin: str = "the probe's built-in expectation"


Judge = Callable[[Answers, Rules], tuple[Measurement, list[Verdict]]]


def _no_group_check(check: CheckSpec, nranks: int) -> None:
    return None


def _own_params(check: CheckSpec, expect: Mapping[str, Any]) -> dict[str, Any]:
    return dict(check.params)


@dataclass(frozen=True)
class Kind:
    name: str
    scopes: tuple[str, ...]
    metrics: dict[str, str]  # metric -> unit
    parse: Callable[[Fields], dict[str, Any]]
    description: str
    runner: str  # "module:function" every rank runs, called with (RankContext, params)
    judge: Judge
    gpu_only: bool = False  # skipped (with the reason) on a run without GPUs
    min_ranks: int = 1  # ranks a group needs for the measurement to mean anything
    limited: bool = True  # judged against the profile's limits; False: against expectations (probes)
    tuning_pass: bool = False  # NCCL's algorithm is read in an untimed second pass
    figure: str = "bars"  # what the HTML report draws: sweep (busbw per size), matrix, bars, none
    check_group: Callable[[CheckSpec, int], None] = _no_group_check  # raises when a group cannot work
    task_params: Callable[[CheckSpec, Mapping[str, Any]], dict[str, Any]] = _own_params
    extra: dict[str, Any] = field(default_factory=dict)  # fixed parameters every task of this kind carries
    memory: Need | None = None  # the buffers it holds (memory.py), so a suite that cannot fit is refused early

    def task(self, check: CheckSpec, expect: Mapping[str, Any]) -> dict[str, Any]:
        """The parameters the ranks receive for `check` (`expect`: the profile's expectations)."""
        return {**self.extra, **self.task_params(check, expect)}


# -- judging ---------------------------------------------------------------------------------------

# Correctness is not a threshold a platform may relax: any wrong element fails (nccl-tests #wrong).
WRONG_LIMIT_SOURCE = "correctness: every element of a reduction on exactly summable data must match (nccl-tests #wrong)"


def wrong_limit(check_id: str) -> Limit:
    return Limit(check_id, "wrong", "==", 0.0, "count", "== 0", WRONG_LIMIT_SOURCE, "built in")


def judge_collective(a: Answers, rules: Rules) -> tuple[Measurement, list[Verdict]]:
    from clustercheck.comm import describe, tag_rows

    check = a.check
    m = reduce_collective(check.measure, a.per_rank, a.hosts, check.params["judge_at"])
    comm = describe(a.backend, a.per_rank, a.ranks, a.tuned, dict(check.env), a.tuning_error)
    tag_rows(m.rows, comm.get("algorithms", {}))
    m = dataclasses.replace(m, comm=comm)
    limits = {**{k: v for k, v in rules.limits.items() if k != "wrong"}, "wrong": wrong_limit(check.id)}
    return m, evaluate(m, limits)


def judge_subjects(a: Answers, rules: Rules) -> tuple[Measurement, list[Verdict]]:
    """Per-GPU (or per-rank) values, each metric's headline its worst subject."""
    m = reduce_subjects(a.per_rank, KINDS[a.check.measure].metrics)
    return m, evaluate(m, dict(rules.limits))


def judge_p2p(a: Answers, rules: Rules) -> tuple[Measurement, list[Verdict]]:
    m = reduce_p2p(a.per_rank, KINDS[a.check.measure].metrics)
    return m, evaluate(m, dict(rules.limits))


def judge_probe(a: Answers, rules: Rules) -> tuple[Measurement, list[Verdict]]:
    """A probe's verdicts, from the node's first rank: expectations, not limits."""
    result = next(r for r in a.per_rank if "outcome" in r)
    if result["outcome"] == "skipped":
        raise Skip(result["reason"])
    if result["outcome"] == "error":
        raise HarnessError(f"probe {a.check.params['probe']} on {result['host']}: {result['reason']}")
    verdicts = [Verdict(v["what"], v["measured"], "",
                        Expectation(a.check.id, v["what"], v["expected"] or "-", rules.expect_origin, v["detail"]),
                        v["passed"], subject=v["subject"], detail=v["detail"])
                for v in result["verdicts"]]
    worst = next((v.subject for v in verdicts if not v.passed), None)
    return Measurement(metrics={}, units={}, worst=worst), verdicts


def _check_layouts(check: CheckSpec, nranks: int) -> None:
    for size in check.params["sizes"]:
        if layout(check.measure, size, p.DTYPES[check.params["dtype"]], nranks).param_count == 0:
            raise SizeTooSmall(f"{check.where}: {check.measure} of {size} B over {nranks} ranks moves "
                               f"nothing (nccl-tests rounds per-rank counts down to 16 B); use larger sizes")


def _probe_task(check: CheckSpec, expect: Mapping[str, Any]) -> dict[str, Any]:
    return {"probe": check.params["probe"], "expect": {**expect, **check.params["expect"]}}


# -- the kinds -------------------------------------------------------------------------------------

KINDS: dict[str, Kind] = {}


def register(kind: Kind) -> Kind:
    """Add a measure kind (a plugin's or a test's): suites may name it from now on."""
    KINDS[kind.name] = kind
    return kind


def figure_of(r: Mapping[str, Any]) -> str:
    """What to draw for a record entry (older records carry no `figure`)."""
    kind = KINDS.get(r.get("measure") or "")
    return r.get("figure") or (kind.figure if kind else "bars")


_COLLECTIVE_TEXT = {
    "all_reduce": "all_reduce (sum), in place", "all_gather": "all_gather, out of place and in place",
    "reduce_scatter": "reduce_scatter (sum), out of place and in place", "alltoall": "alltoall, out of place",
    "broadcast": "broadcast from rank 0, in place", "reduce": "reduce (sum) to rank 0, in place",
    "sendrecv": "each rank sends to the next and receives from the previous",
}
COLLECTIVES = tuple(PLACEMENTS)
COLLECTIVE_METRICS = COLLECTIVE_UNITS

for _name, _text in _COLLECTIVE_TEXT.items():
    register(Kind(_name, ("node", "cluster", "pair", *(("localize",) if _name == "all_reduce" else ())),
                  COLLECTIVE_UNITS, p.collective_parser(_name),
                  f"torch.distributed {_text} over a size sweep, timed and checked as nccl-tests does",
                  "clustercheck.measure.collectives:collective", judge_collective, min_ranks=2, tuning_pass=True,
                  figure="sweep", check_group=_check_layouts, extra={"collective": _name},
                  memory=mem.collective(_name, in_place_send=_name == "reduce_scatter")))
register(Kind("host_device", ("gpu",), {"h2d": "GB/s", "d2h": "GB/s"}, p.copy_parser("256MiB", 16),
              "host->device and device->host copy bandwidth per GPU, pinned memory on its NUMA node",
              "clustercheck.measure.copies:host_device", judge_subjects, gpu_only=True, memory=mem.host_device))
register(Kind("device_memory", ("gpu",), {"bandwidth": "GB/s"}, p.copy_parser("1GiB", 16),
              "device-to-device copy on each GPU: memory traffic per second (2 x bytes copied: read + write, "
              "as the HBM spec counts)", "clustercheck.measure.copies:device_memory", judge_subjects, gpu_only=True,
              memory=mem.device_memory))
register(Kind("host_memory", ("node",), {"bandwidth": "GB/s"}, p.copy_parser("256MiB", 8),
              "host memory copy bandwidth, one rank at a time (bytes copied per second)",
              "clustercheck.measure.copies:host_memory", judge_subjects, memory=mem.host_memory))
register(Kind("gemm", ("gpu", "node"), {"tflops": "TFLOP/s"}, p.gemm_params,
              "square matrix multiply throughput per device (bf16 on GPUs, fp32 on CPUs by default)",
              "clustercheck.measure.copies:gemm", judge_subjects, memory=mem.gemm))
register(Kind("p2p", ("gpu-pair",), {"unidirectional": "GB/s", "bidirectional": "GB/s", "p2p_min": "GB/s",
                                     "p2p_median": "GB/s", "p2p_min_ratio": "ratio", "asymmetry_max": "ratio",
                                     "ratio_to_median": "ratio"},
              p.copy_parser("256MiB", 16, p.p2p_extra),
              "every ordered GPU pair: copy bandwidth one pair at a time, both directions at once, ratios",
              "clustercheck.measure.copies:p2p", judge_p2p, gpu_only=True, min_ranks=2, figure="matrix",
              memory=mem.p2p))
register(Kind("probe", ("node",), {}, p.probe_params,
              "a system probe (clustercheck probe --list) judged against the platform's expect: block, "
              "run on each node's first rank", "clustercheck.measure:probe", judge_probe, limited=False,
              figure="none", task_params=_probe_task))

from clustercheck import native_judge as _native, native_params as _native_params  # noqa: E402 (needs Kind above)

register(Kind("nccl_tests", ("node",), _native.NCCL_METRICS, _native_params.nccl_tests_params,
              "an nccl-tests binary (all_reduce_perf by default) run on each node's first rank over the node's GPUs; "
              "its table judged like a collective", "clustercheck.measure.native:nccl_tests", _native.judge_nccl_tests,
              figure="sweep", task_params=_native.task_params, memory=mem.nccl_tests))
register(Kind("nvbandwidth", ("node",), _native.NVBANDWIDTH_METRICS, _native_params.nvbandwidth_params,
              "NVIDIA nvbandwidth run on each node's first rank: per-GPU and per-pair copy bandwidth per testcase",
              "clustercheck.measure.native:nvbandwidth", _native.judge_nvbandwidth, task_params=_native.task_params))

from clustercheck import burn_check as _burn  # noqa: E402,F401 (registers the burn kind; it needs Kind above)
