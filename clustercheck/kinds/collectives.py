"""The seven collectives (`measure: all_reduce`, `all_gather`, ...): a size sweep timed and checked as
nccl-tests does. Here: their parameters, the buffers they hold, how the ranks' times become nccl-tests
rows (mean time across ranks, algbw and busbw from it), and the judge, which adds the built-in
`wrong == 0` limit and what NCCL said it did. The ranks run clustercheck.measure.collectives:collective."""

from __future__ import annotations

import dataclasses
import math
from statistics import fmean, median, pstdev
from typing import Any, Callable, Mapping, Sequence

from clustercheck import formulas, units
from clustercheck.errors import HarnessError, NotMeasured, SizeTooSmall, show
from clustercheck.fabric.comm import describe, tag_rows
from clustercheck.formulas import PLACEMENTS, check_temporaries, layout
from clustercheck.judging.measurement import Measurement, evaluate
from clustercheck.judging.rows import check_rows
from clustercheck.judging.unjudged import notes_or_error
from clustercheck.judging.verdicts import Expectation, Verdict
from clustercheck.kinds import params as shared
from clustercheck.kinds.base import Answers, CheckSpec, Kind, Need, Rules, device_need, wrong_limit
from clustercheck.schema import Fields, between, one_of

# pstdev/mean of n times, none negative, is at most sqrt(n - 1): a ceiling at or above it for the most iterations
# a suite may ask (100,000) can never fail
ITER_CV = (0.0, math.sqrt(100_000 - 1))
UNITS = {"busbw": "GB/s", "algbw": "GB/s", "time_us": "us", "avg_busbw": "GB/s", "wrong": "count",
         "iter_cv": "ratio"}
_TEXT = {
    "all_reduce": "all_reduce (sum), in place", "all_gather": "all_gather, out of place and in place",
    "reduce_scatter": "reduce_scatter (sum), out of place and in place", "alltoall": "alltoall, out of place",
    "broadcast": "broadcast from rank 0, in place", "reduce": "reduce (sum) to rank 0, in place",
    "sendrecv": "each rank sends to the next and receives from the previous",
}


# -- parameters ------------------------------------------------------------------------------------

def _collective_params(f: Fields) -> dict[str, Any]:
    sizes = shared.sizes(f)
    dtype = f.get("dtype", str, "float32", check=one_of(*units.DTYPE_BYTES))
    dtype = units.CANONICAL_DTYPE.get(dtype, dtype)
    elt = units.DTYPE_BYTES[dtype]
    size_key = "sizes" if "sizes" in f.data else "min_bytes"
    for s in sizes:
        if s % elt:
            raise f.error(size_key, f"size {s} B is not a whole number of {dtype} elements ({elt} B each)")
        if s > shared.MAX_SIZE:
            raise f.error(size_key if s == sizes[0] else ("sizes" if size_key == "sizes" else "max_bytes"),
                          f"size {units.format_size(s)} is above the {units.format_size(shared.MAX_SIZE)} limit")
    judge = shared.size(f, "judge_at", str(sizes[-1])) if "judge_at" in f.data else sizes[-1]
    if judge not in sizes:
        raise f.error("judge_at", f"{judge} B is not one of the swept sizes "
                                  f"({', '.join(units.format_size(s) for s in sizes)})")
    graph = f.get("cuda_graph", int, 0, check=between(0, 10_000))
    params = {
        "sizes": sizes,
        "dtype": dtype,
        "warmup": f.get("warmup", int, 5, check=between(0, 10_000)),
        "iters": f.get("iters", int, 20, check=between(1, 100_000)),
        "check_iters": f.get("check_iters", int, 1, check=between(0, 1_000)),
        "judge_at": judge,
        "per_iteration": f.get("per_iteration", bool, not graph),  # nccl-tests refuses -G with -I: off beside a graph
        "cuda_graph": graph,
    }
    if params["cuda_graph"] and not params["warmup"]:
        # NCCL >= 2.22 connects peers at a communicator's first use of an algorithm, with cudaMalloc: inside
        # a capture that fails (nccl-tests warms up first, common.cu BenchTime)
        raise f.error("warmup", "cuda_graph needs warmup >= 1: NCCL connects at first use, which a graph "
                                "capture cannot hold")
    if graph and params["per_iteration"]:  # written so: an eager pass's spread beside the replays' headline
        raise f.error("per_iteration", "times eager launches, not cuda_graph's replays (nccl-tests refuses -G with -I)")
    return params


