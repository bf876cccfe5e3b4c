"""pcie-link counts the GPUs sysfs (live) and `lspci -vvv` list against the platform's `gpu_count`, as it
counts an `nvidia-smi -q` report's (nvsmi.listed): a node of 8 GPUs whose sysfs or lspci showed 7 passed on
the 7 links read. A GPU is what detection counts (fabric/pcibus.py, one rule for both): an NVIDIA (0x10de),
AMD (0x1002) or Habana (0x1da3) device of display or accelerator class, not an SR-IOV virtual function; a
BMC's ASPEED VGA, an NVSwitch (a bridge) and the GPUs' audio functions are not.

Real captures: the ASUS ESC8000A-E12 (host coyote2: lspci -tv and lspci -vvv of the same machine, 4 RTX 6000
Ada, tests/fixtures/hosts/), laid out as the kernel lays out sysfs by tests/sysfs_tree.py."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

from clustercheck.fabric import pcibus
from clustercheck.probes import pcie_link, run_live

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sysfs_tree import Dev, Tree, from_lspci, strip_source  # noqa: E402

ASUS = Path(__file__).parent / "fixtures" / "hosts" / "asus-esc8000a-e12"
TV, VVV = (strip_source((ASUS / name).read_text()) for name in ("lspci-tv.txt", "lspci-vvv.txt"))
ASPEED = "0000:75:00.0"  # "ASPEED Technology, Inc. ASPEED Graphics Family" in the lspci -tv capture
HEADER = re.compile(r"^[0-9a-f]{2}:[0-9a-f]{2}\.[0-7] ", re.M)


def sysfs(tmp_path: Path, gpus: int) -> Path:
    """The ASUS node's sysfs with `gpus` NVIDIA GPUs: its 4 captured GPUs, and for more the capture's first
    GPU's files again on buses the host leaves empty (f1.., under the last root complex), as an 8-GPU node
    of the same board would list them. The BMC's VGA gets the class and vendor the kernel gives an ASPEED
    AST2x00 (0x030000, 0x1a03; lspci -tv names it, its -vvv was not captured) and a Gen2 x1 link."""
    tree = from_lspci(TV, VVV)
    real = sorted(bdf for bdf, d in tree.devices.items() if d.files.get("vendor") == "0x10de"
                  and d.files.get("class") == "0x030000")
    assert len(real) == 4, real
    first = tree.devices[real[0]]
    for n in range(max(0, gpus - 4)):
        bdf = f"0000:{0xf1 + n:02x}:00.0"
        tree.devices[bdf] = Dev(bdf, first.name, tree.chain(real[-1])[0], files=dict(first.files))
    for bdf in real[gpus:]:
        del tree.devices[bdf]
    tree.devices[ASPEED].files.update({"class": "0x030000", "vendor": "0x1a03", "device": "0x2000",
                                       "current_link_speed": "5.0 GT/s PCIe", "max_link_speed": "5.0 GT/s PCIe",
                                       "current_link_width": "1", "max_link_width": "1"})
    return tree.write(tmp_path / "sys") / "bus" / "pci" / "devices"


def live(monkeypatch: pytest.MonkeyPatch, root: Path, expect: dict[str, object]) -> dict[str, tuple[bool, str]]:
    monkeypatch.setattr(pcie_link, "SYSFS", root)
    outcome = run_live(pcie_link.PROBE, expect)
    return {v.subject: (v.passed, v.detail) for v in outcome.verdicts}


def test_sysfs_with_7_gpus_and_a_bmc_vga_fails_a_platform_of_8_naming_how_many(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    found = live(monkeypatch, sysfs(tmp_path, 7), {"gpu_count": 8, "pcie_width": 16})
    assert found["node"] == (False, "1 GPU(s) not listed by /sys/bus/pci (which ones it cannot say: it numbers "
                                    "no GPUs), their PCIe links not judged; 7 GPU(s) listed, the platform has 8")
    # the BMC's VGA is judged as the device it is (x1 of x1), never against the GPUs' platform width
    assert found[ASPEED] == (True, "Gen2 x1 of Gen2 x1 (class 0300 [1a03:2000])")


def test_sysfs_with_8_gpus_and_a_bmc_vga_lists_the_platforms_8(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    found = live(monkeypatch, sysfs(tmp_path, 8), {"gpu_count": 8})
    assert found["node"] == (True, "8 GPU(s) listed, as the platform has")
    assert len([s for s, (_, detail) in found.items() if "[10de:" in detail]) == 8
    assert "GPUs listed" not in str(live(monkeypatch, sysfs(tmp_path / "no-count", 8), {}))  # no count, as before


def test_lspci_with_one_gpu_section_cut_fails_against_the_hosts_gpu_count() -> None:
    """The host's lspci -tv lists 4 NVIDIA GPUs; its lspci -vvv without one GPU's section passed the node."""
    want = len([line for line in TV.splitlines() if "NVIDIA Corporation AD102GL" in line])
    assert want == 4
    whole = pcie_link.judge(pcie_link.parse(VVV), {"gpu_count": want})
    assert [(v.passed, v.detail) for v in whole if v.subject == "node"] == [
        (True, "4 GPU(s) listed, as the platform has")]
    starts = [m.start() for m in HEADER.finditer(VVV)]
    gpu = next(i for i, s in enumerate(starts) if VVV.startswith("41:00.0 VGA", s))
    cut = VVV[:starts[gpu]] + VVV[starts[gpu + 1]:]
    verdicts = pcie_link.judge(pcie_link.parse(cut), {"gpu_count": want})
    assert [(v.passed, v.detail) for v in verdicts if v.subject == "node"] == [
        (False, "1 GPU(s) not listed by lspci (which ones it cannot say: it numbers no GPUs), their PCIe links "
                "not judged; 3 GPU(s) listed, the platform has 4")]
    assert "0000:41:00.0" not in {v.subject for v in verdicts}


def test_a_gpu_device_line_of_lspci_without_its_link_lines_is_not_judged() -> None:
    starts = [m.start() for m in HEADER.finditer(VVV)] + [len(VVV)]
    gpu = next(i for i, s in enumerate(starts) if VVV.startswith("41:00.0 VGA", s))
    section = VVV[starts[gpu]:starts[gpu + 1]]
    bare = "\n".join(line for line in section.split("\n") if "LnkCap:" not in line and "LnkSta:" not in line)
    verdicts = pcie_link.judge(pcie_link.parse(VVV[:starts[gpu]] + bare + VVV[starts[gpu + 1]:]), {"gpu_count": 4})
    (link,) = [v for v in verdicts if v.subject == "0000:41:00.0"]
    assert not link.judged and "no LnkCap/LnkSta under its device line" in link.detail


@pytest.mark.parametrize(("line", "gpu"), [
    # lspci -nn device lines as public captures print them
    ("3D controller [0302]: NVIDIA Corporation GH100 [H100 SXM5 80GB] [10de:2330] (rev a1)", True),
    ("Processing accelerators [1200]: Advanced Micro Devices, Inc. [AMD/ATI] Aqua Vanjaram [Instinct MI300X] "
     "[1002:74a1]", True),
    ("Bridge [0680]: NVIDIA Corporation GH100 [H100 NVSwitch] [10de:22a3] (rev a1)", False),
    ("VGA compatible controller [0300]: ASPEED Technology, Inc. ASPEED Graphics Family [1a03:2000] (rev 52)", False),
    ("PCI bridge [0604]: Advanced Micro Devices, Inc. [AMD] Starship/Matisse GPP Bridge [1022:1483] "
     "(prog-if 00 [Normal decode])", False),
    # lspci -vvv (names only) and lspci -n (numbers only)
    ("VGA compatible controller: NVIDIA Corporation AD102GL [RTX 6000 Ada Generation] (rev a1) "
     "(prog-if 00 [VGA controller])", True),
    ("Processing accelerators: Advanced Micro Devices, Inc. [AMD/ATI] Aqua Vanjaram [Instinct MI300X]", True),
    ("Audio device: NVIDIA Corporation AD102 High Definition Audio Controller (rev a1)", False),
    ("VGA compatible controller: ASPEED Technology, Inc. ASPEED Graphics Family (rev 52)", False),
    ("Bridge: NVIDIA Corporation Device 22a3 (rev a1)", False),
    ("0302: 10de:2330 (rev a1)", True),
    # Habana Gaudi2 (1da3:1020, HabanaAI hl-thunk include/specs/common/pci_ids.h; pci.ids "Habana Labs Ltd.")
    ("Processing accelerators [1200]: Habana Labs Ltd. Device [1da3:1020] (rev 01)", True),
    ("Processing accelerators: Habana Labs Ltd. Device 1020 (rev 01)", True),
    ("1200: 1da3:1020 (rev 01)", True),
    ("0680: 10de:22a3 (rev a1)", False),
])
def test_what_lspci_calls_a_gpu(line: str, gpu: bool) -> None:
    assert pcie_link._is_gpu(line) is gpu


def bare_node(tmp_path: Path, keep_gpus: bool = False) -> Path:
    """The ASUS node's sysfs with its 2 ConnectX-7 and (unless `keep_gpus`) its 4 GPUs gone from the bus:
    bridges, NVMe and the rest remain, and no GPU or NIC link is left to read. With `keep_gpus` the GPUs
    stay listed (vendor, class) without any link attribute, as on a conventional PCI bus."""
    tree = from_lspci(TV, VVV)
    for bdf, d in list(tree.devices.items()):
        gpu = d.files.get("vendor") == "0x10de" and d.files.get("class") == "0x030000"
        if d.files.get("class", "").startswith("0x02") or (gpu and not keep_gpus):
            del tree.devices[bdf]
        elif gpu:
            for name in ("current_link_speed", "max_link_speed", "current_link_width", "max_link_width"):
                del d.files[name]
    return tree.write(tmp_path / "sys") / "bus" / "pci" / "devices"


def test_sysfs_listing_no_gpu_fails_a_platform_of_4_never_skips(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """collect() raised ProbeSkip before the count: a node whose 4 GPUs fell off the bus read as skipped."""
    monkeypatch.setattr(pcie_link, "SYSFS", bare_node(tmp_path))
    outcome = run_live(pcie_link.PROBE, {"gpu_count": 4})
    assert outcome.outcome == "failed", outcome
    assert [(v.subject, v.passed, v.detail) for v in outcome.verdicts] == [
        ("node", False, "4 GPU(s) not listed by /sys/bus/pci (which ones it cannot say: it numbers no GPUs), their "
                        "PCIe links not judged; 0 GPU(s) listed, the platform has 4")]
    # where the platform expects no GPU (no gpu_count, or the cpu profile's 0), nothing to judge: a skip, as before
    for expect in ({}, {"gpu_count": 0}):
        skipped = run_live(pcie_link.PROBE, expect)
        assert (skipped.outcome, skipped.reason) == (
            "skipped", "no GPU or NIC with a PCIe link in /sys/bus/pci (virtual devices only)")


def test_no_sys_bus_pci_leaves_the_platforms_gpus_not_judged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pcie_link, "SYSFS", tmp_path / "absent" / "bus" / "pci" / "devices")
    outcome = run_live(pcie_link.PROBE, {"gpu_count": 8})
    assert outcome.outcome == "not judged", outcome
    assert [(v.subject, v.judged, v.detail) for v in outcome.verdicts] == [
        ("node", False, "not judged: no /sys/bus/pci on this machine: the platform's 8 GPU(s) could not be listed, "
                        "nor their PCIe links read")]
    skipped = run_live(pcie_link.PROBE, {})
    assert (skipped.outcome, skipped.reason) == ("skipped", "no /sys/bus/pci on this machine")


def test_gpus_listed_without_link_attributes_are_not_judged_never_passed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Counted as listed, a GPU without link attributes must not let the count alone pass the node."""
    monkeypatch.setattr(pcie_link, "SYSFS", bare_node(tmp_path, keep_gpus=True))
    outcome = run_live(pcie_link.PROBE, {"gpu_count": 4})
    assert outcome.outcome == "error", outcome  # the count judged, the links not
    gpus = [v for v in outcome.verdicts if v.subject != "node"]
    assert len(gpus) == 4 and all(not v.judged and "current_link_speed, max_link_speed, current_link_width, "
                                  "max_link_width could not be read" in v.detail for v in gpus)
    assert [(v.passed, v.detail) for v in outcome.verdicts if v.subject == "node"] == [
        (True, "4 GPU(s) listed, as the platform has")]


