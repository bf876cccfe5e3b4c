"""What a measure kind is: the `Kind` record every kind module fills in, the check a suite names it in
(`CheckSpec`, remembering its file and line), what its judge receives (`Answers`, `Rules`) and the pieces
several kinds share (the built-in correctness limit, the memory need of buffers on a rank's device).
Controller side: no torch, nothing of the run loop or the registry."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from clustercheck.errors import HarnessError
from clustercheck.judging.limits import Limit
from clustercheck.judging.measurement import Measurement
from clustercheck.judging.verdicts import Verdict
from clustercheck.schema import Fields
from clustercheck.units import unit_domain

# Where a check runs and what gets a verdict (docs/design.md): each node on its own, one collective over
# every rank, node pairs, each GPU, each GPU pair, or the localization planner's rounds.
SCOPES = ("node", "cluster", "pair", "gpu", "gpu-pair", "localize")


@dataclass(frozen=True)
class CheckSpec:
    id: str
    measure: str
    scope: str
    params: dict[str, Any] = field(hash=False)
    env: tuple[tuple[str, str], ...]
    timeout: float
    description: str
    file: str
    line: int
    limits: str = ""  # judge by the profile's checks.<this id> when it names none for this check's own id
    limits_line: int = 0
    min_nodes: int = 1  # fewer nodes in the run: the check is skipped, saying so (the fabric between nodes)

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"


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
    expect: Mapping[str, Any] = field(default_factory=dict)  # the profile's expect: block with --expect over it
    multi_node: bool = False  # the check's items span several nodes: the fabric, not NVLink, bounds them
    defaults_at: str = ""  # where the profile's defaults.<kind> block is (file:line) when `limits` come from it


# The domains of the ratios the kinds report: a share of the best or of the median (at most 1), a ratio to
# something it may exceed (no top), and a share of a spec such as a port's rate (may exceed 1: no top).
FRACTION = (0.0, 1.0)
NON_NEGATIVE = (0.0, float("inf"))


Judge = Callable[[Answers, Rules], "tuple[Measurement, list[Verdict]]"]
# A kind's memory need: (bytes per rank in the memory it measures, host bytes per node, the size that sets
# it), from its parameters, the ranks per node and whether the ranks are on GPUs (run/fit.py judges it).
Need = Callable[[Mapping[str, Any], int, bool], "tuple[int, int, int]"]
# A kind whose parameters plan a time (a burn's `duration`): given them and the check's timeout, the parameter
# and why that time cannot fit in it, or None. suite/load.py refuses such a check: it could only time out.
Fits = Callable[[Mapping[str, Any], float], "tuple[str, str] | None"]


def _no_group_check(check: CheckSpec, nranks: int) -> None:
    return None


def _own_params(check: CheckSpec, expect: Mapping[str, Any]) -> dict[str, Any]:
    return dict(check.params)


@dataclass(frozen=True)
class Kind:
    """One `measure:` a suite may name. Register it with `clustercheck.kinds.register(...)`."""

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
    memory: Need | None = None  # the buffers it holds, so that a suite that cannot fit is refused early
    needs_tool: bool = False  # the ranks look a tool up on their PATH: one absent is a skip, which a missing
    # threshold must not hide (the session runs such a check before calling a missing threshold an error)
    skips_on_answers: bool = False  # its judge may skip an item on what the ranks found (a tool, a device or a
    # port the node lacks); a skip of any other kind is the run's layout's alone (run/applies.py)
    domains: dict[str, tuple[float, float]] = field(default_factory=dict)  # metric -> (lowest, highest) it can
    # take, in its unit; a metric not named: its unit's (units.unit_domain: [0, inf) for a bandwidth, a time...)
    fits: Fits | None = None  # (parameter, why) when the time its parameters plan cannot fit a check's timeout
    # the expect: keys its task and judge read (`topology.gpu_nic` for a nested one): `run --expect` refuses a
    # key no selected check reads, never a run that judged nothing of it (tests/test_run_expect_keys.py)
    expect_keys: tuple[str, ...] = ()
    expect_keys_of: Callable[[CheckSpec], tuple[str, ...]] | None = None  # the ones one check reads, by its params
    # key -> what the run must be for the judge to read it (run/expect_read.py NEEDS: "nccl", "between_nodes",
    # "gpus_of_a_node", "fabric_floor"); a key not named is read in every layout. `run --expect` refuses a key
    # that every selected check reading it cannot judge in the run's layout (it would pass unjudged)
    expect_needs: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def reads(self, check: CheckSpec) -> tuple[str, ...]:
        """The expect: keys `check` reads: its kind's, or those its params leave it reading."""
        return self.expect_keys if self.expect_keys_of is None else self.expect_keys_of(check)

    def domain(self, metric: str) -> tuple[float, float]:
        """The values `metric` can take: a limit that passes all of them judges nothing (refused at load)."""
        return self.domains.get(metric) or unit_domain(self.metrics[metric])

    def task(self, check: CheckSpec, expect: Mapping[str, Any]) -> dict[str, Any]:
        """The parameters the ranks receive for `check` (`expect`: the profile's expectations)."""
        return {**self.extra, **self.task_params(check, expect)}


# Correctness is not a threshold a platform may relax: any wrong element fails (nccl-tests #wrong).
WRONG_LIMIT_SOURCE = "correctness: every element of a reduction on exactly summable data must match (nccl-tests #wrong)"


def wrong_limit(check_id: str) -> Limit:
    return Limit(check_id, "wrong", "==", 0.0, "count", "== 0", WRONG_LIMIT_SOURCE, "built in")


def device_need(per_rank: int, size: int, n: int, gpu: bool) -> tuple[int, int, int]:
    """Buffers on the rank's device: on a GPU, no host memory; on a CPU rank, host memory for every rank."""
    return per_rank, 0 if gpu else per_rank * n, size


# a subject (a GPU) answered by two ranks of one node: neither answer can be told as that GPU's
BOUND_TWICE = "two ranks bound to one device (a binding fault: each rank needs a GPU of its own)"


def every_rank_answered(a: Answers, what: str) -> None:
    """A HarnessError unless each of the item's ranks gave an answer: a rank's measurements missing would leave
    its GPU unjudged, silently (the fail-closed rule)."""
    if len(a.per_rank) != len(a.ranks):
        raise HarnessError(f"{what}: {len(a.per_rank)} answer(s) from the {len(a.ranks)} rank(s) on "
                           f"{', '.join(sorted({str(r.get('host')) for r in a.ranks})) or 'no host'}: "
                           f"a rank's measurements are missing, not judged")
