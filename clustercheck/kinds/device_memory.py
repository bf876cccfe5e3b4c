"""`measure: device_memory`: a device-to-device copy within each GPU, all GPUs at once; the figure is the
memory traffic per second: 2 x the bytes copied (each byte read and written), as the HBM spec counts
(clustercheck/measure/copies.py device_memory). Ranks: clustercheck.measure.copies:device_memory."""

from __future__ import annotations

from typing import Any, Mapping

from clustercheck.kinds.base import Kind, device_need
from clustercheck.kinds.params import copy_parser
from clustercheck.kinds.subjects import per_subject

METRICS = {"bandwidth": "GB/s"}


def need(params: Mapping[str, Any], n: int, gpu: bool) -> tuple[int, int, int]:
    return device_need(2 * params["size"], params["size"], n, gpu)


PROVIDES = (Kind("device_memory", ("gpu",), METRICS, copy_parser("1GiB", 16),
                 "device-to-device copy on each GPU: memory traffic per second (2 x bytes copied: read + write, "
                 "as the HBM spec counts)", "clustercheck.measure.copies:device_memory", per_subject(METRICS),
                 gpu_only=True, memory=need),)
