"""`measure: gemm`: an m x m matrix multiply on each rank's device, TFLOP/s counted as 2m^3 per multiply
(bf16 on GPUs, float32 on CPUs by default). Ranks: clustercheck.measure.copies:gemm."""

from __future__ import annotations

from typing import Any, Mapping

from clustercheck import units
from clustercheck.errors import HarnessError
from clustercheck.judging.measurement import Measurement, evaluate
from clustercheck.judging.verdicts import Verdict
from clustercheck.kinds.base import Answers, Kind, Rules, device_need
from clustercheck.kinds.subjects import checked, reduce_subjects
from clustercheck.schema import Fields, between, one_of

METRICS = {"tflops": "TFLOP/s"}


def parse(f: Fields) -> dict[str, Any]:
    params = {"m": f.get("m", int, 8192, check=between(16, 65_536)),
              "dtype": f.get("dtype", str, "auto", check=one_of("auto", *units.DTYPE_BYTES)),
              "loops": f.get("loops", int, 20, check=between(1, 100_000)),
              "samples": f.get("samples", int, 3, check=between(1, 1_000))}
    params["dtype"] = units.CANONICAL_DTYPE.get(params["dtype"], params["dtype"])
    f.done()
    return params


def need(params: Mapping[str, Any], n: int, gpu: bool) -> tuple[int, int, int]:
    dtype = params.get("dtype", "auto")  # a, b and c in their own dtype; auto is bf16 on GPUs, fp32 on CPUs
    size = params["m"] ** 2 * (units.DTYPE_BYTES[dtype] if dtype != "auto" else (2 if gpu else 4))
    return device_need(3 * size, size, n, gpu)


def judge(a: Answers, rules: Rules) -> tuple[Measurement, list[Verdict]]:
    """The per-subject judge (subjects.checked: every rank answered its own GPU in full), with every TFLOP/s a
    rank answered (median, min, max) inside units.device_tflops_problem's domain, as for burn: 1e308 from a
    timer that read ~0 s passed any floor."""
    checked(a, METRICS)
    for i, (answer, rank) in enumerate(zip(a.per_rank, a.ranks)):
        for subject, values in answer["subjects"].items():
            spread = values["tflops"]   # median always (checked); min and max where kept (an older record's
            for stat in ("median", "min", "max"):   # rows may lack them: record/rebuild.py)
                if stat != "median" and stat not in spread:
                    continue
                why = units.device_tflops_problem(spread[stat])
                if why:
                    raise HarnessError(f"gemm {a.check.id}: rank {rank.get('rank', i)} on {rank.get('host', '?')} "
                                       f"answered tflops {stat} for {subject} out of its domain ({why}): not judged")
    m = reduce_subjects(a.per_rank, METRICS)
    return m, evaluate(m, dict(rules.limits))


PROVIDES = (Kind("gemm", ("gpu", "node"), METRICS, parse,
                 "square matrix multiply throughput per device (bf16 on GPUs, fp32 on CPUs by default)",
                 "clustercheck.measure.copies:gemm", judge, memory=need),)