GAUDI2 = {"class": "0x120000", "vendor": "0x1da3", "device": "0x1020",  # Gaudi2's PCIe host link: Gen4 x16
          "current_link_speed": "16.0 GT/s PCIe", "max_link_speed": "16.0 GT/s PCIe",
          "current_link_width": "16", "max_link_width": "16"}


def bus(tmp_path: Path, functions: dict[str, dict[str, str]], vfs: dict[str, str] | None = None) -> Path:
    """A sysfs of `functions` (bus id: files), those of a bus behind one root port, and SR-IOV virtual
    functions (`vfs`, bus id: its physical function) with the `physfn` link the kernel gives them."""
    tree = Tree()
    for bdf, files in functions.items():
        port = f"0000:00:{int(bdf[5:7], 16) % 32:02x}.0"
        tree.devices.setdefault(port, Dev(port, "root port", "pci0000:00", bdf[5:7], {"class": "0x060400"}))
        tree.devices[bdf] = Dev(bdf, "", port, files=dict(files))
    root = tree.write(tmp_path / "sys") / "bus" / "pci" / "devices"
    for vf, pf in (vfs or {}).items():
        os.symlink(os.path.relpath((root / pf).resolve(), (root / vf).resolve()), root / vf / "physfn")
    return root


def test_a_gaudi_node_lists_the_8_accelerators_detection_counts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Detection counted Habana's accelerators, pcie-link did not: 8 Gaudi2 links judged, then the node
    failed with `8 GPU(s) not listed ..., their PCIe links not judged; 0 GPU(s) listed, the platform has 8`."""
    root = bus(tmp_path, {f"0000:{0x10 + n:02x}:00.0": GAUDI2 for n in range(8)})
    assert len(pcibus.pci_accelerators(root)) == 8
    found = live(monkeypatch, root, {"gpu_count": 8, "pcie_width": 16})
    assert found.pop("node") == (True, "8 GPU(s) listed, as the platform has")
    assert sorted(found) == [f"0000:{0x10 + n:02x}:00.0" for n in range(8)]
    assert set(found.values()) == {(True, "Gen4 x16 of Gen4 x16 (class 1200 [1da3:1020])")}


def test_an_sriov_virtual_function_is_no_gpu_to_detection_nor_pcie_link(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A host with SR-IOV on: detection counted each VF as an accelerator (1 GPU read as 3), pcie-link did not.
    A VF is a slice of its physical function, never a GPU of its own: both count the physical one alone."""
    a100 = {**GAUDI2, "class": "0x030200", "vendor": "0x10de", "device": "0x20f1"}
    vf = {**a100, "current_link_speed": "Unknown", "max_link_speed": "Unknown",
          "current_link_width": "0", "max_link_width": "0"}
    root = bus(tmp_path, {"0000:17:00.0": a100, "0000:17:00.4": vf, "0000:17:00.5": vf},
               vfs={"0000:17:00.4": "0000:17:00.0", "0000:17:00.5": "0000:17:00.0"})
    assert pcibus.pci_accelerators(root) == (0x20F1,)
    found = live(monkeypatch, root, {"gpu_count": 1})
    assert found["node"] == (True, "1 GPU(s) listed, as the platform has")
    # without its physfn link (a VF passed into a VM) it is that machine's GPU, to both alike
    os.unlink(root / "0000:17:00.4" / "physfn")
    assert len(pcibus.pci_accelerators(root)) == 2
    assert live(monkeypatch, root, {"gpu_count": 2})["node"] == (True, "2 GPU(s) listed, as the platform has")
