"""An AMD node is measured with RCCL on every GPU, not CPU gloo on 2 ranks: the GPU count comes from a ROCm
build of torch (NVML sees no AMD GPU), tested at the torch boundary (torch.cuda.device_count and
torch.version.hip patched on this machine's CPU torch). The PCI bus is a fake sysfs tree built here with the
MI300X's device id (1002:74a1, class 0x1200 processing accelerator); no capture is involved."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from clustercheck.judging import platform
from clustercheck.measure.binding import locality
from clustercheck.measure import RankContext
from clustercheck.measure.collectives import ROCM_GRAPH_REFUSAL, collective

THRESHOLDS = Path(__file__).resolve().parent.parent / "thresholds"
MI300X_BUS = [f"0000:{b}:00.0" for b in ("05", "26", "46", "65", "85", "a6", "c6", "e5")]  # amd-smi list's BDFs


def fake_bus(root: Path, devices: list[str], vendor: str = "0x1002", device: str = "0x74a1", numa: int = 0) -> Path:
    pci = root / "bus" / "pci" / "devices"
    for bdf in devices:
        d = pci / bdf
        d.mkdir(parents=True)
        (d / "class").write_text("0x120000\n")
        (d / "vendor").write_text(f"{vendor}\n")
        (d / "device").write_text(f"{device}\n")
        (d / "numa_node").write_text(f"{numa}\n")
        (d / "local_cpulist").write_text("0-3,8-11\n")
    return pci


@pytest.fixture
def no_nvml(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # `import pynvml` raises ImportError: NVML absent


def rocm_torch(monkeypatch: pytest.MonkeyPatch, count: int, hip: str | None = "6.2.41133-dd7f95766") -> list[int]:
    calls: list[int] = []

    def device_count() -> int:
        calls.append(count)
        return count

    monkeypatch.setattr(torch.cuda, "device_count", device_count)
    monkeypatch.setattr(torch.version, "hip", hip)
    return calls


def test_rocm_torch_with_8_devices_picks_nccl_with_8_ranks_and_mi300x(tmp_path, monkeypatch, no_nvml):
    calls = rocm_torch(monkeypatch, 8)
    facts = platform.read_facts(pci_root=fake_bus(tmp_path, MI300X_BUS))
    assert calls == [8]
    assert (facts.gpu_count, facts.torch_gpus, facts.usable_gpus, facts.hip) == (8, 8, 8, "6.2.41133-dd7f95766")
    assert facts.nvml_status.startswith("NVML unavailable")
    assert platform.layout("auto", None, {"node1": facts}) == ("nccl", 8)
    assert platform.detect(THRESHOLDS, facts).name == "mi300x-8x"
    # the facts cross the wire from a node's first rank intact
    again = platform.Facts.from_dict(facts.as_dict())
    assert (again.hip, again.usable_gpus) == (facts.hip, 8)


def test_rocm_count_read_on_a_rank_is_kept_and_torch_not_asked_again(tmp_path, monkeypatch, no_nvml):
    calls = rocm_torch(monkeypatch, 99)
    facts = platform.read_facts(torch_gpus=8, pci_root=fake_bus(tmp_path, MI300X_BUS))
    assert calls == [] and facts.gpu_count == 8 and facts.hip


def test_a_node_with_a_gpu_lost_still_detects_and_runs_on_what_hip_sees(tmp_path, monkeypatch, no_nvml):
    rocm_torch(monkeypatch, 7)
    facts = platform.read_facts(pci_root=fake_bus(tmp_path, MI300X_BUS))
    assert platform.detect(THRESHOLDS, facts).name == "mi300x-8x"
    assert platform.layout("auto", None, {"node1": facts}) == ("nccl", 7)


def test_mi325x_bus_detects_its_own_profile(tmp_path, monkeypatch, no_nvml):
    rocm_torch(monkeypatch, 8)
    facts = platform.read_facts(pci_root=fake_bus(tmp_path, MI300X_BUS, device="0x74a5"))
    assert platform.detect(THRESHOLDS, facts).name == "mi325x-8x"


def test_neither_nvml_nor_rocm_runs_the_cpu_platform_as_before(tmp_path, monkeypatch, no_nvml):
    calls = rocm_torch(monkeypatch, 8, hip=None)  # a CUDA/CPU build: torch.version.hip is None
    facts = platform.read_facts(pci_root=tmp_path / "empty")
    assert calls == [] and facts.hip is None and facts.gpu_count == 0 and facts.torch_gpus is None
    assert platform.layout("auto", None, {"node1": facts}) == ("gloo", 2)
    assert platform.detect(THRESHOLDS, facts).name == "cpu"


def test_amd_gpus_on_the_bus_without_rocm_torch_never_run_as_cpu(tmp_path, monkeypatch, no_nvml):
    """A CPU torch on an MI300X node: nothing can bind the GPUs, but the node is still the MI300X platform
    (never cpu), so its GPU checks fail or error instead of passing on gloo."""
    rocm_torch(monkeypatch, 0, hip=None)
    facts = platform.read_facts(pci_root=fake_bus(tmp_path, MI300X_BUS))
    assert facts.hip is None and facts.accelerator_count == 8
    assert platform.detect(THRESHOLDS, facts).name == "mi300x-8x"


def test_numa_placement_of_an_amd_gpu_comes_from_sysfs(tmp_path):
    fake_bus(tmp_path, ["0000:c6:00.0"], numa=1)
    where = locality("0000:c6:00.0", sys_root=tmp_path)
    assert where is not None and where.numa_node == 1 and where.cpus == frozenset({0, 1, 2, 3, 8, 9, 10, 11})


def test_cuda_graph_mode_is_refused_on_rocm_with_the_reason(monkeypatch):
    monkeypatch.setattr(torch.version, "hip", "6.2.41133-dd7f95766")
    ctx = RankContext(rank=0, world_size=1, local_rank=0, backend="nccl", device=torch.device("cpu"), host="h")
    params = {"collective": "all_reduce", "dtype": "float32", "sizes": [1024], "placements": ["out"],
              "warmup": 0, "iters": 1, "check_iters": 0, "cuda_graph": 3}
    with pytest.raises(RuntimeError) as err:
        collective(ctx, params)
    assert str(err.value) == ROCM_GRAPH_REFUSAL
    assert "ROCm/rccl #2022" in ROCM_GRAPH_REFUSAL and "cuda_graph: 0" in ROCM_GRAPH_REFUSAL
