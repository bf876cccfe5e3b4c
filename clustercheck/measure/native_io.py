"""Rank side of `measure: ib_write_bw` and `measure: gdsio`: each node's first rank runs the tool for the
whole node and hands the output, unparsed, to the controller (the kinds judge it with the readers in
clustercheck/toolout/). Tools run from an argument list, never a shell, found on this rank's PATH, in
their own process group, with bounded output (clustercheck/measure/native.py).

- ib_write_bw: one loopback run per RDMA port that is ACTIVE/LinkUp (or per port of the devices the check
  names): a server on the device's port (-i), then a client to localhost on the same port, as Azure's node
  health checks run it (customTests/azure_ib_write_bw_gdr.nhc). Each gets its own TCP port.
- gdsio: per GPU, a GPUDirect (-x 0) write then read of files gdsio makes in the directory the operator
  names in $CLUSTERCHECK_GDS_DIR (a suite names no path: docs/security.md).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from typing import Any

from clustercheck.measure import RankContext
from clustercheck.measure.native import _Reader, _kill_group, run_tool, tool_env

GDS_DIR = "CLUSTERCHECK_GDS_DIR"
_BASE_PORT = 18515  # perftest's default port, one more per device


def ib_write_bw(ctx: RankContext, params: dict[str, Any]) -> dict[str, Any]:
    if ctx.local_rank != 0:
        return {}
    from clustercheck.fabric import rdma
    from clustercheck.kinds.ib_write_bw import argv, named_in, rdma_problems

    base = {"host": ctx.host, "binary": "ib_write_bw"}
    env = tool_env(ctx)
    if shutil.which("ib_write_bw", path=env.get("PATH", os.defpath)) is None:
        return {**base, "outcome": "missing", "reason": f"ib_write_bw (perftest) not found on PATH on {ctx.host}"}
    net = rdma.read()
    named = params.get("devices") or []  # a device (mlx5_0) or one port of it (mlx5_0/1)
    ports = [p for p in net.ports if (named_in(p.device, p.port, named) if named else p.up)]
    # a device the check or fabric_ports names that is not here is the judge's to fail, never left out
    absent = [n for n in named if not any(named_in(p.device, p.port, [n]) for p in net.ports)]
    # a node with an RDMA device whose facts name a problem (a device listing no port, a state file that cannot
    # be read) is no node without RDMA: the judge fails or leaves it not judged, naming the device
    if not ports and not named and not rdma_problems(net.findings):
        return {**base, "outcome": "missing", "reason": f"no RDMA port is ACTIVE/LinkUp on {ctx.host} "
                                                       f"({len(net.ports)} port(s) in sysfs)"}
    runs = []
    for i, port in enumerate(ports):
        args = argv(params, port.device, _BASE_PORT + i, port.port)
        server = _start(args, env)
        time.sleep(0.5)  # the server listens before the client connects
        client = run_tool(ctx, [*args, "localhost"], params["tool_timeout"] / max(1, len(ports)))
        runs.append({"device": port.device, "port": port.port, "rate_gbps": port.rate_gbps, "up": port.up,
                     "device_ports": sum(p.device == port.device for p in net.ports),
                     "client": client, "server": _finish(server, 10.0)})
    # each problem with what rdma.py found it to be (Problem.as_dict): the judge never re-reads its words
    return {**base, "outcome": "ran", "runs": runs, "problems": [p.as_dict() for p in net.findings],
            "peers": rdma.peers(net.ports), "absent": absent}


def gdsio(ctx: RankContext, params: dict[str, Any]) -> dict[str, Any]:
    if ctx.local_rank != 0:
        return {}
    from clustercheck.kinds.gdsio import argv

    base = {"host": ctx.host, "binary": "gdsio"}
    directory = os.environ.get(GDS_DIR, "")
    if not directory:
        return {**base, "outcome": "missing", "reason": f"${GDS_DIR} is not set on {ctx.host}: name the directory on "
                                                       f"the storage to test (gdsio writes its files there)"}
    if not os.path.isdir(directory):
        return {**base, "outcome": "unrunnable", "reason": f"${GDS_DIR}={directory} is not a directory on {ctx.host}"}
    gpus = params["gpus"] or _gpus(ctx)
    runs = []
    budget = params["tool_timeout"] / max(1, gpus * len(params["io"]))
    for gpu in range(gpus):
        for io in params["io"]:  # write first: gdsio reads the files its write made
            result = run_tool(ctx, argv(params, directory, gpu, io), budget)
            runs.append({"gpu": gpu, "io": io, **result})
            if result["outcome"] == "missing":
                return {**base, **result}
    # the count it ran for: the judge fails a GPU of it without a run (the highest GPU seen would hide the last)
    return {**base, "outcome": "ran", "runs": runs, "gpus": gpus}


def _gpus(ctx: RankContext) -> int:
    if ctx.device.type != "cuda":
        return 0
    import torch

    return int(torch.cuda.device_count())


def _start(argv: list[str], env: dict[str, str]) -> tuple[subprocess.Popen[bytes], _Reader, _Reader] | str:
    try:
        proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True)
    except OSError as exc:
        return f"the server could not be started: {exc}"
    assert proc.stdout is not None and proc.stderr is not None
    return proc, _Reader(proc.stdout, 1 << 20, keep="head"), _Reader(proc.stderr, 16 << 10, keep="tail")


def _finish(server: tuple[subprocess.Popen[bytes], _Reader, _Reader] | str, timeout: float) -> dict[str, Any]:
    if isinstance(server, str):
        return {"outcome": "unrunnable", "reason": server}
    proc, out, err = server
    timed_out = False
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        timed_out = True  # the judge says it outlived its client, not only "killed by SIGKILL"
    out.join()
    err.join()
    return {"outcome": "ran", "returncode": proc.returncode, "timed_out": timed_out, "timeout": timeout,
            "stdout": out.text(), "stderr_tail": err.text()}
