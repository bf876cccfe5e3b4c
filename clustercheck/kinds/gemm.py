"""`measure: gemm`: an m x m matrix multiply on each rank's device, TFLOP/s counted as 2m^3 per multiply
(bf16 on GPUs, float32 on CPUs by default). Ranks: clustercheck.measure.copies:gemm."""

from __future__ import annotations

from typing import Any, Mapping

from clustercheck import units
from clustercheck.kinds.base import Kind, device_need
from clustercheck.kinds.subjects import per_subject
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


PROVIDES = (Kind("gemm", ("gpu", "node"), METRICS, parse,
                 "square matrix multiply throughput per device (bf16 on GPUs, fp32 on CPUs by default)",
                 "clustercheck.measure.copies:gemm", per_subject(METRICS), memory=need),)
