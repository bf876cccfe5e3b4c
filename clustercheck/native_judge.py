"""Controller side of `measure: nccl_tests` and `measure: nvbandwidth`: the node's first rank ran the tool
(clustercheck/measure/native.py); its output is read with the same parsers as the offline probes
(clustercheck/toolout/) and judged like a built-in measurement: the profile's limits through
`results.evaluate`, plus built-in verdicts a profile cannot relax.

Outcomes (DESIGN: failed = the hardware, error = the harness):
- **skipped**: the binary is not on the rank's PATH on that node (nothing about the node is known);
- **error**: the binary is there but cannot be started, or it printed nothing the parser recognises as
  the tool's output (a loader failure, a bad install, an argument the build does not know), or more
  output than clustercheck keeps: none of these says anything about the GPUs or the fabric;
- **failed**: the tool ran and its own output shows a crash (the parser's failure line: `Test NCCL
  failure`, nvbandwidth's pattern check, `Aborted`), a cut-off table, a timeout, a non-zero exit, any
  `#wrong` > 0 or out-of-bounds value, or a limit missed. A tool that started, printed its header and
  then crashed on a healthy harness is evidence against the node.
"""

from __future__ import annotations

import math
import signal
import statistics
from typing import TYPE_CHECKING, Any, Callable, Mapping, TypeVar

from clustercheck.errors import HarnessError, Skip
from clustercheck.native_params import LATENCY_RESULTS, NVBANDWIDTH_RESULTS
from clustercheck.results import Measurement, evaluate
from clustercheck.thresholds import Limit
from clustercheck.toolout import NotToolOutput
from clustercheck.verdicts import Expectation, Verdict, of_limit

if TYPE_CHECKING:
    from clustercheck.checks import Answers, Rules
    from clustercheck.suite import CheckSpec
    from clustercheck.toolout.nccl_tests import NcclTestsRun
    from clustercheck.toolout.nvbandwidth import NvbandwidthRun, Testcase

T = TypeVar("T")

NCCL_METRICS = {"busbw": "GB/s", "algbw": "GB/s", "time_us": "us", "avg_busbw": "GB/s", "wrong": "count",
                "out_of_bounds": "count"}
# Per matrix: its cells (one per GPU or GPU pair, judged per subject), the tool's SUM, and the lowest
# cell, the median cell and lowest/median (uniformity). nvbandwidth's latency tests print ns: kept in us.
NVBANDWIDTH_METRICS = {f"{name}{suffix}": ("ratio" if suffix == "_min_ratio" else
                                           "us" if name in LATENCY_RESULTS else "GB/s")
                       for name in NVBANDWIDTH_RESULTS for suffix in ("", "_sum", "_min", "_median", "_min_ratio")}

BUILT_IN = "built in"
_CORRECT = "correctness is not a threshold a platform may relax"
# NVIDIA/nccl-tests src/common.cu: main returns non-zero when errors[0] (#wrong) or the Avg bus bandwidth is
# below 0.9 x NCCL_TESTS_MIN_BW
_NCCL_EXIT = " (nccl-tests exits non-zero when a result is wrong or below NCCL_TESTS_MIN_BW)"
_RUN_RULE = "a complete run: the tool's whole output, no failure line, exit status 0, within its timeout"


def tool_timeout(check_timeout: float) -> float:
    """The tool must end, and be reported, before the pool gives up on the rank."""
    return max(0.5, min(check_timeout * 0.9, check_timeout - 10.0))


def task_params(check: CheckSpec, expect: Mapping[str, Any]) -> dict[str, Any]:
    return {**check.params, "tool_timeout": tool_timeout(check.timeout)}


def _zero_limit(check_id: str, metric: str, why: str) -> Limit:
    return Limit(check_id, metric, "==", 0.0, "count", "== 0", f"{_CORRECT}: {why}", BUILT_IN)


# -- what the rank returned -------------------------------------------------------------------------

def _result(a: Answers) -> dict[str, Any]:
    result = next((r for r in a.per_rank if r.get("binary")), None)
    if result is None:
        raise HarnessError(f"{a.check.id}: no rank of {', '.join(sorted(set(a.hosts)))} ran the tool")
    if result["outcome"] == "missing":
        raise Skip(result["reason"])
    if result["outcome"] != "ran":
        raise HarnessError(result["reason"])
    if result["truncated"]:
        raise HarnessError(f"{result['binary']} on {result['host']} printed {result['stdout_bytes']} bytes, more "
                           f"than clustercheck keeps ({len(result['stdout'].encode())}): not judged on a part")
    return result


