"""Every amd-smi / rocm-smi capture in tests/fixtures/tool-outputs/{amd-smi,rocm-smi} parsed to its key facts,
one by one (GPU count, link type per pair, ECC counts, PCIe, xGMI ports, temperature), and judged against the
MI300X profile's expectations; `clustercheck probe topo --input` on rocm-smi --showtopo and amd-smi topology."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from clustercheck.probes import amd_smi, topo
from clustercheck.probes.base import ProbeParseError, outcome_of
from helpers import load_named
from evidence import TOOLS, files

REPO = Path(__file__).resolve().parent.parent
MI300X = load_named(REPO / "thresholds", "mi300x-8x").expect


def amd(name: str) -> str:
    return (TOOLS / "amd-smi" / name).read_text(encoding="utf-8")


def rocm(name: str) -> str:
    return (TOOLS / "rocm-smi" / name).read_text(encoding="utf-8")


def test_every_capture_has_a_source_and_is_covered_below():
    covered = set(TOPOLOGY) | set(REPORTS)
    for f in files("amd-smi") + files("rocm-smi"):
        first, second = f.read_text(encoding="utf-8").splitlines()[:2]
        assert first.startswith("# source: https://github.com/") and second == "", f.name
        assert f"{f.parent.name}/{f.name}" in covered, f"{f.name} has no test"


# -- topology: link type per pair ----------------------------------------------------------------------
# file -> (GPUs, their bus ids or (), the one link type of every pair, NUMA node per GPU or ())
TOPOLOGY = {
    "amd-smi/topology-8gpu-xgmi-changelog-6.1.txt": (8, ("0000:0c:00.0", "0000:22:00.0", "0000:38:00.0",
                                                         "0000:5c:00.0", "0000:9f:00.0", "0000:af:00.0",
                                                         "0000:bf:00.0", "0000:df:00.0"), "XGMI", ()),
    "amd-smi/topology-2gpu-pcie-rx7900xtx-rocm-6074.txt": (2, ("0000:03:00.0", "0000:0c:00.0"), "PCIE", ()),
    "rocm-smi/showtopo-8gpu-xgmi-mi308x-ms-swift.txt": (8, (), "XGMI", ("0",) * 4 + ("1",) * 4),
    "rocm-smi/showtopo-4gpu-pcie-rocm-smi-lib-108.txt": (4, (), "PCIE", ()),
}


@pytest.mark.parametrize("name", sorted(TOPOLOGY))
def test_topology_capture_gives_the_link_type_of_every_pair(name):
    gpus, bus, level, numa = TOPOLOGY[name]
    m = topo.parse_any((TOOLS / name).read_text(encoding="utf-8"))
    assert m.gpus == tuple(f"GPU{i}" for i in range(gpus))
    assert len(m.links) == gpus * (gpus - 1) and {lv for _, _, lv in m.links} == {level}
    assert m.level("GPU0", f"GPU{gpus - 1}") == m.level(f"GPU{gpus - 1}", "GPU0") == level
    assert tuple(b for _, b in m.bus_ids) == bus
    assert tuple(n for _, n in m.numa) == numa


@pytest.mark.parametrize("name, passed", [
    ("amd-smi/topology-8gpu-xgmi-changelog-6.1.txt", True),
    ("rocm-smi/showtopo-8gpu-xgmi-mi308x-ms-swift.txt", True),
    ("amd-smi/topology-2gpu-pcie-rx7900xtx-rocm-6074.txt", False),
    ("rocm-smi/showtopo-4gpu-pcie-rocm-smi-lib-108.txt", False),
])
def test_topology_judged_against_the_mi300x_xgmi_expectation(name, passed):
    verdicts = topo.judge(topo.parse_any((TOOLS / name).read_text(encoding="utf-8")), MI300X)
    assert all(v.passed for v in verdicts) is passed
    if not passed:
        pcie = [v for v in verdicts if v.what == "GPU link level" and not v.passed]
        gpus = TOPOLOGY[name][0]
        assert len(pcie) == gpus * (gpus - 1) // 2 and all(v.measured == "PCIE" for v in pcie)
    if "amd-smi/" in name and not passed:  # amd-smi names GPUs by bus id: the verdict carries it
        assert any(v.subject == "GPU0 (0000:03:00.0)-GPU1 (0000:0c:00.0)" for v in verdicts)


def test_a_row_with_a_missing_cell_is_refused_with_its_line():
    text = rocm("showtopo-8gpu-xgmi-mi308x-ms-swift.txt").replace("GPU3   XGMI         XGMI         XGMI         0  ",
                                                                 "GPU3   XGMI         XGMI         0  ")
    with pytest.raises(ProbeParseError, match=r"line \d+: row GPU3 has 7 cells for 8 GPUs"):
        topo.parse_any(text)


@pytest.mark.parametrize("name, code", [
    ("rocm-smi/showtopo-8gpu-xgmi-mi308x-ms-swift.txt", 0),
    ("rocm-smi/showtopo-4gpu-pcie-rocm-smi-lib-108.txt", 1),
    ("amd-smi/topology-8gpu-xgmi-changelog-6.1.txt", 0),
])
def test_probe_topo_input_accepts_rocm_smi_showtopo(name, code):
    out = subprocess.run([sys.executable, "-m", "clustercheck", "probe", "topo", "--input", str(TOOLS / name),
                          "--platform", "mi300x-8x"], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert out.returncode == code, out.stdout + out.stderr
    if code:
        assert "FAIL GPU0-GPU1: GPU link level: PCIE, expected XGMI" in out.stdout


# -- amd-smi list/static/metric/xgmi and rocm-smi Concise Info ------------------------------------------
# file -> facts per GPU as (index, bus id, device id, ECC counters, PCIe width/speed, temperature, xGMI link, ports)
REPORTS = {
    "amd-smi/list-2gpu-kfd-changelog-6.3.txt": dict(gpus=2, bus=["0000:23:00.0", "0000:26:00.0"]),
    "amd-smi/static-asic-mi308x-changelog-6.3.txt": dict(gpus=1, device=[0x74A2], model=["MI308X"]),
    "amd-smi/metric-ecc-ecc-blocks-changelog.txt": dict(gpus=1, ecc={"TOTAL_CORRECTABLE_COUNT": "0",
                                                                    "TOTAL_UNCORRECTABLE_COUNT": "0",
                                                                    "TOTAL_DEFERRED_COUNT": "0",
                                                                    "UMC/UNCORRECTABLE_COUNT": "0",
                                                                    "SDMA/DEFERRED_COUNT": "0"}, counters=11),
    "amd-smi/metric-ecc-blocks-7-blocks-changelog.txt": dict(gpus=1, ecc={"XGMI_WAFL/UNCORRECTABLE_COUNT": "0",
                                                                         "PCIE_BIF/CORRECTABLE_COUNT": "0"},
                                                             counters=21),
    "amd-smi/metric-pcie-2gpu-changelog-6.3.txt": dict(gpus=2, pcie=("16", "32 GT/s")),
    "amd-smi/xgmi-link-metric-8gpu-changelog.txt": dict(gpus=8, bus=["0000:0c:00.0", "0000:22:00.0", "0000:38:00.0",
                                                                     "0000:5c:00.0", "0000:9f:00.0", "0000:af:00.0",
                                                                     "0000:bf:00.0", "0000:df:00.0"], link="XGMI"),
    "amd-smi/xgmi-port-status-2gpu-no-xgmi-rocm-6074.txt": dict(gpus=2, bus=["0000:03:00.0", "0000:0c:00.0"],
                                                                link="N/A", ports="X X X X X X X X"),
    "rocm-smi/concise-8xmi300x-ml-engineering.txt": dict(gpus=8, device=[0x74A1] * 8,
                                                          temps=[45.0, 41.0, 47.0, 45.0, 45.0, 43.0, 45.0, 43.0]),
    "rocm-smi/concise-8xmi308x-ms-swift.txt": dict(gpus=8, device=[0x74A2] * 8,
                                                    temps=[43.0, 41.0, 45.0, 41.0, 44.0, 42.0, 45.0, 43.0]),
}


@pytest.mark.parametrize("name", sorted(REPORTS))
def test_capture_parsed_to_its_key_facts(name):
    want = REPORTS[name]
    r = amd_smi.parse((TOOLS / name).read_text(encoding="utf-8"))
    assert [g.index for g in r.gpus] == list(range(want["gpus"]))
    if "bus" in want:
        assert [g.bus_id for g in r.gpus] == want["bus"]
    if "device" in want:
        assert [g.device_id for g in r.gpus] == want["device"]
    if "model" in want:
        assert [g.model for g in r.gpus] == want["model"]
    if "ecc" in want:
        counters = dict(r.gpus[0].ecc)
        assert len(r.gpus[0].ecc) == want["counters"] and {k: counters[k] for k in want["ecc"]} == want["ecc"]
    if "pcie" in want:
        assert all((g.pcie_width, g.pcie_speed) == want["pcie"] for g in r.gpus)
    if "temps" in want:
        assert [g.temperature_c for g in r.gpus] == want["temps"]
    if "link" in want:
        assert {g.xgmi_link for g in r.gpus} == {want["link"]}
    if "ports" in want:
        assert {g.xgmi_ports for g in r.gpus} == {want["ports"]}


@pytest.mark.parametrize("name, failed", [
    # no GPU list (amd-smi list/static, Concise Info): the platform's GPU count is not judged
    ("amd-smi/metric-ecc-ecc-blocks-changelog.txt", [("node", "GPU count")]),
    ("amd-smi/metric-pcie-2gpu-changelog-6.3.txt", [("node", "GPU count")]),
    ("amd-smi/xgmi-link-metric-8gpu-changelog.txt", [("node", "GPU count")]),
    ("rocm-smi/concise-8xmi300x-ml-engineering.txt", []),
    ("amd-smi/list-2gpu-kfd-changelog-6.3.txt", [("node", "GPU count")]),
    ("amd-smi/xgmi-port-status-2gpu-no-xgmi-rocm-6074.txt",
     [("node", "GPU count")] + [(f"GPU{i} ({b})", w) for i, b in enumerate(["0000:03:00.0", "0000:0c:00.0"])
      for w in ("xGMI ports", "xGMI link type")] + [("GPU0 - GPU1", "xGMI link status")]),
])
def test_judged_against_the_mi300x_profile(name, failed):
    verdicts = amd_smi.judge(amd_smi.parse((TOOLS / name).read_text(encoding="utf-8")), MI300X)
    assert verdicts and [(v.subject, v.what) for v in verdicts if not v.passed] == failed


def test_uncorrectable_and_unreadable_ecc_fail_the_gpu():
    """The real capture with two counters changed here by hand: one uncorrectable error, one N/A."""
    text = amd("metric-ecc-blocks-7-blocks-changelog.txt").splitlines()
    at = [i for i, l in enumerate(text) if "UNCORRECTABLE_COUNT" in l]
    text[at[-1]] = text[at[-1]].replace(": 0", ": 2")  # XGMI_WAFL
    bad = amd_smi.judge(amd_smi.parse("\n".join(text)), {})
    assert [(v.subject, v.passed) for v in bad] == [("GPU0", False)]
    assert "XGMI_WAFL/UNCORRECTABLE_COUNT 2" in bad[0].detail
    text[at[-1]] = text[at[-1]].replace(": 2", ": N/A")
    unread = amd_smi.judge(amd_smi.parse("\n".join(text)), {})
    assert not unread[0].passed and unread[0].detail.startswith("could not be read")


def test_a_down_xgmi_port_fails_naming_it():
    """The 8-port status row of the no-xGMI capture with its ports set to up, one down, by hand."""
    text = amd("xgmi-port-status-2gpu-no-xgmi-rocm-6074.txt").replace(
        "GPU0   0000:03:00.0  X  X  X  X  X  X  X  X", "GPU0   0000:03:00.0  U  U  U  U  U  U  D  U")
    ports = [v for v in amd_smi.judge(amd_smi.parse(text), {}) if v.what == "xGMI ports"]
    assert [(v.subject, v.passed, v.detail) for v in ports][0] == ("GPU0 (0000:03:00.0)", False, "port(s) 6 down")


def test_text_of_another_tool_is_refused():
    with pytest.raises(ProbeParseError, match="amd-smi"):
        amd_smi.parse((TOOLS / "nvidia-smi-topo" / "puget-wrx90-2gpu-phb-2nic.txt").read_text(encoding="utf-8"))


def test_a_device_id_that_is_not_hexadecimal_is_refused_naming_the_gpu():
    """Found by tests/test_fuzz_cli.py: one byte changed in the MI308X capture's DEVICE_ID escaped the parser
    as a ValueError (a traceback from `clustercheck probe amd-smi --input`)."""
    text = (TOOLS / "amd-smi" / "static-asic-mi308x-changelog-6.3.txt").read_text(encoding="utf-8")
    assert "DEVICE_ID: 0x74a2" in text
    assert amd_smi.parse(text).gpus[0].device_id == 0x74A2
    for bad in ("0x74a\ufffd", "0x74aZ", "0x"):  # the fuzzed byte read as U+FFFD, a letter, no digits
        with pytest.raises(ProbeParseError, match=r"^GPU 0: ASIC DEVICE_ID '0x.{0,4}' is not a hexadecimal number$"):
            amd_smi.parse(text.replace("DEVICE_ID: 0x74a2", f"DEVICE_ID: {bad}", 1))


# -- a GPU the input lists without ECC or PCIe output is never silently left out -------------------------
def _without_trailing_ellipsis(name: str) -> str:
    """A real capture less the '...' its source ends a section with (an elision of the CHANGELOG, no amd-smi line)."""
    return "\n".join(l for l in amd(name).splitlines() if l.strip() != "...") + "\n"


def test_a_listed_gpu_missing_from_the_ecc_output_is_not_judged(tmp_path: Path) -> None:
    """`amd-smi list` of 2 GPUs with `metric --ecc --ecc-blocks` of GPU 0 only, both real captures: GPU 1 was
    passed by leaving it out (`probe amd-smi --expect gpu_count=2` exited 0)."""
    text = amd("list-2gpu-kfd-changelog-6.3.txt") + _without_trailing_ellipsis("metric-ecc-ecc-blocks-changelog.txt")
    verdicts = amd_smi.judge(amd_smi.parse(text), {"gpu_count": 2})
    assert [(v.subject, v.what, v.passed, v.judged) for v in verdicts] == [
        ("node", "GPU count", True, True), ("GPU0 (0000:23:00.0)", "ECC", True, True),
        ("GPU1 (0000:26:00.0)", "ECC", False, False)]
    assert verdicts[-1].detail == "not judged: no ECC counters in the amd-smi output"
    path = tmp_path / "list-and-ecc.txt"
    path.write_text(text, encoding="utf-8")
    out = subprocess.run([sys.executable, "-m", "clustercheck", "probe", "amd-smi", "--input", str(path),
                          "--expect", "gpu_count=2"], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert out.returncode == 3, out.stdout + out.stderr
    assert "NOT JUDGED GPU1 (0000:26:00.0): ECC: not judged: no ECC counters in the amd-smi output" in out.stdout


def test_a_gpu_printing_ecc_and_pcie_n_a_is_not_judged_naming_what_it_printed() -> None:
    """The real `metric --ecc --ecc-blocks` capture (GPU 0) and `metric --pcie` capture (2 GPUs) with GPU 1's
    PCIE block replaced here by hand with `ECC: N/A` and `PCIE: N/A`: it got no verdict at all, 4 PASS for GPU 0."""
    pcie = _without_trailing_ellipsis("metric-pcie-2gpu-changelog-6.3.txt")
    text = _without_trailing_ellipsis("metric-ecc-ecc-blocks-changelog.txt") + \
        pcie[:pcie.index("GPU: 1")] + "GPU: 1\n    ECC: N/A\n    PCIE: N/A\n"
    verdicts = amd_smi.judge(amd_smi.parse(text), MI300X)
    gpu1 = [(v.what, v.passed, v.judged, v.detail) for v in verdicts if v.subject == "GPU1"]
    assert gpu1 == [
        ("ECC", False, False, "not judged: no ECC counters in the amd-smi output (it prints ECC: N/A)"),
        ("PCIe link", False, False, "not judged: no PCIe width or speed in the amd-smi output (it prints PCIE: N/A)")]
    assert all(v.passed for v in verdicts if v.subject == "GPU0")


def test_pcie_output_without_a_platform_pcie_expectation_judges_no_pcie() -> None:
    """No pcie_gen/pcie_width expected: a GPU's missing PCIe link is nothing this run judges."""
    pcie = _without_trailing_ellipsis("metric-pcie-2gpu-changelog-6.3.txt")
    text = pcie[:pcie.index("GPU: 1")] + "GPU: 1\n    PCIE: N/A\n"
    assert [v.what for v in amd_smi.judge(amd_smi.parse(text), {})] == ["inventory"]


