"""`measure: burn`, controller side (no torch): its parameters, memory need, and judge. The ranks
run clustercheck.measure.burn:burn; each answers its sustained TFLOP/s, wrong elements and what its watch
saw. Judged per GPU (per rank on CPU): TFLOP/s relative to the best GPU of its node (gpu-fryer's
peer-relative verdict, 10% by default), wrong == 0 always, and whatever limits the profile sets on
tflops, temp_max, throttled_s and clock_drop."""

from __future__ import annotations

from typing import Any, Mapping

from clustercheck import units
from clustercheck.errors import HarnessError, NotMeasured, show
from clustercheck.judging.limits import Limit
from clustercheck.judging.measurement import Measurement, evaluate
from clustercheck.judging.verdicts import Verdict
from clustercheck.kinds.base import (BOUND_TWICE, FRACTION, Answers, Kind, Rules, device_need,
                                     every_rank_answered, wrong_limit)
from clustercheck.probes.throttle import TEMP_DOMAIN
from clustercheck.schema import Fields, between, one_of

METRICS = {"tflops": "TFLOP/s", "relative": "ratio", "wrong": "count", "temp_max": "C", "throttled_s": "s",
           "clock_drop": "ratio"}
HIGHER_IS_BETTER = ("tflops", "relative")
WATCHED = ("temp_max", "throttled_s", "clock_drop")  # what the NVML watch reads per GPU during the burn
RELATIVE_SOURCE = ("huggingface/gpu-fryer README.md: --tflops-tolerance, each GPU within 10% of the best GPU "
                   "of its node (default 10)")
DTYPES = ("auto", "float32", "fp32", "bfloat16", "bf16", "float16", "fp16", "float8_e4m3fn", "fp8")
FP8 = "float8_e4m3fn"
MAX_M = 16384  # the known-answer check is exact while m <= 16384 (measure/burn.py)


def relative_limit(check_id: str) -> Limit:
    return Limit(check_id, "relative", ">=", 0.9, "ratio", ">= 0.9", RELATIVE_SOURCE, "built in")


def burn_params(f: Fields) -> dict[str, Any]:
    dtype = f.get("dtype", str, "auto", check=one_of(*DTYPES))
    params = {"duration": f.get("duration", (int, float), 60.0, check=between(0.1, 7 * 86400)),
              "m": f.get("m", int, 0, check=lambda v: None if v == 0 or 64 <= v <= MAX_M else
                         f"must be between 64 and {MAX_M} (or 0: 8192 on GPUs, 1024 on CPUs), got {v}"),
              "dtype": FP8 if dtype == "fp8" else units.CANONICAL_DTYPE.get(dtype, dtype),
              "chunk": f.get("chunk", int, 10, check=between(1, 10_000)),
              "warmup": f.get("warmup", int, 2, check=between(0, 10_000)),
              "interval": f.get("interval", (int, float), 1.0, check=lambda v: None if v == 0 or 0.01 <= v <= 600
                                else f"must be 0 (no watch) or between 0.01 and 600 seconds, got {v}"),
              "seed": f.get("seed", int, 0, check=between(0, 2 ** 31))}
    params["duration"], params["interval"] = float(params["duration"]), float(params["interval"])
    f.done()
    if params["dtype"] == FP8 and params["m"] % 16:  # torch._scaled_mm on GPUs: both dimensions multiples of 16
        raise f.error("m", f"must be a multiple of 16 for {FP8} (torch._scaled_mm), got {params['m']}")
    return params


def fits(params: Mapping[str, Any], timeout: float) -> tuple[str, str] | None:
    """Each repetition of a burn is one task of its ranks under the check's timeout (run/pool.py, per task, as
    --repeat and --duration run it again): the operands, the known answer, `warmup` GEMMs (a count, with no
    seconds to add here), then `duration` seconds of load and the chunk that crosses it. A load as long as
    the timeout can only end as 'a rank hung', after the whole timeout."""
    if params["duration"] >= timeout:
        return "duration", f"{params['duration']:g} s of load does not fit timeout {timeout:g} s"
    return None


def memory(params: Mapping[str, Any], n: int, gpu: bool) -> tuple[int, int, int]:
    """a, b, c and the known answer in their dtype, plus the float64 operands and product that make it.
    fp8: a and b of 1 byte, c and the known answer in float32."""
    m = params["m"] or (8192 if gpu else 1024)
    dtype = params.get("dtype", "auto")
    if dtype == FP8:
        return device_need(m * m * (2 * 1 + 2 * 4 + 24), m * m, n, gpu)
    elt = units.DTYPE_BYTES[dtype] if dtype != "auto" else (2 if gpu else 4)
    return device_need(m * m * (4 * elt + 24), m * m * elt, n, gpu)


