"""What `measure: nccl_tests` and `measure: nvbandwidth` accept in a suite's `params:`, and the argument
lists the ranks run. Controller side, no torch.

A suite chooses which of a fixed list of tool names runs and with which validated flags; it never
chooses a file. The program is looked up on the PATH of the environment clustercheck runs in (a suite's
`env:` cannot set PATH: docs/security.md), so where the tools live is the operator's business. An
absolute `binary:` path is refused for the same reason a suite cannot set LD_PRELOAD: it would let a
shared suite file pick a program for every node to run.
"""

from __future__ import annotations

import re
from typing import Any

from clustercheck import params as p
from clustercheck import units
from clustercheck.errors import show
from clustercheck.schema import Fields, between, one_of
from clustercheck.toolout.nccl_run import NCCL_TESTS_COLLECTIVES

# `_mpi` when nccl-tests was built with NAME_SUFFIX=_mpi
_NCCL_BINARY = re.compile(rf"(?:{'|'.join(NCCL_TESTS_COLLECTIVES)})_perf(?:_mpi)?")
# -d and -o as nccl-tests names them (src/common.cu test_typenames, test_opnames); "all" is left out: it
# prints one table per type or op, and a check judges one run.
NCCL_DATATYPES = ("int8", "uint8", "int32", "uint32", "int64", "uint64", "half", "float", "double", "bfloat16",
                  "f8e4m3", "f8e5m2")
NCCL_OPS = ("sum", "prod", "max", "min", "avg", "mulsum")

# Every testcase nvbandwidth v0.8 runs on one node (NVIDIA/nvbandwidth testcase.h, createTestcases() in
# nvbandwidth.cpp); the multinode_* ones need an MPI launch across nodes, which this kind does not do.
NVBANDWIDTH_TESTCASES = tuple(
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


NVBANDWIDTH_RESULTS = tuple(name for t in NVBANDWIDTH_TESTCASES for name in _matrices(t))
LATENCY_RESULTS = ("host_device_latency_sm", "device_to_device_latency_sm")  # in ns; the rest in GB/s
NVBANDWIDTH_DEFAULT = ("host_to_device_memcpy_ce", "device_to_host_memcpy_ce", "device_to_device_memcpy_read_ce")


def _binary(f: Fields, default: str, allowed: re.Pattern[str], what: str) -> str:
    name = f.get("binary", str, default)
    if "/" in name:
        raise f.error("binary", f"{show(name)} is a path; give the program's name ({what}) and put it on the "
                                f"PATH clustercheck runs with: a suite does not choose files to run")
    if not allowed.fullmatch(name):
        raise f.error("binary", f"{show(name)} is not {what}")
    return name


def nccl_tests_params(f: Fields) -> dict[str, Any]:
    binary = _binary(f, "all_reduce_perf", _NCCL_BINARY,
                     f"an nccl-tests binary (<collective>_perf, collective one of {', '.join(NCCL_TESTS_COLLECTIVES)})")
    lo = p._size(f, "min_bytes", "8")
    hi = p._size(f, "max_bytes", "128MiB")
    for key, size in (("min_bytes", lo), ("max_bytes", hi)):
        if size > p.MAX_SIZE:
            raise f.error(key, f"{units.format_size(size)} is above the {units.format_size(p.MAX_SIZE)} limit")
    if hi < lo:
        raise f.error("max_bytes", f"must be >= min_bytes ({lo}), got {hi}")
    params = {
        "binary": binary, "min_bytes": lo, "max_bytes": hi,
        "step_factor": f.get("step_factor", int, 2, check=between(2, 1024)),
        "iters": f.get("iters", int, 20, check=between(1, 100_000)),
        "warmup": f.get("warmup", int, 5, check=between(0, 10_000)),
        "gpus": f.get("gpus", int, None, check=between(1, 64)),  # None: every GPU of the node, 1 without GPUs
        "check": f.get("check", int, 1, check=between(0, 1000)),
        "datatype": f.get("datatype", str, "float", check=one_of(*NCCL_DATATYPES)),
        "op": f.get("op", str, "sum", check=one_of(*NCCL_OPS)),
        "cudagraph": f.get("cudagraph", int, 0, check=between(0, 1000)),
        "blocking": f.get("blocking", int, 0, check=between(0, 1)),
    }
    f.done()
    return params


def nvbandwidth_params(f: Fields) -> dict[str, Any]:
    binary = _binary(f, "nvbandwidth", re.compile("nvbandwidth"), "nvbandwidth")
    cases = f.get("testcases", list, list(NVBANDWIDTH_DEFAULT))
    if not cases:
        raise f.error("testcases", "needs at least one testcase")
    for case in cases:
        if case not in NVBANDWIDTH_TESTCASES:
            near = [t for t in NVBANDWIDTH_TESTCASES if isinstance(case, str) and case and case in t][:3]
            hint = f"; did you mean {', '.join(near)}?" if near else " (nvbandwidth --list names them)"
            raise f.error("testcases", f"{show(case)} is not an nvbandwidth testcase{hint}")
    if len(set(cases)) != len(cases):
        raise f.error("testcases", "lists a testcase twice")
    buffer = p._size(f, "buffer_size", "512MiB")  # nvbandwidth's default -b is 512 MiB
    if buffer % (1 << 20) or buffer > p.MAX_SIZE:
        raise f.error("buffer_size", f"nvbandwidth takes whole MiB up to {units.format_size(p.MAX_SIZE)}, "
                                     f"got {units.format_size(buffer)}")
    params = {"binary": binary, "testcases": list(cases), "buffer_size": buffer,
              "samples": f.get("samples", int, 3, check=between(1, 1000))}
    f.done()
    return params


def nccl_tests_argv(params: dict[str, Any], gpus: int) -> list[str]:
    """The flags of one single-node run (NVIDIA/nccl-tests README: -b -e -f -g; src/common.cu longopts)."""
    argv = [params["binary"], "-b", str(params["min_bytes"]), "-e", str(params["max_bytes"]),
            "-f", str(params["step_factor"]), "-g", str(gpus), "-n", str(params["iters"]),
            "-w", str(params["warmup"]), "-c", str(params["check"]), "-d", params["datatype"],
            "-o", params["op"]]
    # -G and -z only when asked for: builds older than the flag stop at an option they do not know
    return argv + (["-G", str(params["cudagraph"])] if params["cudagraph"] else []) \
        + (["-z", "1"] if params["blocking"] else [])


def nvbandwidth_argv(params: dict[str, Any]) -> list[str]:
    """nvbandwidth's options (nvbandwidth.cpp: -t testcases, -b buffer size in MiB, -i test samples)."""
    return [params["binary"], "-t", *params["testcases"], "-b", str(params["buffer_size"] >> 20),
            "-i", str(params["samples"])]