def test_a_concise_info_row_whose_temperature_reads_n_a_is_not_judged() -> None:
    """The real 8x MI300X Concise Info with GPU 3's `45.0°C` edited here to N/A: the row was dropped whole, so
    GPU 3 had no verdict and the other 7 passed (rc 0 without a gpu_count)."""
    row = "3       [0x74a1 : 0x00]       45.0°C "
    text = rocm("concise-8xmi300x-ml-engineering.txt")
    assert row in text
    r = amd_smi.parse(text.replace(row, "3       [0x74a1 : 0x00]       N/A    "))
    assert [(g.index, g.device_id) for g in r.gpus] == [(i, 0x74A1) for i in range(8)]
    verdicts = amd_smi.judge(r, {"gpu_temp_max_c": 90})
    assert [(v.subject, v.what, v.judged) for v in verdicts if not v.passed] == [("GPU3", "temperature", False)]
    assert verdicts[3].detail == "not judged: no junction temperature for this GPU in rocm-smi's Concise Info"


def test_a_link_metric_row_with_an_unknown_link_type_fails_naming_what_it_printed() -> None:
    """The real 8-GPU LINK METRIC TABLE with GPU5's link_type edited here to UNKNOWN: the row was dropped, GPU5
    vanished from the report and the 7 others passed (`--platform mi300x-8x` exited 0)."""
    text = amd("xgmi-link-metric-8gpu-changelog.txt")
    row = "GPU5   0000:af:00.0 32 Gb/s  512 Gb/s      XGMI"
    assert row in text
    verdicts = amd_smi.judge(amd_smi.parse(text.replace(row, row[:-4] + "UNKNOWN")), {**MI300X, "gpu_count": None})
    failed = [(v.subject, v.what, v.detail) for v in verdicts if not v.passed]
    assert failed == [("GPU5 (0000:af:00.0)", "xGMI link type",
                       "unrecognised: '32 Gb/s  512 Gb/s      UNKNOWN', platform expects XGMI")]


