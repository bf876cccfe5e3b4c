"""The audit of the amd-smi and numa probes, each fault through the real CLI (`clustercheck probe NAME
--input FILE`) on a capture under tests/fixtures/tool-outputs/ with the one edit the auditor made:
- amd-smi: a second "GPU: N" block for the same GPU that says another value for a key no longer hides the
  first (an uncorrectable ECC count of 5, a PCIe width of x8): the contradiction is a failed verdict;
- amd-smi: a PCIe link of width 0 (or speed 0, or unreadable) fails "link down" whatever is expected;
- numa: the platform's GPU count is judged (a matrix with a GPU cut out fails), and a cut-off matrix is the
  failed topology-matrix verdict, never a skip for "no NIC"."""

from __future__ import annotations

from pathlib import Path

from evidence import text
from helpers import clustercheck_here


def probe(tmp_path: Path, name: str, capture: str, *args: str) -> tuple[int, str]:
    path = tmp_path / "capture.txt"
    path.write_text(capture, encoding="utf-8")
    done = clustercheck_here("probe", name, "--input", str(path), *args, cwd=tmp_path)
    return done.returncode, done.stdout + done.stderr


def _without_source(capture: str) -> str:
    return "\n".join(capture.splitlines()[2:]) + "\n"


# -- 1. amd-smi: a GPU's second block never hides its first ---------------------------------------------
def test_a_second_block_with_another_ecc_count_fails_naming_gpu_key_and_both_lines(tmp_path):
    one = _without_source(text("amd-smi", "metric-ecc-ecc-blocks-changelog.txt"))
    bad = one.replace("TOTAL_UNCORRECTABLE_COUNT: 0", "TOTAL_UNCORRECTABLE_COUNT: 5", 1)
    code, out = probe(tmp_path, "amd-smi", bad + one)
    assert code == 1, out
    lines = [l for l in out.splitlines() if "ECC/TOTAL_UNCORRECTABLE_COUNT" in l]
    assert lines and "GPU0" in lines[0] and "'5'" in lines[0] and "'0'" in lines[0], out
    # the lines named are the input file's own: 5 and, a copy (18 lines) later, 23
    assert "line 5 " in lines[0] and "line 23:" in lines[0], out


def test_a_second_block_with_another_pcie_width_fails_against_the_platform(tmp_path):
    capture = text("amd-smi", "metric-pcie-2gpu-changelog-6.3.txt")
    bad = capture.replace("GPU: 1", "GPU: 0").replace("WIDTH: 16", "WIDTH: 8", 1)
    code, out = probe(tmp_path, "amd-smi", bad, "--expect", "pcie_width=16", "--expect", "pcie_gen=5")
    assert code == 1, out
    assert any("PCIE/WIDTH" in l and "'8'" in l and "'16'" in l for l in out.splitlines()), out


def test_captures_of_different_commands_still_merge(tmp_path):
    ecc = _without_source(text("amd-smi", "metric-ecc-ecc-blocks-changelog.txt"))
    pcie = _without_source(text("amd-smi", "metric-pcie-2gpu-changelog-6.3.txt"))
    code, out = probe(tmp_path, "amd-smi", ecc + pcie + ecc, "--expect", "pcie_width=16", "--expect", "pcie_gen=5")
    assert "FAIL" not in out and "contradicts" not in out, out  # GPU1 has no ECC block: not judged
    assert {"PASS GPU0: ECC: 0 uncorrectable, 0 deferred; 0 correctable",
            "PASS GPU0: PCIe width: x16, platform expects x16"} <= set(out.splitlines()), out


# -- 2. amd-smi: a link that reads x0 (or 0 GT/s, or no speed at all) is down ------------------------------
def test_a_pcie_width_of_0_fails_link_down_with_nothing_expected(tmp_path):
    capture = text("amd-smi", "metric-pcie-2gpu-changelog-6.3.txt")
    for old, new in (("WIDTH: 16", "WIDTH: 0"), ("SPEED: 32 GT/s", "SPEED: 0 GT/s"), ("SPEED: 32 GT/s", "SPEED: N/A")):
        code, out = probe(tmp_path, "amd-smi", capture.replace(old, new, 1))
        assert code == 1, (new, out)
        assert f"FAIL GPU0: PCIe link: link down: {new.split(':')[0]} '{new.split(': ')[1]}'" in out, out
        assert "FAIL GPU1" not in out, out


# -- 3. numa: the platform's GPU count, as topo judges it ----------------------------------------------
def _without_gpu7(capture: str) -> str:
    """The DGX A100 matrix with GPU7's row and its column (the 8th cell of every tab-separated line) cut."""
    lines = []
    for line in capture.splitlines():
        cells = line.split("\t")
        if cells[0] == "GPU7":
            continue
        lines.append("\t".join(cells[:8] + cells[9:]) if len(cells) > 9 else line)
    return "\n".join(lines) + "\n"


def test_numa_fails_a_matrix_with_a_gpu_missing_against_the_platform(tmp_path):
    cut = _without_gpu7(text("nvidia-smi-topo", "dgx-a100-nv12-12x-mlx5-tabs.txt"))
    code, topo_out = probe(tmp_path, "topo", cut, "--platform", "a100-sxm-8x")
    assert "FAIL node: GPUs in topology: 7 GPU(s) in the matrix, platform expects 8" in topo_out, topo_out
    code, out = probe(tmp_path, "numa", cut, "--platform", "a100-sxm-8x")
    assert code == 1, out
    assert "FAIL node: GPUs in topology: 7 GPU(s) in the matrix, platform expects 8" in out, out
    code, out = probe(tmp_path, "numa", cut, "--expect", "gpu_count=7")
    assert code == 0 and "PASS node: GPUs in topology: 7 GPU(s)" in out, out


# -- 4. numa: a cut-off matrix fails, it is not skipped for "no NIC" -----------------------------------
def test_numa_fails_a_matrix_cut_off_before_its_nic_rows(tmp_path):
    cut = "\n".join(text("nvidia-smi-topo", "dgx-a100-nv12-12x-mlx5-tabs.txt").splitlines()[:8]) + "\n"  # head -n 8
    code, out = probe(tmp_path, "numa", cut)
    assert code == 1, out
    assert "FAIL node: topology matrix: " in out and "mlx5_0 has a column and no row" in out, out
    assert "SKIPPED" not in out and "no NIC in the topology matrix" not in out, out
    assert "NOT JUDGED GPU0: GPU-NIC NUMA affinity" in out, out


def test_numa_still_skips_a_whole_matrix_whose_header_names_no_nic(tmp_path):
    capture = text("nvidia-smi-topo", "dgx-a100-nv12-12x-mlx5-tabs.txt")
    gpus_only = []
    for line in capture.splitlines():
        cells = line.split("\t")
        if cells[0].startswith("mlx5_"):
            continue
        gpus_only.append("\t".join(cells[:9] + cells[21:]) if len(cells) > 21 else line)
    code, out = probe(tmp_path, "numa", "\n".join(gpus_only) + "\n")
    assert code == 5 and "no NIC in the topology matrix" in out, out
