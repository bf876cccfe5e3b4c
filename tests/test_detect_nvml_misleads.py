"""Detection and the GPU probes where NVML's answer misleads: an HGX board whose NVLinks NVML reports absent
is still that board (never a "-nvl0" platform judged at PCIe speed), an NVML that proves a driver is there
but broken is never a CPU-only machine, and nvidia-smi or NVML missing is `not judged`, never a skip or a
failed GPU count.

No GPU here: NVML is the real pynvml over the stand-in library (tests/nvml_standin/) answering from the
8 x H100 SXM5 capture (tests/nvml_capture.py); the PCI bus is a sysfs tree of class/vendor/device files."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from clustercheck.judging.gpuless import DriverBroken
from clustercheck.judging.platform import detect, detect_nodes, read_facts
from clustercheck.probes import get, nvsmi, run_live
from nvml_capture import h100_node, in_process, link_down

THRESHOLDS = Path(__file__).resolve().parent.parent / "thresholds"


def pci_bus(root: Path, bus_ids: list[str], device: str = "0x2330") -> Path:
    """A sysfs PCI tree holding one NVIDIA 3D controller per bus id (class, vendor, device as the kernel writes)."""
    for bus in bus_ids:
        d = root / bus.lower()[4:]  # NVML's 00000000:18:00.0 in sysfs's form 0000:18:00.0
        d.mkdir(parents=True)
        for name, value in (("class", "0x030200"), ("vendor", "0x10de"), ("device", device)):
            (d / name).write_text(value + "\n")
    return root


def no_nvlinks(scenario: dict[str, Any]) -> dict[str, Any]:
    """NVLink disabled: every link answers as absent (state and capability), so NVML counts 0 per GPU."""
    out = copy.deepcopy(scenario)
    for gpu in out["gpus"]:
        gpu["links"] = 0
    return out


def test_an_hgx_board_whose_nvlinks_nvml_reports_absent_is_still_h100_sxm_8x(monkeypatch, tmp_path):
    """Was h100-sxm-8x-nvl0, derived with PCIe-level limits and no NVLink expectation: the nvlink probe
    skipped and the run passed an HGX board at PCIe speed."""
    node = no_nvlinks(h100_node())
    in_process(monkeypatch, node)
    facts = read_facts(pci_root=pci_bus(tmp_path / "pci", [g["bus_id"] for g in node["gpus"]]))
    assert (facts.gpu_count, facts.pci_device_ids, facts.nvlinks_per_gpu) == (8, (0x2330,), 0)
    profile = detect(THRESHOLDS, facts)
    assert profile.name == "h100-sxm-8x" and profile.expect["nvlinks_per_gpu"] == 18
    # without the hand-written profiles the derived one is the usual board's, never -nvl0
    derived = detect(THRESHOLDS, facts, profiles=[])
    assert derived.name == "h100-sxm-8x" and derived.expect["nvlinks_per_gpu"] == 18


def test_one_sxm_gpu_without_nvlinks_is_still_the_one_gpu_platform(monkeypatch, tmp_path):
    node = no_nvlinks(h100_node())
    node["gpus"] = node["gpus"][:1]
    in_process(monkeypatch, node)
    facts = read_facts(pci_root=pci_bus(tmp_path / "pci", [node["gpus"][0]["bus_id"]]))
    assert detect(THRESHOLDS, facts).name == "h100-sxm-1x"


LIB_RM_VERSION_MISMATCH, UNKNOWN, DRIVER_NOT_LOADED, LIBRARY_NOT_FOUND = 18, 999, 9, 12  # nvml.h return codes


@pytest.mark.parametrize("broken, says", [
    ({"init_error": LIB_RM_VERSION_MISMATCH}, "NVML unavailable: NVML_ERROR_LIB_RM_VERSION_MISMATCH"),  # driver upgraded
    ({"count_error": UNKNOWN}, "node: nvmlDeviceGetCount failed: NVML_ERROR_UNKNOWN"),
])
def test_a_failing_driver_in_a_container_without_the_pci_bus_is_refused_not_cpu(monkeypatch, tmp_path, broken, says):
    """Was `cpu`: cpu-smoke passed a GPU node whose driver NVML proves present and broken, and no line
    mentioned NVML. Detection now refuses it in one line naming NVML's answer and the unread PCI bus."""
    in_process(monkeypatch, {**h100_node(), **broken})
    facts = read_facts(pci_root=tmp_path / "no-pci")  # a container without /sys/bus/pci
    assert facts.accelerator_count == 0 and facts.pci_problem.startswith(f"{tmp_path / 'no-pci'} could not be read")
    with pytest.raises(DriverBroken) as info:
        detect(THRESHOLDS, facts, node="n7")
    line = str(info.value)
    assert "\n" not in line and line.startswith("n7 is no CPU-only machine") and says in line
    assert "could not be read" in line
    with pytest.raises(DriverBroken, match="n7"):
        detect_nodes(THRESHOLDS, {"n7": facts})