def test_a_gpu_missing_from_the_xgmi_tables_is_not_judged() -> None:
    """The real 8x MI300X Concise Info and the real 8-GPU LINK METRIC TABLE with GPU5's three lines cut here:
    GPU5's link type was never judged and the run passed."""
    lines = amd("xgmi-link-metric-8gpu-changelog.txt").splitlines()
    at = next(i for i, l in enumerate(lines) if l.startswith("GPU5 "))
    assert lines[at + 1].startswith(" Read") and lines[at + 2].startswith(" Write")
    text = rocm("concise-8xmi300x-ml-engineering.txt") + "\n".join(lines[:at] + lines[at + 3:]) + "\n"
    verdicts = amd_smi.judge(amd_smi.parse(text), MI300X)
    assert [(v.subject, v.what, v.judged) for v in verdicts if not v.passed] == [("GPU5", "xGMI link type", False)]
    assert len([v for v in verdicts if v.what == "xGMI link type" and v.passed]) == 7


# -- each xGMI table feeds its own field ------------------------------------------------------------------
_BUS8 = ["0000:0c:00.0", "0000:22:00.0", "0000:38:00.0", "0000:5c:00.0", "0000:9f:00.0", "0000:af:00.0",
         "0000:bf:00.0", "0000:df:00.0"]


