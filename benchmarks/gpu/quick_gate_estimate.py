"""An estimate of the 8-GPU quick gate's wall time (issue 32: at most 60 s) from parts measured on one lent H100
and the data volume of suites/quick-gate-nvlink8.yaml moved at published 8xH100 rates. No 8-GPU machine was
lent, so this is arithmetic, not a measurement; each part below says where its figure comes from.

    python3 benchmarks/gpu/quick_gate_estimate.py

Measured on one H100 (docs/validation/2026-11-26-h100-startup.md, 2026-11-26-h100-zygote.md):
- a pool of 8 ranks started at once (torch import and CUDA context, benchmarks/gpu/rank_start.py): 5.05 s;
- a later pool of 8 ranks, forked from the zygote that imported torch for the first (`rank_start.py --fork`:
  each child makes its CUDA context): 1.60 s (the slower of two runs; 1.49 s the other). The ring check's
  pool and the tuning pools fork from the same zygote: NCCL_* are read after the fork (run/zygote.py);
- the controller's part before the first check and after the last, and the probes (versions, nvlink,
  fabric), from `clustercheck run quick-gate-nvlink8 --platform h100-sxm-1x --timings`;
- host-device on one GPU: 0.72 s (one GPU's turn; the check takes the 8 GPUs one at a time);
- device-memory: 0.12 s (every GPU at once).
Not measured here (one GPU cannot): NCCL's communicator set-up over 8 GPUs, taken as NCCL_INIT_S each.
Published rates (thresholds/h100-sxm-8x.yaml cites them): all_reduce busbw 475 GB/s (NVLS) and 370 GB/s (Ring),
p2p copy 376 GB/s a pair one way, host-device 55 GB/s.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from clustercheck.units import parse_size

SUITE = Path(__file__).resolve().parents[2] / "suites" / "quick-gate-nvlink8.yaml"
N = 8
POOL_START_S = 5.05  # 8 ranks at once, measured
FORKED_POOL_START_S = 1.60  # 8 ranks forked from the zygote, measured
CONTROLLER_S = 0.05 + 0.32 + 0.63 + 0.67  # imports, suites and profiles, pytest start-up, collection: measured
PROBES_S = 0.17 + 0.17 + 0.22  # versions, nvlink, fabric: measured (one GPU; NVML and nvidia-smi per node)
END_S = 0.47 + 0.30  # ranks stopped, reports: measured
HOST_DEVICE_ONE_GPU_S = 0.72  # measured, one GPU's turn
DEVICE_MEMORY_S = 0.12  # measured
NCCL_INIT_S = 2.0  # NOT measured: an assumption for one 8-GPU communicator's set-up
BUSBW = {"allreduce-default": 475e9, "allreduce-ring": 370e9}  # published
P2P_RATE = 376e9  # published, one pair one way


def allreduce_seconds(params: dict, busbw: float) -> float:
    ops = params["warmup"] + params["iters"] + params["check_iters"]
    return sum(ops * 2 * (N - 1) / N * parse_size(s) / busbw for s in params["sizes"])


def p2p_seconds(params: dict) -> float:
    per_pair = (4 + params["loops"] * params["samples"]) * parse_size(params["size"]) / P2P_RATE
    return N * (N - 1) * per_pair + N * (N - 1) // 2 * per_pair  # every ordered pair, then both ways at once


def main() -> None:
    checks = {c["id"]: c for c in yaml.safe_load(SUITE.read_text())["checks"]}
    parts = [("controller start (the first pool starts beside it)", max(CONTROLLER_S, POOL_START_S)),
             ("probes: versions, nvlink, fabric", PROBES_S)]
    for cid in ("allreduce-default", "allreduce-ring"):
        if cid != "allreduce-default":
            parts.append((f"{cid}: its own pool (NCCL_ALGO) forks", FORKED_POOL_START_S))
        parts.append((f"{cid}: NCCL communicator (assumed)", NCCL_INIT_S))
        parts.append((f"{cid}: data at {BUSBW[cid] / 1e9:.0f} GB/s busbw", allreduce_seconds(checks[cid]["params"], BUSBW[cid])))
        parts.append((f"{cid}: the tuning pool forks, and its communicator (assumed)", FORKED_POOL_START_S + NCCL_INIT_S))
    parts += [("p2p-matrix: 56 ordered pairs and 28 both ways", p2p_seconds(checks["p2p-matrix"]["params"])),
              ("host-device: 8 GPUs one at a time", N * HOST_DEVICE_ONE_GPU_S),
              ("device-memory: 8 GPUs at once", DEVICE_MEMORY_S),
              ("ranks stopped, reports", END_S)]
    for name, seconds in parts:
        print(f"{seconds:7.2f} s  {name}")
    total = sum(s for _, s in parts)
    print(f"{total:7.2f} s  in all (estimate; goal at most 60 s)")


if __name__ == "__main__":
    main()
