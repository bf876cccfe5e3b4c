"""The real binding and memory paths on GPUs (skipped without one; tests/test_binding.py and
tests/test_memory.py cover the CUDA boundary on CPUs): a rank under a remapped CUDA_VISIBLE_DEVICES
binds by CUDA's view and names the physical GPU NVML and sysfs know by the same PCI address; a rank
whose GPU is hidden refuses in one line; memory goes back between tasks; check data stays in budget."""

from __future__ import annotations

from pathlib import Path

import pytest

from clustercheck.measure.binding import locality
from helpers import memory_need
from clustercheck.run.failure import RankFailure
from clustercheck.run.pool import PoolKey
from clustercheck.run.pools import PoolManager

pytestmark = pytest.mark.gpu


@pytest.fixture
def pools(tmp_path: Path):
    manager = PoolManager(tmp_path / "logs")
    yield manager
    manager.close(kill=True)


def _nvml_bus_id(index: int) -> str:
    import pynvml

    pynvml.nvmlInit()
    raw = pynvml.nvmlDeviceGetPciInfo(pynvml.nvmlDeviceGetHandleByIndex(index)).busId
    text = raw.decode() if isinstance(raw, bytes) else raw
    return text.lower()[4:] if len(text.split(":")[0]) == 8 else text.lower()  # 00000000:1B:00.0 -> 0000:1b:00.0


def test_a_remapped_rank_binds_cuda_device_0_and_names_the_physical_gpu(pools: PoolManager) -> None:
    import torch

    last = torch.cuda.device_count() - 1  # NVML index == CUDA index without a remap (PCI order assumed)
    pool = pools.get(PoolKey("nccl", 1, env=(("CUDA_VISIBLE_DEVICES", str(last)), ("CUDA_DEVICE_ORDER", "PCI_BUS_ID"))))
    (rank,) = pool.run("ping", {}, 120)
    assert rank["device"] == "cuda:0"
    assert rank["bus_id"] == _nvml_bus_id(last) and rank["nvml_index"] == last
    where = locality(rank["bus_id"])
    assert where is not None and rank["numa_node"] == where.numa_node


def test_more_ranks_than_visible_gpus_fail_naming_cuda_visible_devices(pools: PoolManager) -> None:
    with pytest.raises(RankFailure, match=r"CUDA sees 1 GPU \(CUDA_VISIBLE_DEVICES='0'\)"):
        pools.get(PoolKey("nccl", 2, env=(("CUDA_VISIBLE_DEVICES", "0"),)))


def test_gpu_memory_goes_back_between_tasks_and_rows_carry_bus_ids(pools: PoolManager) -> None:
    pool = pools.get(PoolKey("nccl", 1))
    (answer,) = pool.run("device_memory", {"size": 1 << 30, "loops": 2, "samples": 1}, 120)
    assert answer["subjects"]["GPU0"]["bandwidth"]["bus_id"] == pool.ranks[0]["bus_id"]
    (after,) = pool.run("ping", {}, 120)
    assert after["cuda_reserved"] < 64 << 20, after  # 2 GiB were cached before empty_cache


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_all_reduce_check_data_stays_within_its_need(dtype: str) -> None:
    import torch

    from clustercheck.formulas import layout
    from clustercheck.measure import RankContext
    from clustercheck.measure.collectives import DTYPES, Bench

    size = 256 << 20
    ctx = RankContext(rank=0, world_size=1, local_rank=0, backend="nccl", device=torch.device("cuda", 0), host="h")
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    lay = layout("all_reduce", size, DTYPES[dtype].itemsize, 1)
    bench = Bench(ctx, "all_reduce", lay, DTYPES[dtype], inplace=True)
    bench.fill_random()
    bench.fill_check(7)
    assert bench.count_wrong(7) == 0
    peak = torch.cuda.max_memory_allocated() - base
    need = memory_need("all_reduce", {"sizes": [size], "dtype": dtype, "placements": ["in"]}, 1)
    assert size <= peak <= need + (1 << 20), (peak, need)  # + the allocator's rounding of small tiles
