"""`measure: nccl_tests`: an nccl-tests binary (all_reduce_perf by default) run on each node's first rank
over the node's GPUs, with validated flags; its table judged like a collective (busbw, algbw and time at
the largest size, avg_busbw) plus the built-in `#wrong` and out-of-bounds verdicts, which a profile cannot
relax. A suite names a program, never a path (kinds/native.py says why). Ranks:
clustercheck.measure.native:nccl_tests."""

from __future__ import annotations

import re
from typing import Any, Mapping

from clustercheck import units
from clustercheck.judging.measurement import Measurement
from clustercheck.judging.verdicts import Expectation, Verdict
from clustercheck.kinds import params as shared
from clustercheck.errors import HarnessError, Skip
from clustercheck.kinds.base import Answers, CheckSpec, Kind, Rules
from clustercheck.kinds.native import (BUILT_IN, judge_limits, parse_output, program_name, result_of, run_verdict,
                                      task_params, zero_limit)
from clustercheck.probes import nccl_tests as probe
from clustercheck.probes.base import ProbeVerdict
from clustercheck.schema import Fields, between, one_of
from clustercheck.toolout import nccl_tests as reader
from clustercheck.toolout.nccl_run import NCCL_TESTS_COLLECTIVES
from clustercheck.toolout.nccl_tests import NcclTestsRun

METRICS = {"busbw": "GB/s", "algbw": "GB/s", "time_us": "us", "avg_busbw": "GB/s", "wrong": "count",
           "out_of_bounds": "count"}
# NVIDIA/nccl-tests src/common.cu: main returns non-zero when errors[0] (#wrong) or the Avg bus bandwidth is
# below 0.9 x NCCL_TESTS_MIN_BW
_EXIT_HINT = " (nccl-tests exits non-zero when a result is wrong or below NCCL_TESTS_MIN_BW)"
# `_mpi` when nccl-tests was built with NAME_SUFFIX=_mpi
_BINARY = re.compile(rf"(?:{'|'.join(NCCL_TESTS_COLLECTIVES)})_perf(?:_mpi)?")
# -d and -o as nccl-tests names them (src/common.cu test_typenames, test_opnames); "all" is left out: it
# prints one table per type or op, and a check judges one run.
DATATYPES = ("int8", "uint8", "int32", "uint32", "int64", "uint64", "half", "float", "double", "bfloat16",
                  "f8e4m3", "f8e5m2")
OPS = ("sum", "prod", "max", "min", "avg", "mulsum")


def _checked(value: int) -> str | None:
    """nccl-tests' -c: how many times it checks each result. 0 turns the data check off (#wrong N/A), and a
    result nobody checked is never passed (a capture without it is `not judged` by the probe)."""
    if value == 0:
        return ("0 turns off nccl-tests' data check (#wrong N/A), and clustercheck never passes data nobody "
                "checked: give 1 or more")
    return between(1, 1000)(value)


def parse(f: Fields) -> dict[str, Any]:
    binary = program_name(f, "all_reduce_perf", _BINARY,
                     f"an nccl-tests binary (<collective>_perf, collective one of {', '.join(NCCL_TESTS_COLLECTIVES)})")
    lo = shared.size(f, "min_bytes", "8")
    hi = shared.size(f, "max_bytes", "128MiB")
    for key, size in (("min_bytes", lo), ("max_bytes", hi)):
        if size > shared.MAX_SIZE:
            raise f.error(key, f"{units.format_size(size)} is above the {units.format_size(shared.MAX_SIZE)} limit")
    if hi < lo:
        raise f.error("max_bytes", f"must be >= min_bytes ({lo}), got {hi}")
    params = {
        "binary": binary, "min_bytes": lo, "max_bytes": hi,
        "step_factor": f.get("step_factor", int, 2, check=between(2, 1024)),
        "iters": f.get("iters", int, 20, check=between(1, 100_000)),
        "warmup": f.get("warmup", int, 5, check=between(0, 10_000)),
        "gpus": f.get("gpus", int, None, check=between(1, 64)),  # None: every GPU of the node, 1 without GPUs
        "check": f.get("check", int, 1, check=_checked),
        "datatype": f.get("datatype", str, "float", check=one_of(*DATATYPES)),
        "op": f.get("op", str, "sum", check=one_of(*OPS)),
        "cudagraph": f.get("cudagraph", int, 0, check=between(0, 1000)),
        "blocking": f.get("blocking", int, 0, check=between(0, 1)),
    }
    f.done()
    return params