def _ended(result: Mapping[str, Any]) -> str | None:
    """How the tool ended when that was not a clean exit; None for exit status 0."""
    rc = result["returncode"]
    if result["timed_out"]:
        return f"stopped after {result['timeout']:g} s (its timeout, 10% or 10 s below the check's)"
    if rc is not None and rc < 0:
        try:
            return f"killed by {signal.Signals(-rc).name}"
        except ValueError:
            return f"killed by signal {-rc}"
    return f"exited with status {rc}" if rc else None


def _stderr_line(result: Mapping[str, Any]) -> str:
    lines = [s.strip() for s in result["stderr_tail"].splitlines() if s.strip()]
    return f"; stderr: {lines[-1][:200]}" if lines else ""


def _parse(parse: Callable[[str], T], result: Mapping[str, Any]) -> T:
    try:
        return parse(result["stdout"])
    except NotToolOutput as exc:
        ended = _ended(result) or "exited with status 0"
        raise HarnessError(f"{result['binary']} on {result['host']} {ended} without output clustercheck can read "
                           f"({exc}){_stderr_line(result)}") from None


def _run_verdict(check_id: str, result: Mapping[str, Any], failure: str | None, summary: str,
                 exit_hint: str = "") -> Verdict:
    problems = [failure] if failure else []
    ended = _ended(result)
    if ended:
        problems.append(ended + ("" if failure else exit_hint + _stderr_line(result)))
    passed = not problems
    detail = "; ".join(problems) if problems else f"{summary}; exit status 0 in {result['seconds']:g} s"
    rule = Expectation(check_id, "run", "a complete run", BUILT_IN, _RUN_RULE)
    return Verdict("run", "complete" if passed else "failed", "", rule, passed, subject=result["binary"],
                   detail=detail)


def _judge_limits(m: Measurement, limits: Mapping[str, Limit], complete: bool) -> list[Verdict]:
    """The profile's limits. After a failed run only what it did measure is judged: the run verdict
    already fails the item, and a missing number must not turn that failure into an error."""
    return evaluate(m, {k: v for k, v in limits.items()
                        if complete or k in m.metrics or any(k in s for s in m.subjects.values())})


# -- nccl-tests ---------------------------------------------------------------------------------------

def judge_nccl_tests(a: Answers, rules: Rules) -> tuple[Measurement, list[Verdict]]:
    from clustercheck.toolout import nccl_tests

    result = _result(a)
    run: NcclTestsRun = _parse(lambda text: nccl_tests.parse(text, result["binary"]), result)
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
    m = Measurement(metrics=metrics, units=dict(NCCL_METRICS), rows=rows, worst=result["host"],
                    judged_at=largest.size if largest else None)
    check = a.check
    # the data verdicts first: a wrong result is what an exclusion list should name, not the exit status
    data = _data_verdicts(check.id, run, result["binary"], check.params["check"])
    ran = _run_verdict(check.id, result, run.failure, _nccl_summary(run, result), _NCCL_EXIT)
    profile = {k: v for k, v in rules.limits.items() if k not in ("wrong", "out_of_bounds")}
    return m, data + [ran] + _judge_limits(m, profile, ran.passed)


def _nccl_summary(run: NcclTestsRun, result: Mapping[str, Any]) -> str:
    gpus = f"-g {run.n_gpus}, " if run.n_gpus else ""
    models = f" ({', '.join(run.gpu_models)})" if run.gpu_models else ""
    version = f", NCCL {run.nccl_version}" if run.nccl_version else ""
    sizes = f"{len({r.size for r in run.rows})} sizes {run.rows[0].size}..{run.rows[-1].size} B" if run.rows else "no rows"
    return f"{gpus}{run.nranks or '?'} ranks{models}{version}; {sizes}"


