"""Every probe that judges the GPUs of one `nvidia-smi -q` report counts them against the platform's
`gpu_count` (nvsmi.listed, as nvlink and fabric do): a GPU missing from the capture is named, never silence."""

from __future__ import annotations

import pytest

from clustercheck.cli import main
from clustercheck.exitcodes import Exit
from clustercheck.probes import nvsmi
from clustercheck.probes.base import ProbeParseError, ProbeVerdict
from evidence import LENT, text

Q = "nvidia-smi-q"
NVSIM = "h100-sxm5-8gpu-565.57-nvidia-smi-a-nvsim.txt"             # 8 healthy H100 SXM
VM = LENT / "h100-sxm-vm-580-nvidia-smi-q.txt"                     # one H100 SXM alone in a VM
ONE_OF_EIGHT = "GPU 1, 2, 3, 4, 5, 6, 7 not listed, their {} not judged; 1 GPU(s) listed, the platform has 8"


def _first(n: int) -> str:
    """The 8-GPU capture with its first n GPU sections and the header left as it was."""
    head, *sections = text(Q, NVSIM).split("\nGPU ")
    return "\nGPU ".join([head, *sections[:n]])


def test_the_shared_rule_names_the_gpus_the_report_lacks_and_says_nothing_without_a_count():
    eight, one = nvsmi.parse(text(Q, NVSIM)), nvsmi.parse(VM.read_text())
    assert nvsmi.listed(eight, {}, "x") == [] and nvsmi.listed(one, {"gpu_count": True}, "x") == []
    assert nvsmi.listed(eight, {"gpu_count": 8}, "x") == [
        ProbeVerdict("node", "GPUs listed", True, "8 GPU(s) listed, as the platform has", 8, 8)]
    assert nvsmi.listed(one, {"gpu_count": 8}, "ECC counters") == [
        ProbeVerdict("node", "GPUs listed", False, ONE_OF_EIGHT.format("ECC counters"), 1, 8)]
    (many,) = nvsmi.listed(one, {"gpu_count": 72}, "x")
    assert many.detail.startswith("GPU 1, 2, 3, 4, 5, 6, 7, 8 and more not listed") and not many.passed
    (more,) = nvsmi.listed(eight, {"gpu_count": 4}, "x")
    assert not more.passed and more.detail == "8 GPU(s) listed, the platform has 4"


@pytest.mark.parametrize(("probe", "module", "what"), [("ecc", "ecc", "ECC counters"),
                                                   ("throttle", "throttle", "clocks and temperature"),
                                                   ("pcie-link", "pcie_link", "PCIe links")])
def test_a_per_gpu_probe_names_the_gpus_the_capture_lacks_against_the_platform(capsys, probe: str, module: str,
                                                                              what: str) -> None:
    """One healthy GPU of an 8-GPU platform passed as the node (its ECC, clocks and temperature, PCIe links),
    the 7 others unnamed."""
    import importlib

    judged = importlib.import_module(f"clustercheck.probes.{module}")
    assert main(["probe", probe, "--input", str(VM), "--platform", "h100-sxm-8x"]) == Exit.FAILED
    assert f"FAIL node: GPUs listed: {ONE_OF_EIGHT.format(what)}" in capsys.readouterr().out
    assert main(["probe", probe, "--input", str(VM)]) == Exit.PASSED      # without a platform, as before
    assert "GPUs listed" not in capsys.readouterr().out
    verdicts = judged.judge(judged.parse(text(Q, NVSIM)), {"gpu_count": 8})
    assert all(v.passed for v in verdicts) and verdicts[-1].line() == "node: GPUs listed: 8 GPU(s) listed, as " \
        "the platform has"
    (listed,) = [v for v in judged.judge(judged.parse(_first(6)), {"gpu_count": 8}) if v.what == "GPUs listed"]
    assert not listed.passed and listed.detail.startswith(f"GPU 6, 7 not listed, their {what} not judged")


def test_pcie_link_a_gpu_whose_link_does_not_read_is_not_judged_never_left_out():
    """A GPU whose Link Width/Current read N/A (or whose GPU Link Info was cut) was dropped from the
    verdicts while the 7 others passed: the node passed with one GPU's link unjudged and unnamed."""
    import re

    from clustercheck.probes import pcie_link

    head, *sections = text(Q, NVSIM).split("\nGPU ")
    sections[3] = re.sub(r"(Link Width\n\s+Max\s+: 16x\n\s+Current\s+: )16x", r"\1N/A", sections[3])
    verdicts = pcie_link.judge(pcie_link.parse("\nGPU ".join([head, *sections])), {"gpu_count": 8})
    (gpu3,) = [v for v in verdicts if v.subject.startswith("GPU3 ")]
    assert not gpu3.judged and "Link Width/Current = 'N/A'" in gpu3.detail
    assert [v.subject[:4] for v in verdicts if v.subject != "node"] == [
        f"GPU{i}" for i in range(8)]
    # no GPU's link section at all is still no pcie-link input
    cut = re.sub(r"\n {8}GPU Link Info\n(?: {12,}.*\n)+", "\n", text(Q, NVSIM))
    with pytest.raises(ProbeParseError, match="GPU Link Info"):
        pcie_link.parse(cut)
