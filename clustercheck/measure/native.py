"""Rank side of `measure: nccl_tests` and `measure: nvbandwidth`: each node's first rank runs the tool
once for the whole node and hands its output, unparsed, to the controller (which judges it with the
readers in clustercheck/toolout/). The other ranks of the node only wait.

The tool is started from an argument list (never a shell), found on this rank's PATH, in its own
process group so that a timeout ends it and anything it started. Its output is kept up to a bound so a
runaway tool cannot fill the rank's memory or the store: the head of stdout (the tables come first and
a cut is reported, never read as a complete run) and the tail of stderr (where a crash says why).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from typing import IO, Any

from clustercheck.measure import RankContext

STDOUT_LIMIT = 4 << 20   # bytes; an 8-GPU all-tests nvbandwidth run prints ~50 KiB, nccl-tests with INFO ~1 MiB
STDERR_TAIL = 16 << 10
# NCCL logging clustercheck switched on for its own ranks (measure/nccl_log.py) must not leak into the
# tool: its INFO lines would land in the rank's own log file.
_OURS = ("NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE")


def nccl_tests(ctx: RankContext, params: dict[str, Any]) -> dict[str, Any]:
    if ctx.local_rank != 0:
        return {}
    from clustercheck.kinds.nccl_tests import argv as nccl_tests_argv

    gpus = params["gpus"] or _gpus_here(ctx)
    return run_tool(ctx, nccl_tests_argv(params, gpus), params["tool_timeout"])


def nvbandwidth(ctx: RankContext, params: dict[str, Any]) -> dict[str, Any]:
    if ctx.local_rank != 0:
        return {}
    from clustercheck.kinds.nvbandwidth import argv as nvbandwidth_argv

    return run_tool(ctx, nvbandwidth_argv(params), params["tool_timeout"])


def _gpus_here(ctx: RankContext) -> int:
    if ctx.device.type != "cuda":
        return 1
    import torch

    return max(1, torch.cuda.device_count())


def tool_env(ctx: RankContext) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CC_")}
    if ctx.nccl_log is not None and getattr(ctx.nccl_log, "path", None) is not None:
        for key in _OURS:
            env.pop(key, None)
    return env


def run_tool(ctx: RankContext, argv: list[str], timeout: float) -> dict[str, Any]:
    """Run argv[0] from PATH: what it printed, its exit status, whether it was cut or timed out."""
    base = {"host": ctx.host, "binary": argv[0], "argv": argv}
    env = tool_env(ctx)
    path = shutil.which(argv[0], path=env.get("PATH", os.defpath))
    if path is None:
        return {**base, "outcome": "missing", "reason": f"{argv[0]} not found on PATH on {ctx.host}"}
    t0 = time.monotonic()
    try:
        proc = subprocess.Popen([path, *argv[1:]], env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True)
    except OSError as exc:  # found but not runnable: permissions, a foreign binary, a broken interpreter line
        return {**base, "outcome": "unrunnable", "reason": f"{path} on {ctx.host} cannot be started: {exc}"}
    assert proc.stdout is not None and proc.stderr is not None
    out, err = _Reader(proc.stdout, STDOUT_LIMIT, keep="head"), _Reader(proc.stderr, STDERR_TAIL, keep="tail")
    timed_out = False
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        _kill_group(proc)
    out.join()
    err.join()
    # the host's own name too: nccl-tests names its ranks' hosts by gethostname(), which a hosts file's
    # name for the node (an alias, an address) need not be
    return {**base, "outcome": "ran", "hostname": socket.gethostname(), "path": path, "returncode": proc.returncode,
            "timed_out": timed_out, "timeout": timeout, "seconds": round(time.monotonic() - t0, 3), "stdout": out.text(),
            "stdout_bytes": out.total, "truncated": out.total > STDOUT_LIMIT, "stderr_tail": err.text()}


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """End the tool and whatever it started (its own session: the rank is not in that group)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


class _Reader:
    """Drains one pipe on a thread (so the tool never blocks on a full pipe) keeping at most `limit`
    bytes: the first ones, or the last ones."""

    def __init__(self, pipe: IO[bytes], limit: int, keep: str) -> None:
        self.pipe, self.limit, self.keep = pipe, limit, keep
        self.data = bytearray()
        self.total = 0
        self.thread = threading.Thread(target=self._drain, daemon=True)
        self.thread.start()

    def _drain(self) -> None:
        while chunk := os.read(self.pipe.fileno(), 65536):
            self.total += len(chunk)
            if self.keep == "head":
                self.data += chunk[:max(0, self.limit - len(self.data))]
            else:
                self.data += chunk
                del self.data[:max(0, len(self.data) - self.limit)]
        self.pipe.close()

    def join(self) -> None:
        # a grandchild that outlived the group kill could hold the pipe open: do not wait for it forever
        self.thread.join(timeout=10)

    def text(self) -> str:
        return bytes(self.data).decode("utf-8", errors="replace")