def argv(params: dict[str, Any], gpus: int) -> list[str]:
    """The flags of one single-node run (NVIDIA/nccl-tests README: -b -e -f -g; src/common.cu longopts)."""
    argv = [params["binary"], "-b", str(params["min_bytes"]), "-e", str(params["max_bytes"]),
            "-f", str(params["step_factor"]), "-g", str(gpus), "-n", str(params["iters"]),
            "-w", str(params["warmup"]), "-c", str(params["check"]), "-d", params["datatype"],
            "-o", params["op"]]
    # -G and -z only when asked for: builds older than the flag stop at an option they do not know
    return argv + (["-G", str(params["cudagraph"])] if params["cudagraph"] else []) \
        + (["-z", "1"] if params["blocking"] else [])




def need(params: Mapping[str, Any], n: int, gpu: bool) -> tuple[int, int, int]:
    """The tool's own send and receive buffers at max_bytes on each GPU (none of ours on a CPU run)."""
    size = params["max_bytes"]
    return (2 * size, 0, size) if gpu else (0, 0, size)


def judge(a: Answers, rules: Rules) -> tuple[Measurement, list[Verdict]]:
    result = result_of(a)
    run: NcclTestsRun = parse_output(lambda text: reader.parse(text, result["binary"]), result)
    foreign = not_asked(run, result, a.check.params)
    if foreign:  # another run's table says nothing about this node: never judged as its own
        raise HarnessError(f"{result['binary']} on {result['host']} printed a table that is not the run clustercheck "
                           f"asked for ({'; '.join(foreign)}): not judged (another build or a wrapper on PATH?)")
    rows = [{"size": r.size, "count": r.count, "dtype": r.dtype, "placement": name.split("_")[0],
             "time_us": p.time_us, "algbw": p.algbw, "busbw": p.busbw, "wrong": p.wrong, "line": r.line}
            for r in run.rows for name, p in r.placements()]
    metrics: dict[str, float] = {}
    largest = run.largest()
    if largest is not None and largest.placements():
        places = [p for _, p in largest.placements()]
        worse = min(places, key=lambda p: p.busbw)  # judged on the worse placement, as the collectives are
        metrics.update(busbw=worse.busbw, algbw=worse.algbw, time_us=max(p.time_us for p in places))
    if run.avg_busbw is not None:
        metrics["avg_busbw"] = run.avg_busbw
    checked = [p.wrong for r in run.rows for _, p in r.placements() if p.wrong is not None]
    if checked:
        metrics["wrong"] = float(sum(checked))
    if run.out_of_bounds is not None:
        metrics["out_of_bounds"] = float(run.out_of_bounds)
    m = Measurement(metrics=metrics, units=dict(METRICS), rows=rows, worst=result["host"],
                    judged_at=largest.size if largest else None)
    check = a.check
    # the data verdicts first: a wrong result is what an exclusion list should name, not the exit status;
    # they are the offline probe's own (probes/nccl_tests.py), so a capture and a run are judged alike
    subject = result["binary"]
    data = [_verdict(check.id, v) for v in probe.data_verdicts(run, subject, check.params["check"])
            + probe.rank_verdicts(run, subject)]
    ran = run_verdict(check.id, result, run.failure, probe.summary(run), _EXIT_HINT)
    profile = {k: v for k, v in rules.limits.items() if k not in ("wrong", "out_of_bounds")}
    return m, data + [ran] + judge_limits(m, profile, ran.passed)


