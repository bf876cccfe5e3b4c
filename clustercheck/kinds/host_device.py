"""`measure: host_device`: host->device then device->host copy bandwidth of each GPU, one GPU at a time,
between device memory and a pinned host buffer allocated on the CPUs NVML names for the GPU
(nvbandwidth's host_to_device and device_to_host memcpy). Ranks: clustercheck.measure.copies:host_device."""

from __future__ import annotations

from typing import Any, Mapping

from clustercheck.kinds.base import Kind
from clustercheck.kinds.params import copy_parser
from clustercheck.kinds.subjects import per_subject

METRICS = {"h2d": "GB/s", "d2h": "GB/s"}


def need(params: Mapping[str, Any], n: int, gpu: bool) -> tuple[int, int, int]:
    size = params["size"]  # the device buffer, and its pinned twin on the host
    return size, size * n, size


PROVIDES = (Kind("host_device", ("gpu",), METRICS, copy_parser("256MiB", 16),
                 "host->device and device->host copy bandwidth per GPU, pinned memory on its NUMA node",
                 "clustercheck.measure.copies:host_device", per_subject(METRICS), gpu_only=True, memory=need),)
