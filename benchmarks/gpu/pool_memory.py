"""GPU validation: GPU memory the pools hold across a quick-gate all_reduce sweep (16 MiB to 8 GiB).

    python benchmarks/gpu/pool_memory.py

Starts the pools one quick-gate check set makes on one GPU: the timed pool and its NCCL_ALGO=Ring twin,
each with its untimed tuning sibling; runs the sweep in each, then reads every process's GPU memory
from NVML (what nvidia-smi --query-compute-apps shows), the pools still alive and idle between checks."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

from clustercheck.run.pool import PoolKey
from clustercheck.run.pools import PoolManager

MiB, GiB = 1 << 20, 1 << 30
SWEEP = {"sizes": [16 * MiB, 256 * MiB, GiB, 4 * GiB, 8 * GiB], "dtype": "float32", "warmup": 5, "iters": 20,
         "check_iters": 1, "judge_at": 8 * GiB, "placements": ["in"], "per_iteration": False}


def apps() -> str:
    return subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv"],
                          capture_output=True, text=True, check=False).stdout


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        pools = PoolManager(Path(tmp))
        try:
            for env in ((), (("NCCL_ALGO", "Ring"),)):
                timed = pools.get(PoolKey("nccl", 1, env=env, nccl_log="init"))
                tuning = pools.get(PoolKey("nccl", 1, env=env, nccl_log="tuning"))
                timed.run("all_reduce", SWEEP, 600)
                tuning.run("all_reduce", {**SWEEP, "tuning_pass": True}, 600)
                after = [p.run("ping", {}, 60)[0] for p in (timed, tuning)]
                print(json.dumps({"env": dict(env), "after_sweep": [
                    {k: r.get(k) for k in ("pid", "cuda_reserved", "cuda_allocated")} for r in after]}))
            print("nvidia-smi --query-compute-apps=pid,used_memory (4 idle pools):")
            print(apps())
        finally:
            pools.close(kill=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
