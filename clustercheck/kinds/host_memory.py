"""`measure: host_memory`: a host memory copy, one rank at a time (bytes copied per second), on GPU and CPU
nodes alike. Ranks: clustercheck.measure.copies:host_memory."""

from __future__ import annotations

from typing import Any, Mapping

from clustercheck.kinds.base import Kind
from clustercheck.kinds.params import copy_parser
from clustercheck.kinds.subjects import per_subject

METRICS = {"bandwidth": "GB/s"}


def need(params: Mapping[str, Any], n: int, gpu: bool) -> tuple[int, int, int]:
    size = params["size"]  # src and dst on the host, allocated by every rank at once
    return 2 * size, 2 * size * n, size


PROVIDES = (Kind("host_memory", ("node",), METRICS, copy_parser("256MiB", 8),
                 "host memory copy bandwidth, one rank at a time (bytes copied per second)",
                 "clustercheck.measure.copies:host_memory", per_subject(METRICS), memory=need),)