def parser(collective: str) -> Callable[[Fields], dict[str, Any]]:
    available = PLACEMENTS[collective]

    def parse(f: Fields) -> dict[str, Any]:
        params = _collective_params(f)
        placements = f.get("placements", list, list(available))
        if not placements or any(p not in available for p in placements) or len(set(placements)) != len(placements):
            raise f.error("placements", f"{collective} can run {' and '.join(available)}-place "
                                        f"(as a list: {list(available)}), got {show(placements)}")
        params["placements"] = [p for p in available if p in placements]
        f.done()
        return params

    return parse


# -- memory ----------------------------------------------------------------------------------------

def need(measure: str, in_place_send: bool = False) -> Need:
    """One Bench at a time, as collectives.collective builds them: out of place a send and a receive
    buffer, in place one buffer (the send buffer where the collective works in it: reduce_scatter's
    in-place send holds the receive slice), plus the bounded comparison mask of the correctness check."""
    def fn(params: Mapping[str, Any], n: int, gpu: bool) -> tuple[int, int, int]:
        elt = units.DTYPE_BYTES[params.get("dtype", "float32")]
        peak, at = 0, 0
        for size in params["sizes"]:
            lay = layout(measure, size, elt, n)
            for placement in params.get("placements", PLACEMENTS[measure]):
                if placement == "out":
                    count = lay.send_count + lay.recv_count
                elif in_place_send:
                    count = lay.send_count
                else:
                    count = lay.recv_count
                bytes_ = count * elt + check_temporaries(max(lay.send_count, lay.recv_count))
                if bytes_ > peak:
                    peak, at = bytes_, size
        return device_need(peak, at, n, gpu)
    return fn


# -- reduction -------------------------------------------------------------------------------------

def iteration_stats(per_rank_iters: list[list[float]]) -> dict[str, Any]:
    """min/median/max/cv of per-iteration times in us, each iteration at its slowest rank (as nccl-tests -I takes
    the max over GPUs); empty when none were kept. Ranks that kept unequal counts, one time each (iters: 1), or a
    time that is no positive number (a broken timer) leave only iter_cv, NaN: the spread is not known
    (iteration_problem says why), never 0 and never read from a truncated column."""
    if not any(per_rank_iters):
        return {}
    if iteration_problem(per_rank_iters):
        return {"iter_cv": math.nan}
    times = [max(column) * 1e6 for column in zip(*per_rank_iters)]
    mean = fmean(times)
    return {"iter_us_min": min(times), "iter_us_median": median(times), "iter_us_max": max(times),
            "iter_cv": pstdev(times) / mean, "iter_us": times}


def iteration_problem(per_rank_iters: list[list[float]], hosts: Sequence[str] = ()) -> str | None:
    """Why the ranks' per-iteration times give no spread (None when they do, or none were kept)."""
    def who(i: int) -> str:
        return f"rank {i}" + (f" ({hosts[i]})" if i < len(hosts) else "")

    if not any(per_rank_iters):
        return None
    counts = [len(times) if isinstance(times, list) else -1 for times in per_rank_iters]
    if len(set(counts)) > 1:
        i = next(i for i, n in enumerate(counts) if n != counts[0])
        return f"{who(i)} kept {max(counts[i], 0)} per-iteration time(s), {who(0)} {counts[0]}"
    if counts[0] < 2:  # pstdev of one time is 0: an iter_cv of 0 would pass any ceiling on a spread never seen
        return f"{counts[0]} timed iteration per rank: no spread"
    for i, times in enumerate(per_rank_iters):
        for t in times:
            if not units.is_number(t) or not (math.isfinite(t) and t > 0):
                return f"{who(i)} timed an iteration at {t!r} s"
    return None


def _count(value: Any) -> bool:
    """A `wrong` a rank can have counted: an int (not a bool) >= 0."""
    return units.is_count(value) and value >= 0


