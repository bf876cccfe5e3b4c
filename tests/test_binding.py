"""Rank-to-GPU binding at the CUDA boundary this machine lacks: the device index from CUDA's own count
and CUDA_VISIBLE_DEVICES, the GPU's NUMA node and CPUs from sysfs by PCI address (this machine's real
sysfs with a real PCI device, and a GPU in a sysfs tree of our own), and the one-line refusal a rank
prints when its GPU is not visible. tests/gpu/test_gpu_binding.py runs the real path on GPUs."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest

from clustercheck.measure.binding import bus_id, device_index, gpu_cpus, locality, parse_cpulist
from clustercheck.errors import UserError

PCI = Path("/sys/bus/pci/devices")


@pytest.mark.parametrize(("visible", "local_rank", "count", "index"), [
    (None, 3, 8, 3),         # every GPU visible: local rank n on CUDA device n
    ("4,5,6,7", 2, 4, 2),    # remapped: CUDA device 2 is physical GPU 6 (its bus id says so)
    ("3", 0, 1, 0),
    ("GPU-8b1c", 0, 1, 0),   # UUIDs are CUDA's business; only the count matters here
])
def test_the_device_comes_from_cudas_count(visible: str | None, local_rank: int, count: int, index: int) -> None:
    assert device_index(visible, local_rank, count) == index


def test_a_rank_whose_gpu_is_not_visible_is_told_the_variable_and_the_count() -> None:
    with pytest.raises(UserError) as err:
        device_index("0", 3, 1)
    text = str(err.value)
    assert "local rank 3" in text and "CUDA sees 1 GPU " in text and "CUDA_VISIBLE_DEVICES='0'" in text
    assert "--ranks 1" in text and "\n" not in text
    with pytest.raises(UserError, match="CUDA_VISIBLE_DEVICES='0,1'.*--ranks 2"):
        device_index("0,1", 2, 2)
    with pytest.raises(UserError, match=r"CUDA sees no GPU \(CUDA_VISIBLE_DEVICES=unset\)"):
        device_index(None, 0, 0)


def test_bus_ids_are_written_as_sysfs_writes_them() -> None:
    assert bus_id(0, 0x1B, 0) == "0000:1b:00.0" and bus_id(0x10, 0xDC, 0x1F) == "0010:dc:1f.0"


@pytest.mark.parametrize(("text", "cpus"), [("0-3,8-11\n", {0, 1, 2, 3, 8, 9, 10, 11}), ("5", {5}), ("", set()),
                                             ("0,2-3", {0, 2, 3})])
def test_cpu_lists(text: str, cpus: set[int]) -> None:
    assert parse_cpulist(text) == cpus


def _real_device() -> str:
    devices = sorted(d.name for d in PCI.iterdir()) if PCI.is_dir() else []
    if not devices:
        pytest.skip("no PCI devices in this machine's sysfs")
    return devices[0]


def test_locality_of_a_real_pci_device_on_this_machine() -> None:
    bdf = _real_device()
    where = locality(bdf)
    assert where is not None and where.bus_id == bdf
    node = int((PCI / bdf / "numa_node").read_text())
    assert where.numa_node == (node if node >= 0 else None)
    cpus = parse_cpulist((PCI / bdf / "local_cpulist").read_text())
    assert where.cpus == cpus and where.cpus and max(where.cpus) < (os.cpu_count() or 1)
    assert locality(bdf.upper()) == where  # NVML writes hex in capitals


def _fake_gpu(root: Path, bdf: str, numa: str, cpulist: str | None) -> None:
    dev = root / "bus" / "pci" / "devices" / bdf
    dev.mkdir(parents=True)
    (dev / "numa_node").write_text(numa + "\n")
    if cpulist is not None:
        (dev / "local_cpulist").write_text(cpulist + "\n")


def test_locality_of_a_gpu_in_a_sysfs_tree(tmp_path: Path) -> None:
    _fake_gpu(tmp_path, "0000:1b:00.0", "1", "8-15,24-31")
    _fake_gpu(tmp_path, "0000:dc:00.0", "-1", "0-3")
    where = locality("0000:1b:00.0", tmp_path)
    assert where is not None and where.numa_node == 1 and where.cpus == set(range(8, 16)) | set(range(24, 32))
    assert locality("00000000:1B:00.0", tmp_path) == where  # NVML's 8-digit domain
    assert gpu_cpus("0000:1b:00.0", tmp_path) == where.cpus
    other = locality("0000:dc:00.0", tmp_path)
    assert other is not None and other.numa_node is None and other.cpus == {0, 1, 2, 3}  # one node: -1
    assert locality("0000:99:00.0", tmp_path) is None


def test_no_cpus_from_sysfs_and_no_nvml_pins_nothing(tmp_path: Path) -> None:
    _fake_gpu(tmp_path, "0000:1b:00.0", "0", None)
    assert gpu_cpus("0000:1b:00.0", tmp_path) == frozenset()  # this machine has no NVML either


@pytest.mark.parametrize("bad", ["../../../etc", "0000:1b:00.0/../..", "1b:00.0", ""])
def test_only_pci_addresses_name_a_sysfs_directory(bad: str, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not a PCI address"):
        locality(bad, tmp_path)


def test_host_device_pins_to_the_gpus_cpus_and_puts_the_affinity_back() -> None:
    import torch

    from clustercheck.measure import RankContext
    from clustercheck.measure.copies import _pin_to_gpu_numa

    bdf = _real_device()
    ctx = RankContext(rank=0, world_size=1, local_rank=0, backend="nccl", device=torch.device("cpu"), host="h",
                      bus_id=bdf)
    start = os.sched_getaffinity(0)
    before = _pin_to_gpu_numa(ctx)
    try:
        want = parse_cpulist((PCI / bdf / "local_cpulist").read_text())
        assert before == start and os.sched_getaffinity(0) == (want & start or want)
    finally:
        os.sched_setaffinity(0, start)
    no_bus = RankContext(rank=0, world_size=1, local_rank=0, backend="gloo", device=torch.device("cpu"), host="h")
    assert _pin_to_gpu_numa(no_bus) is None and os.sched_getaffinity(0) == start


def test_a_rank_that_cannot_see_its_gpu_says_so_in_one_line_and_exits() -> None:
    """The real worker on this GPU-less machine under NCCL: CUDA sees no device, so the rank refuses
    before touching CUDA, and the pool quotes that line as the rank's last output."""
    import torch.distributed as dist

    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=30))
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "0", "CC_LOG_DIR": ""}
    argv = [sys.executable, "-m", "clustercheck.run.worker", "--rank", "1", "--local-rank", "1", "--node", "n7",
            "--world-size", "2", "--store", f"127.0.0.1:{store.port}", "--backend", "nccl"]
    out = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, input="k" * 64 + "\n")
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip() == ("clustercheck rank 1 (n7): local rank 1: CUDA sees no GPU "
                                  "(CUDA_VISIBLE_DEVICES='0')")
