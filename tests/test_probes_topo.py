"""topo and numa: every nvidia-smi topo -m fixture and the seed matrices (A100 NV12, H100 NV18, A40 NV4
pairs) parse to the facts INDEX.md lists; degraded links, wrong pairs and cross-socket NICs fail."""

from __future__ import annotations

import time

import pytest

from clustercheck.probes import numa, topo
from clustercheck.probes.base import ProbeParseError, ProbeSkip
from evidence import files, ids, seed_block, text

TOPO = "nvidia-smi-topo"
FIXTURES = files(TOPO)
DELLA = "della-8xh100-nv18-6nic-empty-cpu-affinity-tabs.txt"

EXPECTED = {  # file -> (GPUs, NICs, GPU0-GPU1 level, NUMA of each GPU)
    "3x-rtxa6000-nv4-pair-plus-node-ansi-escapes": (3, 0, "NV4", ["0"] * 3),
    "asus-esc8000a-4x-rtx6000ada-4nic-mlx5": (4, 4, "NODE", ["0", "0", "1", "1"]),
    "della-8xh100-nv18-6nic-empty-cpu-affinity-tabs": (8, 6, "NV18", ["0"] * 4 + ["1"] * 4),
    "dgx-a100-nv12-12x-mlx5-tabs": (8, 12, "NV12", ["3", "3", "1", "1", "7", "7", "5", "5"]),
    "dgx1-v100-topo-mp-pcie-only-4x-mlx5-tabs": (8, 4, "PIX", ["0"] * 4 + ["1"] * 4),
    "puget-wrx90-2gpu-phb-2nic": (2, 2, "PHB", ["0", "0"]),
}


@pytest.mark.parametrize("path", FIXTURES, ids=ids(FIXTURES))
def test_every_fixture_parses_to_the_indexed_facts(path):
    m = topo.parse(path.read_text())
    gpus, nics, level, numa_nodes = EXPECTED[path.stem]
    assert (len(m.gpus), len(m.nics), m.level("GPU0", "GPU1")) == (gpus, nics, level)
    assert [n for _, n in m.numa] == numa_nodes
    assert all(m.level(a, b) == m.level(b, a) for a in m.devices for b in m.devices if a != b)
    assert all(v.passed for v in topo.judge(m, {}))  # uniform as captured


def test_della_nics_and_legend():
    m = topo.parse(text(TOPO, DELLA))
    assert m.nic_label("NIC3") == "NIC3 (mlx5_3)"
    assert [m.level("GPU0", n) for n in ("NIC0", "NIC1")] == ["PIX", "PIX"]
    assert m.level("GPU4", "NIC4") == "PIX"


@pytest.mark.parametrize("marker, gpus, level", [("NV12  NV12", 8, "NV12"), ("NV18  NV18", 8, "NV18"), ("NV2", 2, "NV2")])
def test_seed_matrices_from_ml_engineering(marker, gpus, level):
    m = topo.parse(seed_block("000_9fd896bdaf491a34.txt", marker))
    assert (len(m.gpus), m.level("GPU0", "GPU1")) == (gpus, level)


def test_seed_a40_nv4_pairs_with_elided_columns_match_the_pcie_bridge_expectation():
    m = topo.parse(seed_block("004_4684ba45f69d2120.txt", "NV4     NODE"))
    assert len(m.gpus) == 8 and m.level("GPU0", "GPU2") == "NODE" and m.level("GPU1", "GPU6") == "SYS"
    expect = {"gpu_count": 8, "topology": {"nvlink_pairs": "NV4", "gpu_gpu": ["NODE", "SYS"]}}
    assert all(v.passed for v in topo.judge(m, expect))
    # the same box judged as an NVSwitch machine fails on every non-NVLink pair
    failed = [v for v in topo.judge(m, {"topology": {"gpu_gpu": "NV18"}}) if not v.passed]
    assert len(failed) == 28


def test_one_degraded_pair_fails_with_and_without_a_profile():
    raw = text(TOPO, DELLA)
    lines = raw.split("\n")
    row5 = next(i for i, l in enumerate(lines) if l.startswith("GPU5\t"))
    row7 = next(i for i, l in enumerate(lines) if l.startswith("GPU7\t"))
    cells5, cells7 = lines[row5].split("\t"), lines[row7].split("\t")
    cells5[8], cells7[6] = "NV12", "NV12"  # GPU5<->GPU7 lost 6 links
    lines[row5], lines[row7] = "\t".join(cells5), "\t".join(cells7)
    m = topo.parse("\n".join(lines))
    for expect in ({}, {"topology": {"gpu_gpu": "NV18"}}):
        failed = [v for v in topo.judge(m, expect) if not v.passed]
        assert [v.subject for v in failed] == ["GPU5-GPU7"], expect


