"""What starting N ranks at once costs on this machine, for the 8-GPU quick gate's estimate: N processes
started together, each importing torch and making its CUDA context on GPU 0 (a rank's part of a pool's
start before NCCL; the quick gate starts two pools of 8). Prints the wall time until the last is ready
and each process's import and CUDA-context seconds.

With --fork, as the zygote starts ranks (clustercheck/run/zygote.py): this process imports torch once
(never touching CUDA) and forks the N children, each of which makes its CUDA context; the wall time is
from the first fork to the last child ready, what a pool after the first costs.

    python3 benchmarks/gpu/rank_start.py [--procs 1 8 16 32] [--fork]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

CHILD = """
import json, time
t0 = time.perf_counter()
import torch
t1 = time.perf_counter()
torch.cuda.set_device(0)
torch.zeros(1, device="cuda")
torch.cuda.synchronize()
print(json.dumps({"import_torch": t1 - t0, "cuda_context": time.perf_counter() - t1}))
"""


def start(n: int) -> None:
    t0 = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True) for _ in range(n)]
    rows = [json.loads(p.communicate()[0]) for p in procs]
    wall = time.perf_counter() - t0
    if any(p.returncode for p in procs):
        sys.exit(f"{n} processes: exit codes {[p.returncode for p in procs]}")
    imp = [r["import_torch"] for r in rows]
    ctx = [r["cuda_context"] for r in rows]
    print(f"{n:>3} at once: all ready in {wall:.2f} s; import torch median {statistics.median(imp):.2f} s "
          f"(max {max(imp):.2f}); CUDA context median {statistics.median(ctx):.2f} s (max {max(ctx):.2f})",
          flush=True)


def forked(n: int) -> None:
    import torch

    assert not torch.cuda.is_initialized()
    t0 = time.perf_counter()
    children = []
    for _ in range(n):
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:  # the child never returns into the loop
                os.close(read)
                t1 = time.perf_counter()
                torch.cuda.set_device(0)
                torch.zeros(1, device="cuda")
                torch.cuda.synchronize()
                os.write(write, json.dumps({"cuda_context": time.perf_counter() - t1}).encode())
                os._exit(0)
            except BaseException as e:  # noqa: BLE001
                print(f"child: {e!r}", file=sys.stderr, flush=True)
                os._exit(1)
        os.close(write)
        children.append((pid, read))
    rows, codes = [], []
    for pid, read in children:
        with os.fdopen(read) as fh:
            text = fh.read()
        codes.append(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
        rows.append(json.loads(text) if text else {"cuda_context": float("nan")})
    wall = time.perf_counter() - t0
    if any(codes):
        sys.exit(f"{n} forked: exit codes {codes}")
    ctx = [r["cuda_context"] for r in rows]
    print(f"{n:>3} forked: all ready in {wall:.2f} s; CUDA context median {statistics.median(ctx):.2f} s "
          f"(max {max(ctx):.2f})", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--procs", type=int, nargs="+", default=[1, 8, 16, 32])
    ap.add_argument("--fork", action="store_true", help="fork the children from this process after importing torch")
    args = ap.parse_args()
    for n in args.procs:
        (forked if args.fork else start)(n)


if __name__ == "__main__":
    main()
