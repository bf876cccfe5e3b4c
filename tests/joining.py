"""What the node-agent tests share: a controller (`clustercheck run --launcher join`) and agents
(`clustercheck agent`) started as plain processes with the Indexed Job environment, a suite and a
profile small enough for two cores, and readers of what a run left behind."""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence

SUITE = """checks:
  - id: cluster-ar
    measure: all_reduce
    scope: cluster
    params: {sizes: [64KiB], iters: 2, warmup: 1, check_iters: 1}
  - id: node-ar
    measure: all_reduce
    scope: node
    params: {sizes: [64KiB], iters: 2, warmup: 1, check_iters: 1}
  - id: node-late
    measure: all_reduce
    scope: node
    params: {sizes: [64KiB], iters: 2, warmup: 1, check_iters: 1}
"""
# floors any working loopback or veth meets: these tests judge the harness, not the CPU. The cluster check
# is named under checks: because a multi-node collective is never judged by the one-node defaults: (without
# it the fabric floor would apply, and a pod has no RDMA port to give it a line rate: not judged)
LIMITS = """platform: cpu
detect: {gpu_count: 0}
defaults:
  all_reduce:
    busbw: {limit: '>= 0.000001', unit: GB/s, source: any working link}
checks:
  cluster-ar:
    busbw: {limit: '>= 0.000001', unit: GB/s, source: any working link between the pods}
"""


def all_reduce_suite(*checks: str) -> str:
    """A suite of small all_reduce checks (64 KiB, 2 iterations), each `ID:SCOPE`, `ID:SCOPE:min_nodes=N` or
    `ID:SCOPE:env=NAME=VALUE`: the multi-node tests' suites differ only in which checks and scopes."""
    out = ["checks:"]
    for spec in checks:
        name, scope, *extra = spec.split(":")
        out += [f"  - id: {name}", "    measure: all_reduce", f"    scope: {scope}"]
        for e in extra:
            key, _, value = e.partition("=")
            out.append(f"    min_nodes: {value}" if key == "min_nodes" else
                       f"    env: {{{value.split('=')[0]}: \"{value.split('=', 1)[1]}\"}}")
        out.append("    params: {sizes: [64KiB], iters: 2, warmup: 1, check_iters: 1}")
    return "\n".join(out) + "\n"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def token() -> str:
    return secrets.token_hex(32)


def base_env(secret: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("CLUSTERCHECK_", "CC_")) and k not in ("JOB_COMPLETION_INDEX", "NODE_NAME")}
    return {**env, "CLUSTERCHECK_TOKEN": secret}


def project(tmp: Path) -> Path:
    (tmp / "th").mkdir(exist_ok=True)
    (tmp / "th" / "cpu.yaml").write_text(LIMITS)
    (tmp / "s.yaml").write_text(SUITE)
    return tmp


def controller(tmp: Path, secret: str, args: Sequence[str], env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "clustercheck", "run", *args, "--out", "out"], cwd=tmp,
                            env={**base_env(secret), **(env or {})}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)


def agent(tmp: Path, secret: str, index: int | None, node: str | None, controller_addr: str, *args: str,
          prefix: Sequence[str] = (), env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    e = base_env(secret)
    e["CLUSTERCHECK_CONTROLLER"] = controller_addr
    e["TMPDIR"] = str(tmp)  # where the agent keeps its ranks' files when it cannot say goodbye
    if index is not None:
        e["JOB_COMPLETION_INDEX"] = str(index)
    if node is not None:
        e["NODE_NAME"] = node
    e.update(env or {})
    with (tmp / f"agent{index}.log").open("wb") as log:
        return subprocess.Popen([*prefix, sys.executable, "-m", "clustercheck", "agent", *args], cwd=tmp, env=e,
                                stdout=log, stderr=subprocess.STDOUT)


def await_warm(tmp: Path, agents: Sequence[subprocess.Popen[bytes]], timeout: float = 120) -> None:
    """Until every agent (started with TMPDIR=`tmp`) has warmed up: its work directory holds its zygote's log,
    made once it has imported torch and forked the zygote, which it does before it tries the controller. An
    agent started before its controller then joins within a second of the controller's waiting."""
    end = time.monotonic() + timeout
    while len(list(tmp.glob("*/zygote.log"))) < len(agents) and time.monotonic() < end:
        if any(a.poll() is not None for a in agents):
            break
        time.sleep(0.05)
    said = {f"agent{i}": (tmp / f"agent{i}.log").read_text(errors="replace")[-2000:] for i in range(len(agents))}
    assert len(list(tmp.glob("*/zygote.log"))) == len(agents), said


def finish(ctl: subprocess.Popen[str], agents: Sequence[subprocess.Popen[bytes]], timeout: float = 300) -> str:
    """The controller's output once it ended; every agent ended too (killed after 30 s if it did not)."""
    try:
        out, _ = ctl.communicate(timeout=timeout)
    finally:
        if ctl.poll() is None:
            ctl.kill()
            ctl.wait()
        for a in agents:
            try:
                a.wait(30)
            except subprocess.TimeoutExpired:
                a.kill()
                a.wait()
    return out


def results(tmp: Path) -> dict[str, Any]:
    return json.loads((tmp / "out" / "latest" / "results.json").read_text())


def wait_for(path: Path, text: str, timeout: float = 120) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if path.is_file() and text in path.read_text(errors="replace"):
            return
        time.sleep(0.1)
    raise AssertionError(f"{text!r} never appeared in {path}")


def parent(pid: int) -> int:
    """The parent's pid of a live process."""
    return int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[1])


def alive(pid: int) -> bool:
    """Running, not a zombie. A process can be reaped between the signal and the read (CI saw it once)."""
    try:
        os.kill(pid, 0)
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except (ProcessLookupError, FileNotFoundError):
        return False


def kill_mid_run(ctl: subprocess.Popen[str], record: Path, pid: Callable[[], int], after: str = '"type": "result"') -> str:
    """SIGKILL the process `pid()` finds once `after` is in the run record, then the controller's output
    (the controller killed too, should it still run after 300 s)."""
    try:
        wait_for(record, after, 180)
        os.kill(pid(), signal.SIGKILL)
        out, _ = ctl.communicate(timeout=300)
    finally:
        ctl.kill()
    return out