def _link_status_table(cell) -> str:
    """`amd-smi xgmi --link-status` (ROCm >= 7) for the 8-GPU node of the real LINK METRIC TABLE, laid out as the
    real #6074 capture prints it (GPU columns, SELF on the diagonal) with cell(i, j) in row i, column j."""
    rows = ["XGMI LINK STATUS:", "       bdf           " + "".join(f"GPU{j}".ljust(14) for j in range(8))]
    rows += [f"GPU{i}   {b}  " + "".join(("SELF" if i == j else cell(i, j)).ljust(14) for j in range(8)).rstrip()
             for i, b in enumerate(_BUS8)]
    return "\n".join(rows) + "\n"


def test_xgmi_link_status_rows_do_not_overwrite_the_link_type() -> None:
    """The real 8-GPU LINK METRIC TABLE (link_type XGMI on every GPU) followed by XGMI LINK STATUS with every pair
    N/A, as amd-smi prints it on an MI3x VF (ROCm/amdsmi CHANGELOG): each status row ending in N/A overwrote its
    GPU's link type with N/A, so GPU0-GPU6 failed `xGMI link type` with N/A and the pairs were never judged."""
    text = amd("xgmi-link-metric-8gpu-changelog.txt") + "\n" + _link_status_table(lambda i, j: "N/A")
    r = amd_smi.parse(text)
    assert [g.xgmi_link for g in r.gpus] == ["XGMI"] * 8
    verdicts = amd_smi.judge(r, MI300X)
    assert all(v.passed for v in verdicts if v.what == "xGMI link type") and \
        len([v for v in verdicts if v.what == "xGMI link type"]) == 8
    status = [v for v in verdicts if v.what == "xGMI link status"]
    assert len(status) == 28 and not any(v.judged for v in status)
    assert status[0].subject == "GPU0 - GPU1" and status[0].detail == \
        "not judged: amd-smi prints GPU0->GPU1 N/A, GPU1->GPU0 N/A"


