"""`measure: nvbandwidth`: NVIDIA nvbandwidth run on each node's first rank with the testcases a suite
names; every matrix judged per GPU or GPU pair (its cells), with its SUM, lowest, median and
lowest/median. A cell the tool could not measure never passes. Ranks: clustercheck.measure.native:nvbandwidth."""

from __future__ import annotations

import math
import re
import statistics
from typing import Any

from clustercheck import units
from clustercheck.judging.measurement import Measurement
from clustercheck.judging.verdicts import Expectation, Verdict
from clustercheck.kinds import params as shared
from clustercheck.kinds.base import FRACTION, Answers, CheckSpec, Kind, Rules
from clustercheck.kinds.native import (BUILT_IN, judge_limits, program_name, parse_output, result_of, run_verdict,
                                      task_params)
from clustercheck.errors import NoThreshold, Skip, show
from clustercheck.schema import Fields, between
from clustercheck.toolout import nvbandwidth as reader
from clustercheck.probes import nvbandwidth as probe
from clustercheck.toolout.nvbandwidth_run import NvbandwidthRun

# Every testcase nvbandwidth v0.8 runs on one node (NVIDIA/nvbandwidth testcase.h, createTestcases() in
# nvbandwidth.cpp); the multinode_* ones need an MPI launch across nodes, which this kind does not do.
TESTCASES = tuple(
    [f"{a}_memcpy_{e}" for e in ("ce", "sm") for a in ("host_to_device", "device_to_host",
                                                       "host_to_device_bidirectional",
                                                       "device_to_host_bidirectional")]
    + [f"device_to_device_{b}memcpy_{d}_{e}" for e in ("ce", "sm") for b in ("", "bidirectional_")
       for d in ("read", "write")]
    + [f"{a}_{e}" for e in ("ce", "sm") for a in ("all_to_host_memcpy", "all_to_host_bidirectional_memcpy",
                                                  "host_to_all_memcpy", "host_to_all_bidirectional_memcpy",
                                                  "all_to_one_write", "all_to_one_read", "one_to_all_write",
                                                  "one_to_all_read")]
    + ["host_device_latency_sm", "device_to_device_latency_sm", "device_local_copy"])
# The matrices they print: a bidirectional device-to-device test prints three (testcases_ce.cpp,
# testcases_sm.cpp: key + "_read1", "_read2", "_total", or "_write1", "_write2", "_total").


def _matrices(testcase: str) -> list[str]:
    if not testcase.startswith("device_to_device_bidirectional"):
        return [testcase]
    way = "read" if "_read_" in testcase else "write"
    return [f"{testcase}_{way}1", f"{testcase}_{way}2", f"{testcase}_total"]


RESULTS = tuple(name for t in TESTCASES for name in _matrices(t))
LATENCY_RESULTS = ("host_device_latency_sm", "device_to_device_latency_sm")  # in ns; the rest in GB/s
DEFAULT = ("host_to_device_memcpy_ce", "device_to_host_memcpy_ce", "device_to_device_memcpy_read_ce")


# Per matrix: its cells (one per GPU or GPU pair, judged per subject), the tool's SUM, and the lowest
# cell, the median cell and lowest/median (uniformity). nvbandwidth's latency tests print ns: kept in us.
METRICS = {f"{name}{suffix}": ("ratio" if suffix == "_min_ratio" else "us" if name in LATENCY_RESULTS else "GB/s")
           for name in RESULTS for suffix in ("", "_sum", "_min", "_median", "_min_ratio")}


def parse(f: Fields) -> dict[str, Any]:
    binary = program_name(f, "nvbandwidth", re.compile("nvbandwidth"), "nvbandwidth")
    cases = f.get("testcases", list, list(DEFAULT))
    if not cases:
        raise f.error("testcases", "needs at least one testcase")
    for case in cases:
        if case not in TESTCASES:
            near = [t for t in TESTCASES if isinstance(case, str) and case and case in t][:3]
            hint = f"; did you mean {', '.join(near)}?" if near else " (nvbandwidth --list names them)"
            raise f.error("testcases", f"{show(case)} is not an nvbandwidth testcase{hint}")
    if len(set(cases)) != len(cases):
        raise f.error("testcases", "lists a testcase twice")
    buffer = shared.size(f, "buffer_size", "512MiB")  # nvbandwidth's default -b is 512 MiB
    if buffer % (1 << 20) or buffer > shared.MAX_SIZE:
        raise f.error("buffer_size", f"nvbandwidth takes whole MiB up to {units.format_size(shared.MAX_SIZE)}, "
                                     f"got {units.format_size(buffer)}")
    params = {"binary": binary, "testcases": list(cases), "buffer_size": buffer,
              "samples": f.get("samples", int, 3, check=between(1, 1000))}
    f.done()
    return params


def argv(params: dict[str, Any]) -> list[str]:
    """nvbandwidth's options (nvbandwidth.cpp: -t testcases, -b buffer size in MiB, -i test samples)."""
    return [params["binary"], "-t", *params["testcases"], "-b", str(params["buffer_size"] >> 20),
            "-i", str(params["samples"])]