def test_gpu_count_and_nearest_nic_expectations():
    m = topo.parse(text(TOPO, DELLA))
    failed = [v for v in topo.judge(m, {"gpu_count": 4, "topology": {"gpu_nic": ["PIX"]}}) if not v.passed]
    assert [v.subject for v in failed] == ["node", "GPU1", "GPU2", "GPU5", "GPU7"]


def test_bridge_pairs_require_exactly_one_partner():
    m = topo.parse(text(TOPO, "3x-rtxa6000-nv4-pair-plus-node-ansi-escapes.txt"))
    failed = [v for v in topo.judge(m, {"topology": {"nvlink_pairs": "NV4", "gpu_gpu": ["NODE", "SYS"]}}) if not v.passed]
    assert [v.subject for v in failed] == ["GPU2"]


@pytest.mark.parametrize("bad", ["", "GPU0 X\n", "\tGPU0\tGPU1\nGPU0\t X \tNV99X\nGPU1\tNV4\t X \n"])
def test_not_a_topology_matrix_is_a_parse_error(bad):
    with pytest.raises(ProbeParseError):
        topo.parse(bad)


# -- numa ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("path", FIXTURES, ids=ids(FIXTURES))
def test_numa_every_fixture_has_a_local_nic_or_skips(path):
    m = topo.parse(path.read_text())
    if not m.nics:
        with pytest.raises(ProbeSkip):
            numa.judge(m, {})
        return
    verdicts = numa.judge(m, {})
    assert len(verdicts) == len(m.gpus) and all(v.passed for v in verdicts)


def test_numa_nic_only_across_the_socket_fails():
    raw = text(TOPO, "asus-esc8000a-4x-rtx6000ada-4nic-mlx5.txt")
    lines = raw.split("\n")
    i = next(i for i, l in enumerate(lines) if l.startswith("GPU0 "))
    lines[i] = lines[i].replace("NODE    NODE    SYS     SYS     0-31", "SYS     SYS     SYS     SYS     0-31")
    for nic in ("NIC0", "NIC1"):  # the matrix read both ways, as nvidia-smi prints it
        j = next(j for j, l in enumerate(lines) if l.startswith(nic + " "))
        lines[j] = lines[j].replace(f"{nic}    NODE", f"{nic}    SYS ", 1)
    failed = [v for v in numa.judge(topo.parse("\n".join(lines)), {}) if not v.passed]
    assert [v.subject for v in failed] == ["GPU0"] and "SYS" in failed[0].detail


# -- size ---------------------------------------------------------------------------------------

def _big_matrix(gpus: int, nics: int, weak: tuple[int, int]) -> str:
    """A `nvidia-smi topo -m` capture of gpus + nics devices laid out as the della capture is (tabs,
    empty CPU affinity, NIC legend): NV18 between GPUs except the `weak` pair at NV12, each NIC PIX to
    its GPUs and SYS to the rest."""
    raw = text(TOPO, DELLA)
    legend = raw[raw.index("Legend:"):raw.index("NIC Legend:")]
    names = [f"GPU{g}" for g in range(gpus)] + [f"NIC{n}" for n in range(nics)]
    per_nic = -(-gpus // nics)

    def cell(a: int, b: int) -> str:
        if a == b:
            return " X "
        if a < gpus and b < gpus:
            return "NV12" if {a, b} == set(weak) else "NV18"
        near = [x // per_nic if x < gpus else x - gpus for x in (a, b)]
        return "PIX" if near[0] == near[1] else "SYS"

    lines = [raw.split("\n")[0], "", "\t" + "\t".join(names + ["CPU Affinity", "NUMA Affinity", "GPU NUMA ID"])]
    for a, name in enumerate(names):
        tail = f"\t\t{a * 2 // gpus}\t\tN/A" if a < gpus else "\t\t\t\t"
        lines.append(name + "\t" + "\t".join(cell(a, b) for b in range(len(names))) + tail)
    lines += ["", legend + "NIC Legend:", ""] + [f"  NIC{n}: mlx5_{n}" for n in range(nics)]
    return "\n".join(lines) + "\n"


def test_a_256_device_matrix_parses_and_judges_in_under_a_second():
    capture = _big_matrix(224, 32, weak=(17, 200))
    start = time.process_time()  # CPU time: the machine running the tests may be shared
    m = topo.parse(capture)
    plain = [v.subject for v in topo.judge(m, {}) if not v.passed]
    expect = {"gpu_count": 224, "topology": {"gpu_gpu": "NV18", "gpu_nic": ["PIX"]}}
    profiled = [v.subject for v in topo.judge(m, expect) if not v.passed]
    local = numa.judge(m, {})
    elapsed = time.process_time() - start
    assert (len(m.gpus), len(m.nics), m.nic_label("NIC31")) == (224, 32, "NIC31 (mlx5_31)")
    assert plain == profiled == ["GPU17-GPU200"]
    assert len(local) == 224 and all(v.passed for v in local)
    assert elapsed < 1.0, f"{elapsed:.2f} s of CPU for a 256-device matrix"