def reduce_collective(collective: str, per_rank: list[dict[str, Any]], hosts: list[str],
                      judge_at: int, expected: Sequence[tuple[int, str]] | None = None,
                      where: str = "", checked: bool = True) -> Measurement:
    """Per-rank times and #wrong -> nccl-tests rows (mean time across ranks, bandwidth from it);
    the headline metrics come from the judged size, the worse placement where there are two. `expected`:
    the (size, placement) rows the suite asks for (check_rows). A `wrong` that is no count (-5, NaN, text)
    makes the row's and the metric's `wrong` NaN, a failed verdict naming the rank. Not `checked` (check_iters:
    0): each row's `wrong` is None (nccl-tests' N/A) and there is no `wrong` metric, whatever the ranks said."""
    check_rows(per_rank, hosts, expected, where)
    rows = []
    notes: list[str] = []
    for by_rank in zip(*[r["rows"] for r in per_rank]):
        first = by_rank[0]
        seconds = [r["seconds"] for r in by_rank]
        t, alg, bus = formulas.bandwidths(collective, first["bytes"], seconds)
        wrongs = [r.get("wrong") for r in by_rank] if checked else []  # a sum: +5 and -5 cancelled
        iters = [r.get("iter_seconds") or [] for r in by_rank]
        rows.append({"size": first["size"], "count": first["count"], "bytes": first["bytes"],
                     "placement": first["placement"], "dtype": per_rank[0]["dtype"], "time_us": t * 1e6,
                     "algbw": alg, "busbw": bus,
                     "wrong": (sum(wrongs) if all(map(_count, wrongs)) else math.nan) if checked else None,
                     "wrong_ranks": [i for i, w in enumerate(wrongs) if not _count(w) or w],
                     "rank_time_us": [s * 1e6 for s in seconds],
                     "slowest_rank": max(range(len(seconds)), key=seconds.__getitem__),
                     **iteration_stats(iters)})
        why = iteration_problem(iters, hosts) if first["size"] == judge_at else None
        if why:
            notes.append(f"iter_cv at {units.format_size(first['size'])} ({first['placement']}-place) is not known: {why}")
    judged = [r for r in rows if r["size"] == judge_at]
    if not judged:  # never the last size instead: a headline of a size no limit was written for
        raise NotMeasured(f"{where or collective}: no row at the judged size {units.format_size(judge_at)} (rows at "
                          f"{', '.join(dict.fromkeys(units.format_size(r['size']) for r in rows))})")
    # The worse placement, where a NaN (a time of 0: a broken timer) is worst of all: min() and max() keep the
    # first row against a NaN, which would let a placement that measured nothing pass behind the other
    worst_row = min(judged, key=lambda r: (math.isfinite(r["busbw"]), r["busbw"]))
    worst = worst_row["slowest_rank"]
    cvs = [r.get("iter_cv", math.nan) for r in judged]  # NaN where any placement's spread is not known
    return Measurement(
        metrics={"busbw": worst_row["busbw"], "algbw": worst_row["algbw"],
                 "time_us": max((r["time_us"] for r in judged), key=lambda t: (not math.isfinite(t), t)),
                 "avg_busbw": fmean(r["busbw"] for r in rows),
                 **({"wrong": float(sum(r["wrong"] for r in rows))} if checked else {}),
                 "iter_cv": max(cvs) if all(math.isfinite(c) for c in cvs) else math.nan},
        units=dict(UNITS),
        rows=rows, worst=f"rank {worst} ({hosts[worst]})", judged_at=worst_row["size"],
        worst_of={"wrong": _wrong_ranks(rows, per_rank, hosts)} if any(r["wrong_ranks"] for r in rows) else {},
        notes=tuple(notes))


def _wrong_ranks(rows: list[dict[str, Any]], per_rank: list[dict[str, Any]], hosts: list[str]) -> str:
    """The ranks whose results were wrong (not the slowest one), with their counts and the sizes; a rank
    whose `wrong` is no count, with what it answered."""
    counts: dict[int, int] = {}
    sizes: dict[int, list[int]] = {}
    said: dict[int, str] = {}
    for row, by_rank in zip(rows, zip(*[r["rows"] for r in per_rank])):
        for rank in row["wrong_ranks"]:
            value = by_rank[rank].get("wrong")
            if not _count(value):
                said.setdefault(rank, f"wrong {show(value, 20)} at {units.format_size(row['size'])}, no count")
                continue
            counts[rank] = counts.get(rank, 0) + value
            sizes.setdefault(rank, []).append(row["size"])
    named = [f"rank {r} ({hosts[r]}): {said[r]}" if r in said else
             f"rank {r} ({hosts[r]}): {counts[r]} wrong at {', '.join(units.format_size(z) for z in dict.fromkeys(sizes[r]))}"
             for r in sorted(counts.keys() | said.keys())]
    return "; ".join(named[:8]) + (f"; and {len(named) - 8} more rank(s)" if len(named) > 8 else "")


# -- judging ---------------------------------------------------------------------------------------

