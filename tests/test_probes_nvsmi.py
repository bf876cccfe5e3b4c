"""pcie-link, ecc, throttle and versions over every nvidia-smi -q fixture, plus lspci LnkCap/LnkSta."""

from __future__ import annotations

import pytest

from clustercheck.probes import ecc, nvsmi, pcie_link, throttle, versions
from clustercheck.probes.base import ProbeParseError
from evidence import files, ids, text

Q = "nvidia-smi-q"
FIXTURES = files(Q)
H100 = "h100-80gb-hbm3-nvidia-smi-a-della.txt"
V100 = "v100-sxm2-power9-nvidia-smi-q-traverse-partial.txt"
GPUS = {"a10g-535.247-nvidia-smi-q-sram-parity-secded-layout-dcgm232": 1,
        "azure-8gpu-nvidia-smi-q-retired-pages-excerpt": 8, "gh200-480gb-nvidia-smi-a-della-gh": 1,
        "h100-80gb-hbm3-nvidia-smi-a-della": 1, "h100-sxm5-8gpu-565.57-nvidia-smi-a-nvsim": 8,
        "v100-sxm2-power9-nvidia-smi-q-traverse-partial": 1}


CUT = {"v100-sxm2-power9-nvidia-smi-q-traverse-partial"}   # header: Attached GPUs 4; one GPU section kept


@pytest.mark.parametrize("path", FIXTURES, ids=ids(FIXTURES))
def test_every_fixture_parses_and_ecc_is_clean(path):
    report = nvsmi.parse(path.read_text())
    assert len(report.gpus) == GPUS[path.stem]
    verdicts = ecc.judge(ecc.parse(path.read_text()), {})
    gpus = [v for v in verdicts if v.subject != "node"]
    assert len(gpus) == GPUS[path.stem] and all(v.passed for v in gpus)
    node = [v for v in verdicts if v.subject == "node"]
    if path.stem in CUT:  # the three GPU sections the excerpt left out are not judged clean: the node fails
        assert [v.passed for v in node] == [False] and "Attached GPUs: 4 and the capture has 1 GPU section" \
            in node[0].detail
    else:
        assert node == []


@pytest.mark.parametrize("path", FIXTURES, ids=ids(FIXTURES))
def test_versions_from_every_fixture(path):
    inv = versions.parse(path.read_text())
    assert inv.driver and inv.cuda and inv.gpu_count == GPUS[path.stem]  # the sections read, not the header


def test_pcie_link_v100_at_x2_of_x16_fails_and_h100_passes():
    node, v100 = pcie_link.judge(pcie_link.parse(text(Q, V100)), {})
    assert not v100.passed and "width x2 below x16" in v100.detail
    assert node.subject == "node" and not node.passed and "Attached GPUs: 4" in node.detail  # an excerpt
    (h100,) = pcie_link.judge(pcie_link.parse(text(Q, H100)), {"pcie_gen": 5, "pcie_width": 16})
    assert h100.passed and h100.measured == "Gen5 x16"


def test_pcie_link_platform_expectation_on_max():
    (gh,) = pcie_link.judge(pcie_link.parse(text(Q, "gh200-480gb-nvidia-smi-a-della-gh.txt")), {"pcie_width": 16})
    assert not gh.passed and "max width x1 below the platform's x16" in gh.detail


def test_pcie_link_from_lspci_downgraded_root_port_fails():
    links = pcie_link.parse(text("lspci-acs", "supermicro-as4124gs-tnr-root-ports-acs-srcvalid-only-and-off.txt"))
    assert [(v.subject, v.passed) for v in pcie_link.judge(links, {})] == [("0000:00:01.1", False), ("0000:00:07.1", True)]
    cx7 = pcie_link.judge(pcie_link.parse(text("lspci-acs", "cx7-endpoint-21-00.0-acs-all-minus.txt")), {})
    assert [(v.passed, v.measured) for v in cx7] == [(True, "Gen5 x16")]
    plx = pcie_link.judge(pcie_link.parse(text("lspci-acs", "plx-pex8749-downstream-ports-acs-redirect-enabled-n1sdp.txt")), {})
    assert all(v.passed and "no link trained" in v.detail for v in plx)


def test_pcie_link_excerpt_without_link_info_is_a_parse_error():
    with pytest.raises(ProbeParseError):
        pcie_link.parse(text(Q, "azure-8gpu-nvidia-smi-q-retired-pages-excerpt.txt"))


@pytest.mark.parametrize("old, new, what", [
    ("        Pending                           : No\n        Remapping", "        Pending                           : Yes\n        Remapping", "row remap is pending"),
    ("Remapping Failure Occurred        : No", "Remapping Failure Occurred        : Yes", "remapping failure"),
    ("            SRAM Uncorrectable            : 0\n            DRAM Correctable", "            SRAM Uncorrectable            : 2\n            DRAM Correctable", "volatile SRAM Uncorrectable = 2"),
])
def test_ecc_failures_from_modified_h100_text(old, new, what):
    raw = text(Q, H100)
    assert old in raw
    (verdict,) = ecc.judge(ecc.parse(raw.replace(old, new, 1)), {})
    assert not verdict.passed and what in verdict.detail


def test_ecc_pending_retired_page_on_one_gpu_of_eight():
    raw = text(Q, "azure-8gpu-nvidia-smi-q-retired-pages-excerpt.txt")
    head, sep, tail = raw.partition("GPU 00000005:00:00.0")
    raw = head + sep + tail.replace("Pending Page Blacklist            : No", "Pending Page Blacklist            : Yes", 1)
    failed = [v.subject for v in ecc.judge(ecc.parse(raw), {}) if not v.passed]
    assert failed == ["GPU4 (0005:00:00.0)"]


def test_throttle_and_temperature():
    report = throttle.parse(text(Q, H100))
    assert all(v.passed for v in throttle.judge(report, {}))
    hot = text(Q, H100).replace("HW Thermal Slowdown           : Not Active", "HW Thermal Slowdown           : Active")
    failed = [v for v in throttle.judge(throttle.parse(hot), {}) if not v.passed]
    assert [v.what for v in failed] == ["clock throttling"] and "HW Thermal Slowdown" in failed[0].detail
    cold_limit = [v for v in throttle.judge(report, {"gpu_temp_max_c": 30}) if not v.passed]
    assert [v.what for v in cold_limit] == ["temperature"]


def test_versions_minimums_and_gpu_count():
    inv = versions.parse(text(Q, H100) + "\ntorch: 2.3.1\nnccl: 2.20.5\n")
    assert (inv.torch, inv.nccl, inv.gpu_models) == ("2.3.1", "2.20.5", ("NVIDIA H100 80GB HBM3",))
    verdicts = versions.judge(inv, {"gpu_count": 8, "driver_min": "550.54", "nccl_min": "2.18", "gpu_model": "H100"})
    assert {v.what: v.passed for v in verdicts} == {"GPU count": False, "GPU model": True, "driver version": False,
                                                    "nccl version": True, "inventory": True}


def test_not_nvidia_smi_is_a_parse_error():
    for probe in (ecc, throttle, versions):
        with pytest.raises(ProbeParseError):
            probe.parse("hello world\n")