def checked(a: Answers) -> list[dict[str, Any]]:
    """Every rank's answer, each a number of TFLOP/s (sustained, slowest and fastest chunk, each within
    units.device_tflops_problem's domain) and of wrong elements for a GPU of its own; else a HarnessError
    naming the rank, its node and GPU. A rank without `tflops` was dropped, and a GPU answered
    twice kept the last answer: a GPU with wrong elements behind a clean one, and the run passed."""
    every_rank_answered(a, f"burn {a.check.id}")
    owner: dict[str, str] = {}  # subject -> the rank that answered it
    for i, (r, rank) in enumerate(zip(a.per_rank, a.ranks)):
        who = f"rank {rank.get('rank', i)} on {rank.get('host', '?')}"
        if not isinstance(r, dict) or not isinstance(r.get("subject"), str) or not isinstance(r.get("host"), str):
            raise HarnessError(f"burn {a.check.id}: {who} answered no GPU and node ({show(r, 60)}): not judged")
        for key in ("tflops", "wrong"):
            if not units.is_number(r.get(key)):
                raise HarnessError(f"burn {a.check.id}: {who} answered no number of {key} for {r['host']} "
                                   f"{r['subject']} ({show(r.get(key), 40)}): not judged")
        for key in ("gemms", "checked"):  # a burn that ran no GEMM, or compared none with the known answer, says
            n = r.get(key)                 # nothing of the GPU: its wrong == 0 and TFLOP/s read as a pass
            if not units.is_count(n) or n < 0:
                raise HarnessError(f"burn {a.check.id}: {who} answered no count of {key} for {r['host']} "
                                   f"{r['subject']} ({show(n, 40)}): not judged")
            if n == 0:
                did = "ran no GEMM" if key == "gemms" else "compared no result with the known answer"
                raise NotMeasured(f"burn {a.check.id}: not judged: {who} {did} on {r['host']} {r['subject']} "
                                  f"({key} 0)")
        for key in ("tflops", "tflops_min", "tflops_max"):  # the rows carry all three: none out of its domain
            why = units.device_tflops_problem(r.get(key))
            if why:  # after the counts: a rank that ran no GEMM stays `not judged`, as it says
                raise HarnessError(f"burn {a.check.id}: {who} answered {key} for {r['host']} {r['subject']} out "
                                   f"of its domain ({why}): not judged")
        if r["subject"] in owner:  # one node's item: the same GPU twice is two ranks on one device
            raise HarnessError(f"burn {a.check.id}: {r['host']} {r['subject']} answered by {owner[r['subject']]} "
                               f"and by {who}: {BOUND_TWICE}; neither is judged")
        owner[r["subject"]] = who
    return list(a.per_rank)


def judge_burn(a: Answers, rules: Rules) -> tuple[Measurement, list[Verdict]]:
    answers = checked(a)
    problems = [f"{r['host']} {r['subject']}: {r['watch_error'] or '; '.join(r['watch']['errors'])}"
                for r in answers if r["watch_error"] or (r["watch"] and r["watch"]["error_count"])]
    if problems:  # an unwatched burn cannot say the GPU held its clocks: never a pass
        raise HarnessError(f"burn {a.check.id}: the watch failed on {len(problems)} rank(s): {problems[0]}")
    limited = [k for k in WATCHED if k in rules.limits]
    unread = [f"{r['host']} {r['subject']}: no {', '.join(k for k in limited if (r['watch'] or {}).get(k) is None)}"
              for r in answers if any((r["watch"] or {}).get(k) is None for k in limited)]
    if unread:  # a GPU the watch never read would otherwise be left out of those limits' verdicts, unjudged
        raise NotMeasured(f"burn {a.check.id}: not judged: the watch read nothing for a limited metric on "
                           f"{len(unread)} GPU(s): {'; '.join(unread[:4])}")
    best: dict[str, float] = {}
    for r in answers:
        best[r["host"]] = max(best.get(r["host"], 0.0), r["tflops"])
    subjects: dict[str, dict[str, float]] = {}
    rows = []
    for r in answers:
        seen = r["watch"] or {}
        values = {"tflops": r["tflops"], "relative": r["tflops"] / best[r["host"]] if best[r["host"]] else 0.0,
                  "wrong": float(r["wrong"])}
        values.update({k: float(seen[k]) for k in WATCHED if seen.get(k) is not None})
        subjects[r["subject"]] = values
        rows.append({"subject": r["subject"], "metric": "tflops", "median": r["tflops"], "min": r["tflops_min"],
                     "max": r["tflops_max"], "bus_id": r["bus_id"], "host": r["host"], "dtype": r["dtype"],
                     "m": r["m"], "gemms": r["gemms"], "checked": r["checked"], "seconds": r["seconds"],
                     "watch": seen, "wrong": r["wrong"]})
    metrics = {k: (min if k in HIGHER_IS_BETTER else max)(v[k] for v in subjects.values() if k in v)
               for k in METRICS if any(k in v for v in subjects.values())}
    worst = min(subjects, key=lambda s: subjects[s]["relative"]) if subjects else None
    m = Measurement(metrics=metrics, units=dict(METRICS), rows=rows, worst=worst, subjects=subjects)
    limits = {"relative": relative_limit(a.check.id), **{k: v for k, v in rules.limits.items() if k != "wrong"},
              "wrong": wrong_limit(a.check.id)}
    return m, evaluate(m, limits)


PROVIDES = (Kind("burn", ("node",), METRICS, burn_params,
              "GEMM on every GPU of the node at once for `duration` seconds, watched (temperature, clocks, power, "
              "throttle reasons) and checked against a known answer; each GPU judged against the best of its node",
              "clustercheck.measure.burn:burn", judge_burn, memory=memory,
                 # a temp_max below absolute zero or at 200 C is a broken reading, never a cool or a hot GPU
                 # (probes/throttle.py): -300 C passed `<= 84`
                 domains={"relative": FRACTION, "clock_drop": FRACTION, "temp_max": TEMP_DOMAIN}, fits=fits),)
