"""A hand-made run record of an 8-GPU node (no GPU needed): the p2p matrix with a slow pair, a pair without
peer access and a failed bidirectional verdict; all_gather and reduce_scatter with both placements;
all_reduce in place; host<->device copies per GPU with one slow GPU. Shared by test_report_figures.py and
the browser test."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

NODE = "node7"
GPUS = 8
SLOW = ("GPU3", "GPU5", 210.0)          # a degraded link, one direction
NO_PEER = {("GPU6", "GPU7"): 21.3, ("GPU7", "GPU6"): 20.8}  # copies staged through the host
BIDIR_FAIL = ("GPU1", "GPU2")           # both directions fine alone, the pair's bidirectional sum is not
H2D_SLOW_GPU = "GPU4"                   # a downtrained PCIe link


def _verdict(metric: str, measured: float, limit: float, unit: str = "GB/s", subject: str | None = None,
             op: str = ">=") -> dict[str, Any]:
    passed = measured >= limit if op == ">=" else measured <= limit
    return {"metric": metric, "measured": measured, "unit": unit, "op": op, "limit": limit, "passed": passed,
            "margin": (measured - limit) / limit, "worst": None, "subject": subject,
            "expression": f"{op} {limit}", "source": "hand-made record", "origin": "thresholds/h100-sxm-8x.yaml:1",
            "spec_sources": []}


def p2p_bandwidth(i: int, j: int) -> float:
    """A deterministic spread of about +-2% around 376 GB/s (H100 p2p, stas00/ml-engineering network/README.md)."""
    return round(376.0 * (1 + 0.02 * (((i * 7 + j * 3) % 9) - 4) / 4), 1)


def p2p_result() -> dict[str, Any]:
    rows, verdicts = [], []
    for i in range(GPUS):
        for j in range(GPUS):
            if i == j:
                continue
            a, b = f"GPU{i}", f"GPU{j}"
            value = SLOW[2] if (a, b) == SLOW[:2] else NO_PEER.get((a, b), p2p_bandwidth(i, j))
            rows.append({"subject": f"{a}->{b}", "metric": "unidirectional", "median": value,
                         "min": round(value * 0.99, 1), "max": round(value * 1.01, 1),
                         "peer_access": (a, b) not in NO_PEER})
            verdicts.append(_verdict("unidirectional", value, 335.0, subject=f"{a}->{b}"))
    a, b = BIDIR_FAIL
    verdicts.append(_verdict("bidirectional", 601.0, 670.0, subject=f"{a}<->{b}"))
    return {"type": "result", "name": f"p2p-matrix[{NODE}]", "check": "p2p-matrix", "node": NODE, "measure": "p2p",
            "scope": "gpu-pair", "suite_file": "suites/burn-in.yaml", "line": 30, "outcome": "failed", "duration": 41.0,
            "message": "GPU3->GPU5 unidirectional 210 GB/s misses the limit >= 335 GB/s", "verdicts": verdicts,
            "rows": rows, "metrics": {"p2p_min": {"value": 20.8, "unit": "GB/s"}},
            "finished": "2026-01-01T00:01:00+00:00"}


def collective_result(check: str, measure: str, placements: tuple[str, ...], peak: float) -> dict[str, Any]:
    rows = []
    for k, size in enumerate(1 << s for s in range(20, 31, 2)):  # 1 MiB .. 1 GiB
        for placement in placements:
            busbw = peak * (1 - 0.5 ** (k + 1)) * (0.97 if placement == "out" else 1.0)
            rows.append({"size": size, "count": size // 4, "bytes": size, "dtype": "float32", "placement": placement,
                         "time_us": size / busbw / 1e3, "algbw": busbw * 0.57, "busbw": busbw, "wrong": 0,
                         "rank_time_us": [1.0] * GPUS, "slowest_rank": 3})
    judged = min((r for r in rows if r["size"] == 1 << 30), key=lambda r: r["busbw"])
    return {"type": "result", "name": f"{check}[{NODE}]", "check": check, "node": NODE, "measure": measure,
            "scope": "node", "suite_file": "suites/burn-in.yaml", "line": 10, "outcome": "passed", "duration": 9.0,
            "message": "", "verdicts": [_verdict("busbw", judged["busbw"], 330.0)], "rows": rows, "judged_at": 1 << 30,
            "worst": f"rank 3 ({NODE})", "metrics": {"busbw": {"value": judged["busbw"], "unit": "GB/s"}},
            "finished": "2026-01-01T00:00:10+00:00"}


def host_device_result() -> dict[str, Any]:
    rows, verdicts = [], []
    for i in range(GPUS):
        gpu = f"GPU{i}"
        for metric, base in (("h2d", 55.2), ("d2h", 54.6)):
            value = 26.1 if (gpu, metric) == (H2D_SLOW_GPU, "h2d") else round(base - 0.3 * (i % 3), 1)
            rows.append({"subject": gpu, "metric": metric, "median": value, "min": round(value - 0.6, 1),
                         "max": round(value + 0.4, 1)})
            verdicts.append(_verdict(metric, value, 48.0, subject=gpu))
    return {"type": "result", "name": f"h2d-d2h[{NODE}]", "check": "h2d-d2h", "node": NODE, "measure": "host_device",
            "scope": "gpu", "suite_file": "suites/burn-in.yaml", "line": 20, "outcome": "failed", "duration": 12.0,
            "message": f"{H2D_SLOW_GPU} h2d 26.1 GB/s misses the limit >= 48 GB/s", "verdicts": verdicts,
            "rows": rows, "metrics": {"h2d": {"value": 26.1, "unit": "GB/s"}, "d2h": {"value": 54.0, "unit": "GB/s"}},
            "finished": "2026-01-01T00:00:30+00:00"}


def write_gpu_record(path: Path) -> Path:
    lines = [
        {"type": "run", "schema": 1, "started": "2026-01-01T00:00:00+00:00", "argv": ["clustercheck", "run", "burn-in"],
         "platform": "h100-sxm-8x", "platform_detected": True, "facts": {"host": NODE, "gpu_count": GPUS},
         "thresholds": {"file": "thresholds/h100-sxm-8x.yaml", "sha256": "ab"},
         "suites": [{"file": "suites/burn-in.yaml", "sha256": "cd"}], "launcher": "local", "backend": "nccl",
         "ranks": GPUS},
        collective_result("allreduce-sweep", "all_reduce", ("in",), 480.0),
        collective_result("allgather-sweep", "all_gather", ("out", "in"), 362.0),
        collective_result("reducescatter-sweep", "reduce_scatter", ("out", "in"), 364.0),
        host_device_result(),
        p2p_result(),
        {"type": "end", "finished": "2026-01-01T00:02:00+00:00",
         "counts": {"passed": 3, "failed": 2, "error": 0, "skipped": 0}, "pool_starts": 1, "interrupted": False},
    ]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path
