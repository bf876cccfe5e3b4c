"""What starting N ranks at once costs on this machine, for the 8-GPU quick gate's estimate: N processes
started together, each importing torch and making its CUDA context on GPU 0 (a rank's part of a pool's
start before NCCL; the quick gate starts two pools of 8). Prints the wall time until the last is ready
and each process's import and CUDA-context seconds.

    python3 benchmarks/gpu/rank_start.py [--procs 1 8 16 32]
"""

from __future__ import annotations

import argparse
import json
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--procs", type=int, nargs="+", default=[1, 8, 16, 32])
    for n in ap.parse_args().procs:
        start(n)


if __name__ == "__main__":
    main()