def _data_verdicts(check_id: str, run: NcclTestsRun, binary: str, asked: int) -> list[Verdict]:
    """#wrong per size and placement, out-of-bounds values, and validation that was asked for but not done."""
    wrong = _zero_limit(check_id, "wrong", "every element of the result must match (nccl-tests #wrong)")
    out: list[Verdict] = []
    for row in run.rows:
        for name, p in row.placements():
            if p.wrong:
                place = name.replace("_", "-")
                out.append(Verdict("wrong", p.wrong, "count", wrong, False, wrong.margin(p.wrong),
                                   subject=f"{row.size} B {place}",
                                   detail=f"{p.wrong:g} wrong elements at size {row.size} B {place} (output line "
                                          f"{row.line})"))
    checked = [p for r in run.rows for _, p in r.placements() if p.checked]
    if not out and checked and any(p.wrong is not None for p in checked):
        out.append(of_limit("wrong", 0.0, wrong, subject=binary))
    elif asked and run.rows and not checked:
        out.append(Verdict("wrong", "N/A", "count", wrong, False, subject=binary,
                           detail=f"validation was asked for (-c {asked}) and the table says N/A: not checked"))
    if run.out_of_bounds is not None:
        oob = _zero_limit(check_id, "out_of_bounds", "nccl-tests counts results outside its tolerance")
        out.append(of_limit("out_of_bounds", float(run.out_of_bounds), oob, subject=binary))
    return out


# -- nvbandwidth -------------------------------------------------------------------------------------

def judge_nvbandwidth(a: Answers, rules: Rules) -> tuple[Measurement, list[Verdict]]:
    from clustercheck.toolout import nvbandwidth

    result = _result(a)
    run: NvbandwidthRun = _parse(nvbandwidth.parse, result)
    metrics: dict[str, float] = {}
    subjects: dict[str, dict[str, float]] = {}
    rows: list[dict[str, Any]] = []
    for case in run.testcases:
        if case.name not in NVBANDWIDTH_RESULTS:
            continue  # a matrix this version of clustercheck has no metric for: shown by the probe, not judged
        scale = 1e-3 if case.unit == "ns" else 1.0
        if case.sum is not None:
            metrics[f"{case.name}_sum"] = case.sum * scale
        values = []
        for subject, raw in _cells(case):
            value = math.nan if raw is None else raw * scale  # a cell the tool could not measure never passes
            subjects.setdefault(subject, {})[case.name] = value
            if raw is not None:
                values.append(value)
                rows.append({"subject": subject, "metric": case.name, "median": value, "min": value, "max": value})
        if values:
            mid = statistics.median(values)
            metrics.update({f"{case.name}_min": min(values), f"{case.name}_median": mid,
                            f"{case.name}_min_ratio": min(values) / mid if mid else math.nan})
    first = rows[0]["metric"] if rows else None  # the worst subject: the lowest cell of the first matrix
    worst = min((r for r in rows if r["metric"] == first), key=lambda r: r["median"], default={}).get("subject")
    m = Measurement(metrics=metrics, units=dict(NVBANDWIDTH_METRICS), rows=rows, worst=worst, subjects=subjects)
    asked = a.check.params["testcases"]
    verdict = _run_verdict(a.check.id, result, run.failure, _nvb_summary(run, asked))
    return m, [verdict] + _judge_limits(m, rules.limits, verdict.passed)


def _cells(case: Testcase) -> list[tuple[str, float | None]]:
    """(subject, value) per cell: `GPU3` for a one-row matrix (host to each GPU), `GPU0->GPU1` (the arrow as
    the title prints it) for a GPU pair, the diagonal of a GPU-pair matrix left out."""
    arrow = next((x for x in ("<->", "->", "<-") if x in (case.title or "")), "->")
    if case.peer_to_peer:
        return [(f"GPU{r}{arrow}GPU{c}", v) for r, c, v in case.cells(off_diagonal=True)]
    if len(case.rows) == 1:
        return [(f"GPU{c}", v) for _, c, v in case.cells()]
    return [(f"row{r}{arrow}GPU{c}", v) for r, c, v in case.cells()]


def _nvb_summary(run: NvbandwidthRun, asked: list[str]) -> str:
    ran = set(run.ran)
    parts = [f"{len(run.testcases)} matrices from {len(ran)} of {len(asked)} testcase(s)"]
    if run.waived:
        parts.append(f"{run.waived} waived by nvbandwidth (not supported on this node)")
    if run.version:
        parts.append(f"nvbandwidth {run.version}")
    if run.devices:
        parts.append(f"{len(run.devices)} device(s): {', '.join(sorted({d.name for d in run.devices}))}")
    return "; ".join(parts)