def test_a_pair_down_in_xgmi_link_status_fails_naming_the_pair() -> None:
    """The same tables with every pair up (U) but GPU2's link to GPU5 down (D) in both rows: the status table
    was read as nothing but a link type (a row ending in U matched no layout), so the down pair passed."""
    down = {(2, 5), (5, 2)}
    text = amd("xgmi-link-metric-8gpu-changelog.txt") + "\n" + \
        _link_status_table(lambda i, j: "D" if (i, j) in down else "U")
    verdicts = amd_smi.judge(amd_smi.parse(text), MI300X)
    status = [v for v in verdicts if v.what == "xGMI link status"]
    assert len(status) == 28
    assert [(v.subject, v.detail) for v in status if not v.passed] == [
        ("GPU2 - GPU5", "GPU2->GPU5 D, GPU5->GPU2 D (U up, D down, X disabled)")]


def test_a_port_status_row_of_n_a_is_not_read_as_a_link_type() -> None:
    """The real 8-GPU LINK METRIC TABLE's first GPU and a GPU LINK PORT STATUS row of N/A (as an MI3x VF prints
    it, ROCm/amdsmi CHANGELOG): the N/A row was read as GPU0's link type, which then failed."""
    head = amd("xgmi-link-metric-8gpu-changelog.txt").split("GPU1   ")[0]
    ports = "\nGPU LINK PORT STATUS:\n       bdf           port_num\nGPU0   0000:0c:00.0  " + "  ".join(["N/A"] * 8)
    r = amd_smi.parse(head + ports + "\n")
    assert (r.gpus[0].xgmi_link, r.gpus[0].xgmi_ports) == ("XGMI", " ".join(["N/A"] * 8))
    verdicts = amd_smi.judge(r, {**MI300X, "gpu_count": None})
    assert [(v.what, v.passed, v.judged) for v in verdicts] == [("xGMI ports", False, False),
                                                                ("xGMI link type", True, True)]


