"""The GPU path, run where a GPU is lent (skipped elsewhere): NCCL on the GPUs present, host<->device
copies, device memory bandwidth, GEMM, and the plugin end to end on the detected platform.
Figures from such runs go to docs/validation/ with GPU model, driver, torch and the command."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clustercheck.run.pool import PoolKey
from clustercheck.run.pools import PoolManager
from clustercheck.kinds.collectives import reduce_collective
from clustercheck.kinds.subjects import reduce_subjects

pytestmark = pytest.mark.gpu


@pytest.fixture
def pools(tmp_path: Path):
    manager = PoolManager(tmp_path / "logs")
    yield manager
    manager.close(kill=True)


def ngpus() -> int:
    import torch

    return torch.cuda.device_count()


def test_nccl_all_reduce_is_exact_on_the_gpus_present(pools: PoolManager) -> None:
    pool = pools.get(PoolKey("nccl", ngpus()))
    params = {"sizes": [8, 1 << 20, 64 << 20], "dtype": "bfloat16", "warmup": 2, "iters": 5, "check_iters": 2,
              "judge_at": 64 << 20, "placements": ["in"], "per_iteration": True}
    per_rank = pool.run("all_reduce", params, 300)
    m = reduce_collective("all_reduce", per_rank, [r["host"] for r in pool.ranks], 64 << 20)
    assert m.metrics["wrong"] == 0
    assert all(row["time_us"] > 0 and len(row["iter_us"]) == 5 for row in m.rows)
    assert all("nccl" in r and r["device"].startswith("cuda") for r in pool.ranks)


def test_nccl_cuda_graph_mode_is_exact(pools: PoolManager) -> None:
    pool = pools.get(PoolKey("nccl", ngpus()))
    params = {"sizes": [1 << 20], "dtype": "float32", "warmup": 2, "iters": 5, "check_iters": 1, "judge_at": 1 << 20,
              "placements": ["in"], "per_iteration": False, "cuda_graph": 3}
    per_rank = pool.run("all_reduce", params, 300)
    assert reduce_collective("all_reduce", per_rank, ["h"] * len(per_rank), 1 << 20).metrics["wrong"] == 0


def test_nccl_says_its_version_transports_and_algorithm(pools: PoolManager) -> None:
    """The timed pool logs NCCL's init to a file per rank; the untimed tuning pool also logs each call's
    algorithm/protocol (NCCL on one rank takes a shortcut without one, so labels need two GPUs)."""
    from clustercheck.fabric import comm

    n = ngpus()
    params = {"sizes": [8, 1 << 20, 64 << 20], "dtype": "float32", "warmup": 2, "iters": 5, "check_iters": 1,
              "judge_at": 64 << 20, "placements": ["in"], "per_iteration": False}
    timed = pools.get(PoolKey("nccl", n, nccl_log="init"))
    per_rank = timed.run("all_reduce", params, 300)
    logs = [r["nccl"] for r in per_rank]
    assert all(log["log"] and Path(log["log"]).is_file() and log["versions"] for log in logs), logs
    tuned = pools.get(PoolKey("nccl", n, nccl_log="tuning")).run("all_reduce", {**params, "tuning_pass": True}, 300)
    block = comm.describe("nccl", per_rank, timed.ranks, tuned, {})
    assert block["version"] == timed.ranks[0]["nccl"], block
    # the rank's figure is the library's own (fabric/nccl_lib.py), the one NCCL's log names
    assert timed.ranks[0]["nccl"] in {v.split("+")[0] for log in logs for v in log["versions"]}, (timed.ranks, logs)
    if n >= 2:
        assert block["transports"] and all(block["algorithms"].values()), block


@pytest.mark.parametrize(("op", "params", "metric", "floor"), [
    ("host_device", {"size": 64 << 20, "loops": 8, "samples": 3}, "h2d", 3.0),  # even PCIe Gen3 x8 does better
    ("device_memory", {"size": 256 << 20, "loops": 8, "samples": 3}, "bandwidth", 100.0),
    ("gemm", {"m": 4096, "dtype": "bfloat16", "loops": 10, "samples": 3}, "tflops", 5.0),
])
def test_per_gpu_measurements(pools: PoolManager, op: str, params: dict, metric: str, floor: float) -> None:
    from clustercheck.kinds import KINDS

    pool = pools.get(PoolKey("nccl", ngpus()))
    m = reduce_subjects(pool.run(op, params, 300), KINDS[op].metrics)
    assert sorted(m.subjects) == [f"GPU{i}" for i in range(ngpus())]
    assert all(values[metric] > floor for values in m.subjects.values()), m.subjects


def test_plugin_on_the_gpu_platform(pytester: pytest.Pytester) -> None:
    """The shipped GPU suite judged against --platform cpu limits would be wrong; instead run a small
    suite with a profile that matches whatever GPU is here only by count, to exercise the whole path."""
    n = ngpus()
    (pytester.path / "th").mkdir()
    (pytester.path / "th" / "lent.yaml").write_text(
        f"platform: lent\ndetect: {{gpu_count: {n}}}\nchecks:\n"
        "  h2d: {h2d: {limit: '>= 1', unit: GB/s}}\n  mem: {bandwidth: {limit: '>= 50', unit: GB/s}}\n")
    (pytester.path / "s.yaml").write_text(
        "checks:\n  - id: h2d\n    measure: host_device\n    params: {size: 64MiB}\n"
        "  - id: mem\n    measure: device_memory\n    params: {size: 256MiB}\n")
    res = pytester.runpytest_subprocess("s.yaml", "--thresholds", "th", "--cc-out", "out")
    res.assert_outcomes(passed=2)
    data = json.loads((pytester.path / "out" / "latest" / "results.json").read_text())
    assert data["run"]["platform"] == "lent" and data["run"]["facts"]["gpu_count"] == n
    assert len(data["results"][0]["verdicts"]) == n  # one verdict per GPU


def test_nccl_ranks_forked_from_one_zygote_read_nccl_variables_set_after_the_fork(pools: PoolManager) -> None:
    """NCCL reads its variables at its own first call, after the fork (run/zygote.py): a rank forked from
    the zygote writes NCCL's log where NCCL_DEBUG_FILE, set by the rank itself, says; a check's NCCL_ALGO
    gets its ranks from the same zygote and reaches NCCL (NCCL logs it where a communicator has two GPUs
    or more: on one, NCCL does not tune), and the data stay exact."""
    import os

    from clustercheck.run import zygote

    n = ngpus()
    forked = os.environ.get(zygote.ENV) != "0"
    params = {"sizes": [1 << 20], "dtype": "float32", "warmup": 1, "iters": 3, "check_iters": 1,
              "judge_at": 1 << 20, "placements": ["in"], "per_iteration": False}
    plain = pools.get(PoolKey("nccl", n, nccl_log="init"))
    served = {p._zygote for p in plain.procs if isinstance(p, zygote.ZygoteRank)}
    assert len(served) == (1 if forked else 0) and len(plain.procs) == n, plain.procs
    ring = pools.get(PoolKey("nccl", n, (("NCCL_ALGO", "Ring"),), nccl_log="init"))
    assert {p._zygote for p in ring.procs if isinstance(p, zygote.ZygoteRank)} == served
    for pool in (plain, ring):
        per_rank = pool.run("all_reduce", params, 300)
        assert reduce_collective("all_reduce", per_rank, ["h"] * n, 1 << 20).metrics["wrong"] == 0
        logs = [r["nccl"] for r in per_rank]
        assert all(log["log"] and Path(log["log"]).is_file() and log["versions"] for log in logs), logs
    if n >= 2:
        assert all(log["env"].get("NCCL_ALGO") == "Ring" for log in logs), logs