def judge(a: Answers, rules: Rules) -> tuple[Measurement, list[Verdict]]:
    check = a.check
    if len(a.per_rank) != len(a.ranks):
        raise HarnessError(f"{check.id}: {len(a.per_rank)} answer(s) from {len(a.ranks)} rank(s) on "
                           f"{', '.join(sorted(set(a.hosts)))}: a rank's times are missing, not judged")
    elt = units.DTYPE_BYTES[check.params.get("dtype", "float32")]
    size = lambda s: layout(check.measure, s, elt, len(a.per_rank)).size  # noqa: E731 (the `size` the ranks report)
    expected = [(size(s), p) for s in check.params["sizes"]
                for p in check.params.get("placements", PLACEMENTS[check.measure])]
    checked = bool(check.params["check_iters"])  # 0: nothing compared, so no `wrong` metric and rows' wrong None
    m = reduce_collective(check.measure, a.per_rank, a.hosts, size(check.params["judge_at"]), expected, check.id, checked)
    comm = describe(a.backend, a.per_rank, a.ranks, a.tuned, dict(check.env), a.tuning_error)
    tag_rows(m.rows, comm.get("algorithms", {}))
    m = dataclasses.replace(m, comm=comm)
    limits = {k: v for k, v in rules.limits.items() if k != "wrong"} | ({"wrong": wrong_limit(check.id)} if checked else {})
    if not checked:  # no element was compared: a `wrong == 0` verdict would be a pass on nothing
        m = dataclasses.replace(m, notes=(*m.notes, "correctness not checked (check_iters: 0)"))
    unjudged: list[str] = []
    if "iter_cv" in limits and not math.isfinite(m.metrics["iter_cv"]):
        # a spread that is not known is not judged: never a pass, and never a failed verdict the hardware
        # did not earn (ranks that kept per-iteration times differently, a broken timer, none kept)
        del limits["iter_cv"]
        said = [n for n in m.notes if n.startswith("iter_cv ")]
        m = dataclasses.replace(m, notes=tuple(n for n in m.notes if n not in said))
        unjudged += [n.replace(" is not known: ", " is not judged: ", 1) for n in said] or [
            "iter_cv is not judged: no per-iteration times were kept (per_iteration: false, or a CUDA graph)"]
    verdicts = evaluate(m, limits)
    if a.backend == "nccl":
        said_by_nccl, more = nccl_verdicts(check.id, comm, rules, a.hosts)
        verdicts += said_by_nccl
        unjudged += more
    # nothing failed: what could not be judged (what the logs could not say, a spread not known) is the item's
    # error; beside a failure (the busbw it measured, NCCL's errors) the failure stands and it goes in the
    # item's notes (judging/unjudged.py)
    notes = notes_or_error((v.passed for v in verdicts), unjudged, lambda: f"{check.id}: {'; '.join(unjudged)}")
    if notes:
        m = dataclasses.replace(m, notes=(*m.notes, *notes))
    return m, verdicts


# What NCCL's logs said, judged, and what they could not say (`... is not judged: <why>`, naming the node):
# the judge decides whether the latter is the item's error (nothing failed) or a note beside a failure
Judged = tuple[list[Verdict], list[str]]
TRANSPORT_KEYS = ("net", "gdr", "nics")  # the expectations on NCCL's network between nodes (transport_verdicts)


def nccl_verdicts(check_id: str, comm: dict[str, Any], rules: Rules, hosts: Sequence[str]) -> Judged:
    """NCCL's own errors fail every run, one node's too (a `transport/p2p.cc` WARN between its GPUs); the
    network between nodes (net, gdr, nics) is judged on multi-node runs only."""
    between_nodes = rules.multi_node and len(set(hosts)) > 1
    verdicts, unjudged = transport_verdicts(check_id, comm, rules, hosts, network=between_nodes)
    p2p, p2p_unjudged = p2p_verdicts(check_id, comm, rules)
    asked = rules.expect.get("p2p") is True or between_nodes and any(rules.expect.get(k) is not None
                                                                         for k in TRANSPORT_KEYS)
    unread = [f"NCCL's log of rank {u.get('rank')} ({u.get('host') or 'its host'}) was not read ({u.get('why')}): what "
              "it said of its GPUs and NICs is not judged" for u in comm.get("unread_logs") or ()] if asked else []
    return verdicts + p2p, unjudged + p2p_unjudged + unread