def test_a_pcie_pair_among_xgmi_links_is_judged_as_that_pair() -> None:
    """The real 8-GPU `amd-smi topology` and `amd-smi xgmi` of one node, with the LINK TYPE TABLE's two cells
    between GPU0 (0000:0c:00.0) and GPU3 (0000:5c:00.0) set to PCIE here. LINK METRIC TABLE keeps one link_type
    per GPU, XGMI when any of its links is XGMI (amdsmi_commands.py), so both still read XGMI: the amd-smi probe
    ignored the per-pair table and passed the PCIE pair."""
    lines = amd("topology-8gpu-xgmi-changelog-6.1.txt").splitlines()
    at = lines.index("LINK TYPE TABLE:")
    for row, col in ((0, 3), (3, 0)):
        cells = lines[at + 2 + row].split()
        assert cells[0] == _BUS8[row] and cells[1 + col] == "XGMI"
        cells[1 + col] = "PCIE"
        lines[at + 2 + row] = " ".join(c.ljust(12) for c in cells).rstrip()
    text = "\n".join(lines) + "\n" + amd("xgmi-link-metric-8gpu-changelog.txt")
    r = amd_smi.parse(text)
    assert [g.bus_id for g in r.gpus] == _BUS8 and {g.xgmi_link for g in r.gpus} == {"XGMI"}
    verdicts = amd_smi.judge(r, {**MI300X, "gpu_count": None})
    pairs = [v for v in verdicts if v.what == "xGMI link type" and " - " in v.subject]
    assert len(pairs) == 28
    assert [(v.subject, v.measured, v.detail) for v in verdicts if not v.passed] == [
        ("GPU0 - GPU3", "PCIE", "GPU0->GPU3 PCIE, GPU3->GPU0 PCIE, platform expects XGMI")]