def judge(a: Answers, rules: Rules) -> tuple[Measurement, list[Verdict]]:
    result = result_of(a)
    run: NvbandwidthRun = parse_output(reader.parse, result)
    metrics: dict[str, float] = {}
    subjects: dict[str, dict[str, float]] = {}
    rows: list[dict[str, Any]] = []
    for case in run.testcases:
        if case.name not in RESULTS:
            continue  # a matrix this version of clustercheck has no metric for: shown by the probe, not judged
        scale = 1e-3 if case.unit == "ns" else 1.0
        if case.sum is not None:
            metrics[f"{case.name}_sum"] = case.sum * scale
        values, unmeasured = [], False
        for subject, raw in case.subjects():
            value = math.nan if raw is None else raw * scale  # a cell the tool could not measure never passes
            subjects.setdefault(subject, {})[case.name] = value
            if raw is not None:
                values.append(value)
                rows.append({"subject": subject, "metric": case.name, "median": value, "min": value, "max": value})
            unmeasured = unmeasured or raw is None
        if unmeasured:  # a GPU or pair the tool printed N/A for: its lowest, median and spread are not known
            metrics.update({f"{case.name}{s}": math.nan for s in ("_min", "_median", "_min_ratio")})
        elif values:
            mid = statistics.median(values)
            metrics.update({f"{case.name}_min": min(values), f"{case.name}_median": mid,
                            f"{case.name}_min_ratio": min(values) / mid if mid else math.nan})
    first = rows[0]["metric"] if rows else None  # the worst subject: the lowest cell of the first matrix
    worst = min((r for r in rows if r["metric"] == first), key=lambda r: r["median"], default={}).get("subject")
    m = Measurement(metrics=metrics, units=dict(METRICS), rows=rows, worst=worst, subjects=subjects)
    asked = a.check.params["testcases"]
    ran = {name for t in asked for name in _matrices(t)}
    # a profile's defaults.nvbandwidth names every testcase it has a floor for; those this check does not run
    # do not judge it (a limit the check itself is named for still must find its metric: NotMeasured)
    limits = {k: lim for k, lim in rules.limits.items()
              if not (lim.key.startswith("defaults.") and _result(k) not in ran)}
    verdict = run_verdict(a.check.id, result, run.failure, _summary(run, asked))
    # each matrix judged whole, as the offline probe judges it (probes/nvbandwidth.py: one judge per output)
    whole = [Verdict(v.what, "" if v.measured is None else str(v.measured), "",
                     Expectation(a.check.id, v.what, "a whole matrix", BUILT_IN, v.detail), v.passed,
                     subject=v.subject, detail=v.detail) for v in probe.matrix_verdicts(run)]
    if rules.limits and not limits and all(v.passed for v in [verdict, *whole]):
        raise _not_judged(a.check, rules)  # the built-in verdicts alone are no pass; a failed one stands alone
    return m, [verdict] + whole + judge_limits(m, limits, verdict.passed)


def _not_judged(check: CheckSpec, rules: Rules) -> NoThreshold:
    """Every limit was a defaults.nvbandwidth floor on a testcase this check does not run: nothing judged it."""
    covered = sorted({_result(k) for k in rules.limits})
    first = min(rules.limits.values(), key=lambda lim: lim.line)
    at = rules.defaults_at or (f"{first.file}:{first.line}" if first.file else first.origin)
    return NoThreshold(f"{check.id}: not judged: the profile's defaults.nvbandwidth ({at}) has floors for "
                       f"{', '.join(covered)} only; this check runs {', '.join(check.params['testcases'])}; add "
                       f"a floor for it under checks.{check.id} or defaults.nvbandwidth")


def _result(metric: str) -> str:
    """The matrix a metric is about: host_to_device_memcpy_ce_min -> host_to_device_memcpy_ce."""
    for suffix in ("_min_ratio", "_median", "_min", "_sum"):
        if metric.endswith(suffix) and metric[:-len(suffix)] in RESULTS:
            return metric[:-len(suffix)]
    return metric


# Testcases between GPUs (nvbandwidth waives them on one GPU): a check of nothing else over one GPU does not apply.
_PEERS = ("device_to_device_", "all_to_one_", "one_to_all_")


def check_group(check: CheckSpec, group: int) -> None:
    if group < 2 and all(t.startswith(_PEERS) for t in check.params["testcases"]):
        raise Skip(f"{', '.join(check.params['testcases'])} need two GPUs or more; this node has one")


def _summary(run: NvbandwidthRun, asked: list[str]) -> str:
    return f"{len(set(run.ran))} of {len(asked)} testcase(s) ran; {probe.summary(run)}"


PROVIDES = (Kind("nvbandwidth", ("node",), METRICS, parse,
                 "NVIDIA nvbandwidth run on each node's first rank: per-GPU and per-pair copy bandwidth per testcase",
                 "clustercheck.measure.native:nvbandwidth", judge, task_params=task_params, check_group=check_group,
                 needs_tool=True, skips_on_answers=True,
                 domains={m: FRACTION for m in METRICS if m.endswith("_min_ratio")}),)