def p2p_verdicts(check_id: str, comm: dict[str, Any], rules: Rules) -> Judged:
    """Expectation `p2p: true` (NVLink/NVSwitch profiles): ranks whose NCCL connected GPUs of one host
    through SHM fail, named by rank and host; without a log it is not judged."""
    if rules.expect.get("p2p") is not True:
        return [], []
    if not comm.get("logs"):
        return [], [f"P2P between GPUs is not judged: {comm.get('why_not') or 'no NCCL log was read'}; expected "
                    f"p2p=true (run with --nccl-log init or full, and leave NCCL_DEBUG unset)"]
    rule = Expectation(check_id, "P2P between GPUs", "P2P", rules.expect_origin, "no SHM between GPUs of one host")
    shm = comm.get("shm_ranks") or []
    if not shm:
        if "P2P" not in (comm.get("transports") or ()):
            return [], []  # no two GPUs of one host connected: nothing to judge
        return [Verdict("P2P between GPUs", "P2P", "", rule, True, subject="NCCL", detail="P2P between GPUs, no SHM")], []
    by_host: dict[str, list[int]] = {}
    for s in shm:
        by_host.setdefault(str(s.get("host") or ""), []).append(int(s.get("rank") or 0))
    return [Verdict("P2P between GPUs", "SHM", "", rule, False, subject=host or "NCCL",
                    detail=f"SHM between GPUs on {host or 'a host'} (rank {', '.join(map(str, ranks[:8]))}"
                           f"{' ...' if len(ranks) > 8 else ''}), P2P expected: peer-to-peer is broken there (ACS "
                           f"redirect, a VM without P2P, NCCL_P2P_DISABLE, the driver)")
            for host, ranks in by_host.items()], []


def transport_verdicts(check_id: str, comm: dict[str, Any], rules: Rules, nodes: Sequence[str] = (),
                       network: bool = True) -> Judged:
    """NCCL's transport between the item's nodes against the expectations net, gdr and nics, from its ranks'
    own logs (fabric/transport.py, as `clustercheck probe nccl-log` judges a capture), and NCCL's own errors.
    What the logs cannot say is returned as not judged, never a pass: a node of `nodes` whose logs show no
    network included. Every finding is kept: one unjudged does not hide a failed one after it."""
    from clustercheck.fabric.comm import merged_net
    from clustercheck.fabric.transport import ErrorLine, error_findings, judge as judge_transport

    out = [Verdict(f.what, str(f.measured), "", Expectation(check_id, f.what, "0", "NCCL's own errors fail", f.detail),
                   False, subject=f.subject, detail=f.detail)
           for f in error_findings([ErrorLine(e.get("host") or "", e.get("dev") or "", 0, str(e.get("text")),
                                              int(e.get("count") or 1), e.get("rank"))
                                    for e in comm.get("nccl_errors") or ()])]
    expect = {k: rules.expect[k] for k in TRANSPORT_KEYS if rules.expect.get(k) is not None}
    if not expect or not network:
        return out, []
    if not comm.get("logs"):
        return out, [f"NCCL's transport between nodes is not judged: {comm.get('why_not') or 'no NCCL log was read'}"
                     f"; expected {', '.join(f'{k}={v}' for k, v in expect.items())} (run with --nccl-log init or "
                     f"full, and leave NCCL_DEBUG unset)"]
    hosts = merged_net([{"net": comm.get("net") or {}}])
    env = dict(comm.get("nccl_env") or {})
    unjudged = []
    for f in judge_transport(hosts, env, expect, nodes):
        if f.passed is None:
            unjudged.append(f"NCCL's {f.what} between nodes is {f.detail}")
            continue
        rule = Expectation(check_id, f.what, str(f.expected), rules.expect_origin, f.detail)
        out.append(Verdict(f.what, "" if f.measured is None else str(f.measured), "", rule, f.passed,
                           subject=f.subject, detail=f.detail))
    return out, unjudged


def check_layouts(check: CheckSpec, nranks: int) -> None:
    for size in check.params["sizes"]:
        if layout(check.measure, size, units.DTYPE_BYTES[check.params["dtype"]], nranks).param_count == 0:
            raise SizeTooSmall(f"{check.where}: {check.measure} of {size} B over {nranks} ranks moves "
                               f"nothing (nccl-tests rounds per-rank counts down to 16 B); use larger sizes")


PROVIDES = tuple(
    Kind(name, ("node", "cluster", "pair", *(("localize",) if name == "all_reduce" else ())), UNITS, parser(name),
         f"torch.distributed {text} over a size sweep, timed and checked as nccl-tests does",
         "clustercheck.measure.collectives:collective", judge, min_ranks=2, tuning_pass=True, figure="sweep",
         check_group=check_layouts, extra={"collective": name}, memory=need(name, in_place_send=name == "reduce_scatter"),
         domains={"iter_cv": ITER_CV}, expect_keys=(*TRANSPORT_KEYS, "p2p", "fabric_gbps", "fabric_ports"),
         expect_needs={**dict.fromkeys(TRANSPORT_KEYS, ("between_nodes", "nccl")), "p2p": ("nccl", "gpus_of_a_node"),
                       **dict.fromkeys(("fabric_gbps", "fabric_ports"), ("fabric_floor",))})  # run/expect_read.py NEEDS
    for name, text in _TEXT.items())