def not_asked(run: NcclTestsRun, result: Mapping[str, Any], params: Mapping[str, Any]) -> list[str]:
    """How the printed run differs from the one the rank started (its argv: one process, -g GPUs, -b -e -f,
    -d, -o): Rank lines of another count or of another host than the node, a header of another nThread x
    nGpus or sweep, rows of another type or reduction. Only what the output prints is compared, so a crash
    before the table stays the run's failure. A `Reducing maxBytes` line is the tool's own cut for memory,
    kept as the probe keeps it (the header's maxBytes is still the -e asked, the rows judged up to the cut)."""
    argv = [str(x) for x in result.get("argv") or []]
    flags = dict(zip(argv[1::2], argv[2::2]))
    g = int(flags["-g"]) if "-g" in flags else params.get("gpus")
    lo, hi = int(flags.get("-b", params["min_bytes"])), int(flags.get("-e", params["max_bytes"]))
    factor = int(flags.get("-f", params["step_factor"]))
    dtype, op = flags.get("-d", params["datatype"]), flags.get("-o", params["op"])
    out = []
    began = bool(run.rows) or run.out_of_bounds is not None   # every Rank line is printed before the table
    if g is None and (began or run.n_gpus is not None):
        out.append("the rank's answer does not say the -g it gave")
    elif run.n_gpus is not None and (run.n_threads or 1, run.n_gpus) != (1, g):
        out.append(f"header nThread {run.n_threads} nGpus {run.n_gpus}, asked one process with -g {g}")
    elif run.n_gpus is None and began and len(run.ranks) != g:
        # with the header, Rank lines that disagree with it fail rank_verdicts (Rank lines), as offline
        out.append(f"{len(run.ranks) or 'no'} Rank line(s) and no header line, asked -g {g}")
    pids = {r.pid for r in run.ranks if r.pid is not None}
    if len(pids) > 1:   # mpirun's or srun's table: the kind starts one process per node
        out.append(f"Rank lines of {len(pids)} processes, the check started one")
    names = {n for h in (result.get("host"), result.get("hostname")) if h for n in (str(h), str(h).split(".")[0])}
    elsewhere = [h for h in run.hosts if h not in names and h.split(".")[0] not in names]
    if elsewhere:
        out.append(f"Rank lines on {', '.join(elsewhere)}, the check ran on {result['host']}")
    header_max = run.reduced_from if run.reduced_from is not None else run.max_bytes
    if header_max is not None:
        if (run.min_bytes, header_max) != (lo, hi) or run.step not in (None, (factor, "factor")):
            step = f" step {run.step[0]}({run.step[1]})" if run.step else ""
            out.append(f"header minBytes {run.min_bytes} maxBytes {header_max}{step}, asked -b {lo} -e {hi} -f {factor}")
        if run.max_bytes is not None and run.max_bytes > header_max:
            out.append(f"'Reducing maxBytes to {run.max_bytes}' above the header's {header_max}")
    elif run.rows and not hi // factor < max(r.size for r in run.rows) <= hi:
        out.append(f"no header line, and the largest size {max(r.size for r in run.rows)} B is not the last of a "
                   f"sweep to -e {hi} -f {factor}")
    types = sorted({r.dtype for r in run.rows} - {dtype})
    if types:
        out.append(f"type {', '.join(types)} in its rows, asked -d {dtype}")
    if _BINARY_STEM.sub("", str(result["binary"])) in _REDUCING:
        ops = sorted({str(r.redop) for r in run.rows} - {op})
        if ops:
            out.append(f"reduction {', '.join(ops)} in its rows, asked -o {op}")
    return out


_REDUCING = ("all_reduce", "reduce", "reduce_scatter")   # the collectives whose rows print the -o they ran
_BINARY_STEM = re.compile(r"_perf(?:_mpi)?$")

_ZERO_WHY = {"wrong": "every element of the result must match (nccl-tests #wrong)",
             "out_of_bounds": "nccl-tests counts results outside its tolerance"}


def _verdict(check_id: str, v: ProbeVerdict) -> Verdict:
    """A data verdict of the probe as a run records it: `wrong` and `out_of_bounds` against their built-in
    `== 0` limit, the others as the tool's own expectations."""
    if v.what in _ZERO_WHY:
        limit = zero_limit(check_id, v.what, _ZERO_WHY[v.what])
        measured = float(v.measured) if isinstance(v.measured, (int, float)) else str(v.measured)
        margin = limit.margin(measured) if isinstance(measured, float) else None
        return Verdict(v.what, measured, "count", limit, v.passed, margin, subject=v.subject, detail=v.detail)
    rule = Expectation(check_id, v.what, "-" if v.expected is None else str(v.expected), BUILT_IN, v.detail)
    return Verdict(v.what, "" if v.measured is None else str(v.measured), "", rule, v.passed, subject=v.subject,
                   detail=v.detail)


def check_group(check: CheckSpec, group: int) -> None:
    """One GPU moves no data between GPUs (nccl-tests' bus factor over one rank is 0), as clustercheck's own
    collectives over one rank: skipped before any threshold is looked up, never an error for want of one."""
    if check.params.get("gpus") == 1:
        raise Skip(f"{check.params['binary']} over one GPU (gpus: 1) moves no data between devices")


PROVIDES = (Kind("nccl_tests", ("node",), METRICS, parse,
                 "an nccl-tests binary (all_reduce_perf by default) run on each node's first rank over the node's GPUs; "
                 "its table judged like a collective", "clustercheck.measure.native:nccl_tests", judge, figure="sweep",
                 task_params=task_params, memory=need, min_ranks=2, check_group=check_group, needs_tool=True,
                 skips_on_answers=True),)