def test_a_link_type_table_column_of_another_gpus_bus_id_is_refused() -> None:
    """The real 2-GPU topology (0000:03:00.0, 0000:0c:00.0) after an `amd-smi list` naming GPU 1 0000:26:00.0:
    column 0000:0c:00.0 would be GPU1 by its place, which is another GPU: refused, never judged as GPU1."""
    text = amd("list-2gpu-kfd-changelog-6.3.txt") + amd("topology-2gpu-pcie-rx7900xtx-rocm-6074.txt")
    with pytest.raises(ProbeParseError, match=r"column 0000:03:00.0 would be GPU0, which the input names 0000:23"):
        amd_smi.parse(text)


def test_xgmi_tables_without_a_gpu_list_name_a_numbering_gap_and_do_not_judge_the_count() -> None:
    """The real 8-GPU LINK METRIC TABLE alone (no amd-smi list/static) with GPU2's three lines cut here: GPU2 had
    no verdict, the GPU count was never judged, and the 7 GPUs left passed against the 8-GPU MI300X profile."""
    lines = amd("xgmi-link-metric-8gpu-changelog.txt").splitlines()
    at = next(i for i, l in enumerate(lines) if l.startswith("GPU2 "))
    verdicts = amd_smi.judge(amd_smi.parse("\n".join(lines[:at] + lines[at + 3:]) + "\n"), MI300X)
    assert [(v.subject, v.what, v.judged, v.detail) for v in verdicts if not v.passed] == [
        ("node", "GPU count", False, "not judged: no GPU list in the input (amd-smi list or static, rocm-smi "
                                     "Concise Info); its other sections name 7 GPU(s)"),
        ("GPU2", "GPU in the output", False,
         "not judged: the amd-smi output names GPUs 0, 1, 3, 4, 5, 6, 7 and nothing of GPU2")]
    assert len([v for v in verdicts if v.passed]) == 7