@pytest.mark.parametrize("scenario", [
    {"init_error": LIBRARY_NOT_FOUND, "gpus": []},
    {"init_error": DRIVER_NOT_LOADED, "gpus": []},
    {"driver": "565.57.01", "cuda": 12070, "gpus": []},  # a driver that sees no GPU: NVML ok, count 0
])
def test_a_machine_nvml_shows_without_gpus_is_still_cpu(monkeypatch, tmp_path, scenario):
    in_process(monkeypatch, scenario)
    facts = read_facts(pci_root=tmp_path / "no-pci")
    assert detect(THRESHOLDS, facts).name == "cpu"


@pytest.mark.parametrize("probe, expect, key", [
    ("nvlink", {"nvlinks_per_gpu": 18, "gpu_count": 8}, "nvlinks_per_gpu: 18"),
    ("fabric", {"nvswitch_fabric": True}, "nvswitch_fabric: True"),
])
def test_without_nvidia_smi_a_platform_with_nvlinks_is_not_judged_never_skipped(monkeypatch, tmp_path, probe, expect,
                                                                                key):
    """Was skipped ("no NVIDIA driver on this machine") while NVML answered and showed GPU2 with 17 of its 18
    links up: a link known down passed the gate as a skip."""
    in_process(monkeypatch, link_down(h100_node(), 2, 5))
    monkeypatch.setattr(nvsmi, "DRIVER_SIGNS", ())  # a container: no driver files, NVML alone shows it
    monkeypatch.setenv("PATH", str(tmp_path))       # an empty directory: no nvidia-smi anywhere on PATH
    outcome = run_live(get(probe), expect)
    assert outcome.outcome == "not judged", outcome
    (verdict,) = outcome.verdicts
    assert "nvidia-smi not found on PATH" in verdict.detail and key in verdict.detail
    assert "no NVIDIA driver" not in verdict.detail and "NVML answers, driver 565.57.01" in verdict.detail
    # a platform expecting neither (a PCIe card) still skips, with the driver named, never denied
    skipped = run_live(get(probe), {})
    assert skipped.outcome == "skipped" and "no NVIDIA driver" not in skipped.reason


def test_a_local_run_without_nvml_asks_cuda_and_its_versions_check_does_not_fail_the_count(monkeypatch, tmp_path):
    """NVML's library missing (a container given the GPUs and their compute capability alone) while CUDA sees 8
    and sysfs shows 8: was gloo ranks and a hardware FAIL `GPU count 0` (node excluded, exit 1), the harness's
    view blamed on the node. Now a local run counts with CUDA (NCCL, 8 ranks) and `versions` does not judge
    what NVML could not read, naming why."""
    import torch

    from clustercheck.judging.platform import layout
    from clustercheck.probes import versions
    from clustercheck.run.launch import LocalLauncher
    from clustercheck.run.nodefacts import node_facts

    node = {**h100_node(), "init_error": LIBRARY_NOT_FOUND}
    in_process(monkeypatch, node)
    pci = pci_bus(tmp_path / "pci", [g["bus_id"] for g in node["gpus"]])
    facts = read_facts(pci_root=pci)
    assert facts.gpu_count == 0 and len(facts.pci_gpus) == 8 and facts.torch_gpus is None
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 8)  # the CUDA runtime's answer (no GPU on this machine)
    launcher = LocalLauncher()
    nodes, pool = node_facts(launcher, list(launcher.nodes), None, facts)  # type: ignore[arg-type]
    assert pool is None and [f.torch_gpus for f in nodes.values()] == [8]
    assert layout("auto", None, nodes) == ("nccl", 8)
    assert detect(THRESHOLDS, next(iter(nodes.values()))).name == "h100-sxm-8x"

    verdicts = {v.what: v for v in versions.judge(versions.collect(pci), {"gpu_count": 8, "gpu_model": "H100",
                                                                      "driver_min": "535.0"})}
    for what in ("GPU count", "GPU model", "driver version"):
        assert not verdicts[what].judged, verdicts[what]
        assert "NVML unavailable: NVML_ERROR_LIBRARY_NOT_FOUND" in verdicts[what].detail
    assert "8 NVIDIA GPU(s) on the PCI bus" in verdicts["GPU count"].detail
    assert not [v for v in verdicts.values() if v.judged and not v.passed]
