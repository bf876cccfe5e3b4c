"""The fp8 burn on real GPUs (skipped without one, and on GPUs before compute capability 8.9): every GPU
runs torch._scaled_mm on float8_e4m3fn operands through the pool, and every result must equal the known
answer bit for bit, also at the largest m, where the partial sums reach their bound. A corruption is
counted on its rank only, and fp8 runs faster than bf16 (the tensor cores' fp8 path, not a fallback)."""

from __future__ import annotations

from pathlib import Path

import pytest

from clustercheck.run.pool import PoolKey
from clustercheck.run.pools import PoolManager

pytestmark = pytest.mark.gpu


@pytest.fixture
def pools(tmp_path: Path):
    manager = PoolManager(tmp_path / "logs")
    yield manager
    manager.close(kill=True)


def fp8_gpus() -> int:
    import torch

    cc = torch.cuda.get_device_capability(0)
    if torch.version.hip or cc < (8, 9):
        pytest.skip(f"fp8 GEMM needs a CUDA GPU of compute capability 8.9 or later (this: "
                    f"{torch.cuda.get_device_name(0)}, {cc[0]}.{cc[1]})")
    return torch.cuda.device_count()


def params(**over: object) -> dict:
    return {"duration": 5.0, "m": 8192, "dtype": "float8_e4m3fn", "chunk": 10, "warmup": 2, "interval": 0.0,
            "seed": 0, **over}


@pytest.mark.parametrize("m", [8192, 16384])
def test_an_fp8_burn_on_every_gpu_returns_the_known_answer_bit_for_bit(pools: PoolManager, m: int) -> None:
    n = fp8_gpus()
    per_rank = pools.get(PoolKey("nccl", n)).run("burn", params(m=m), 600)
    assert len(per_rank) == n
    for r in per_rank:
        assert (r["dtype"], r["m"], r["wrong"]) == ("float8_e4m3fn", m, 0), r
        assert r["checked"] >= 1 and r["gemms"] == 10 * r["checked"] and r["tflops"] > 0


def test_the_fp8_gemm_is_exact_where_every_partial_sum_is_at_its_bound() -> None:
    import torch

    from clustercheck.measure import burn as rank_burn

    fp8_gpus()
    m, dev = 16384, torch.device("cuda", 0)
    for sign in (1.0, -1.0):
        a = torch.full((m, m), 16.0, device=dev).to(torch.float8_e4m3fn)
        b = torch.full((m, m), 16.0 * sign, device=dev).to(torch.float8_e4m3fn).t().contiguous().t()
        out = torch.empty((m, m), device=dev)
        rank_burn.gemm(a, b)(out)
        torch.cuda.synchronize(dev)
        assert bool((out == sign * 2 ** 22).all())  # 256 * 16384: the largest sum the burn can reach


def test_an_fp8_corruption_is_counted_on_its_gpu_and_fp8_outruns_bf16(pools: PoolManager) -> None:
    n = fp8_gpus()
    pool = pools.get(PoolKey("nccl", n))
    bad = pool.run("burn", params(duration=1.0, fault={"kind": "corrupt", "rank": 0}), 300)
    assert [r["wrong"] for r in bad] == [1] + [0] * (n - 1)
    fp8 = pool.run("burn", params(duration=3.0), 300)
    bf16 = pool.run("burn", params(duration=3.0, dtype="bfloat16"), 300)
    for f, b in zip(fp8, bf16):
        assert f["wrong"] == b["wrong"] == 0 and f["tflops"] > 1.2 * b["tflops"], (f["tflops"], b["tflops"])