def test_a_junk_line_inside_an_xgmi_table_does_not_unseat_its_title() -> None:
    """Found by tests/test_fuzz_probes.py: a long junk line at the margin after the real LINK METRIC TABLE's
    header was taken for a new table's title, so GPU1-GPU7's rows were read as nothing (1 GPU, a pass)."""
    lines = amd("xgmi-link-metric-8gpu-changelog.txt").splitlines()
    at = lines.index("LINK METRIC TABLE:") + 2
    r = amd_smi.parse("\n".join(lines[:at] + ["x" * 300] + lines[at:]) + "\n")
    assert [(g.index, g.xgmi_link) for g in r.gpus] == [(i, "XGMI") for i in range(8)]


# -- topology.gpu_gpu: amd-smi judges XGMI alone ------------------------------------------------------------
@pytest.mark.parametrize("value", ["NV18", "[XGMI, PCIE]", "PCIE"])
def test_a_typed_gpu_gpu_amd_smi_cannot_judge_is_refused(value: str) -> None:
    """`--expect topology.gpu_gpu=NV18` (an NVIDIA link word) against the real 8-GPU `amd-smi xgmi` capture was
    accepted and passed: the probe acted only on a value naming XGMI, and read every other as nothing expected."""
    out = subprocess.run([sys.executable, "-m", "clustercheck", "probe", "amd-smi", "--input",
                          str(TOOLS / "amd-smi" / "xgmi-link-metric-8gpu-changelog.txt"), "--expect",
                          f"topology.gpu_gpu={value}"], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert out.returncode == 4, out.stdout + out.stderr
    shown = {"NV18": "'NV18'", "[XGMI, PCIE]": "['XGMI', 'PCIE']", "PCIE": "'PCIE'"}[value]
    assert out.stderr.strip().splitlines() == [
        f"clustercheck: error: --expect topology.gpu_gpu: probe amd-smi cannot judge {shown} (it takes: XGMI)"]
    assert out.stdout == ""


def test_a_profiles_gpu_gpu_amd_smi_cannot_judge_is_not_judged_never_passed() -> None:
    """The H100 profile's `topology: {gpu_gpu: NV18}` (for topo) against an amd-smi capture: not judged, naming
    it, never a pass; XGMI (the MI300X profile's) is judged as before."""
    report = amd_smi.parse(amd("xgmi-link-metric-8gpu-changelog.txt"))
    # less its gpu_count: the capture has no GPU list to count (its own not-judged verdict, tested above)
    h100 = {k: v for k, v in load_named(REPO / "thresholds", "h100-sxm-8x").expect.items() if k != "gpu_count"}
    verdicts = amd_smi.judge(report, h100)
    assert [(v.subject, v.what, v.detail) for v in verdicts if not v.judged] == [
        ("node", "xGMI link type", "not judged: topology.gpu_gpu: probe amd-smi cannot judge 'NV18' (it takes: XGMI)")]
    # nothing else of H100's applies to these tables: before, this judged nothing and passed ('inventory')
    assert len(verdicts) == 1 and outcome_of("amd-smi", tuple(verdicts)).outcome == "not judged"
    xgmi = amd_smi.judge(report, MI300X)
    assert [(v.judged, v.detail) for v in xgmi if v.what == "xGMI link type"] == [
        (True, "XGMI, platform expects XGMI")] * 8
