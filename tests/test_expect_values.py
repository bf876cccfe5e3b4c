"""Expectation values that cannot judge anything are refused at load (exit 4), one line naming the key and
what it takes: a spread that passes a dead GPU pair, a ceiling no GPU reaches, a count no node has."""

from __future__ import annotations

from pathlib import Path

import pytest

from clustercheck.cli import main
from clustercheck.errors import UserError
from clustercheck.judging.expect import check_expect, parse_expect_args
from clustercheck.yamlfile import loads
from evidence import TOOLS

D2D = TOOLS / "nvbandwidth" / "d2d-memcpy-write-ce-8gpu-readme.txt"


def _one_dead_row(tmp_path: Path) -> Path:
    """NVIDIA's README capture with GPU 3's row at 0.01 GB/s: a pair that barely moves data."""
    lines = D2D.read_text().splitlines()
    row = next(i for i, line in enumerate(lines) if line.startswith("3 "))
    lines[row] = "3      0.01      0.01      0.01      0.00      0.01      0.01      0.01      0.01"
    path = tmp_path / "d2d-gpu3-dead.txt"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_uniformity_of_1_or_more_is_refused_where_it_passed_a_dead_gpu_pair(tmp_path: Path,
                                                                               capsys: pytest.CaptureFixture[str]) -> None:
    path = _one_dead_row(tmp_path)
    assert main(["probe", "nvbandwidth", "--input", str(path), "--expect", "p2p_uniformity=0.10"]) == 1
    assert "FAIL device_to_device_memcpy_write_ce: p2p_uniformity" in capsys.readouterr().out
    code = main(["probe", "nvbandwidth", "--input", str(path), "--expect", "p2p_uniformity=2"])
    err = capsys.readouterr().err
    assert code == 4, err
    assert "p2p_uniformity: expected a fraction of the median above 0 and below 1 (e.g. 0.10), got 2" in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("value", ["1", "1.5", "0", "-0.1"])
def test_a_uniformity_outside_0_to_1_is_refused(value: str) -> None:
    with pytest.raises(UserError, match="^--expect: p2p_uniformity: expected a fraction of the median above 0 and "
                                        rf"below 1 \(e.g. 0.10\), got {value}$"):
        parse_expect_args([f"p2p_uniformity={value}"])
    assert parse_expect_args(["p2p_uniformity=0.10"]) == {"p2p_uniformity": 0.10}


@pytest.mark.parametrize("item, message", [
    ("gpu_count=100000000000000000000", "gpu_count: expected a GPU count per node from 0 to 1024, got "
                                        "100000000000000000000"),
    ("gpu_count=1025", "gpu_count: expected a GPU count per node from 0 to 1024, got 1025"),
    ("nics=5000", "nics: expected a NIC count per node from 1 to 1024, got 5000"),
    ("ib_ports=2048", "ib_ports: expected a port count per node from 0 to 1024, got 2048"),
    ("nodes=1000000", "nodes: expected a node count from 1 to 65536, got 1000000"),
    # 176: 80 C written in Fahrenheit, a ceiling no running GPU reaches
    ("gpu_temp_max_c=176", "gpu_temp_max_c: expected a temperature in degrees C from 0 to 150, got 176"),
])
def test_a_count_or_ceiling_no_node_has_is_refused(item: str, message: str) -> None:
    with pytest.raises(UserError, match=f"^--expect: {message}$"):
        parse_expect_args([item])


def test_counts_and_ceilings_in_range_are_kept() -> None:
    assert parse_expect_args(["gpu_count=8", "nics=8", "ib_ports=0", "nodes=2048", "gpu_temp_max_c=150"]) == \
        {"gpu_count": 8, "nics": 8, "ib_ports": 0, "nodes": 2048, "gpu_temp_max_c": 150.0}


def test_a_profile_ceiling_is_refused_with_its_line() -> None:
    doc = loads("expect:\n  gpu_count: 8\n  gpu_temp_max_c: 200\n", "p.yaml")
    with pytest.raises(UserError, match=r"^p.yaml:3: expect.gpu_temp_max_c: expected a temperature in degrees C "
                                        r"from 0 to 150, got 200$"):
        check_expect(doc["expect"], "p.yaml", "expect", 1)


def test_the_cli_exits_4_on_a_gpu_count_no_node_has(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["probe", "nvbandwidth", "--input", str(D2D), "--expect", "gpu_count=100000000000000000000"])
    assert code == 4 and "gpu_count: expected a GPU count per node from 0 to 1024" in capsys.readouterr().err


# -- versions: a *_min that is no version passed every node; a number on the command line was refused --------------
SMI = TOOLS / "nvidia-smi-q" / "h100-sxm5-8gpu-565.57-nvidia-smi-a-nvsim.txt"  # driver 565.57.01, CUDA 12.7


@pytest.mark.parametrize("key", ["driver_min", "cuda_min", "nccl_min", "torch_min"])
@pytest.mark.parametrize("value", ["banana", "v12", "2.4.0a0", "1.2.3.4.5", "12..2"])
def test_a_minimum_that_is_no_version_is_refused(key: str, value: str) -> None:
    with pytest.raises(UserError, match=f"^--expect: {key}: expected a version: digits separated by dots, 1 to 4 "
                                        r"parts \(e.g. '535.104'\), got '"):
        parse_expect_args([f"{key}={value}"])


def test_banana_as_driver_minimum_exits_4_where_every_driver_passed(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["probe", "versions", "--input", str(SMI), "--expect", "driver_min=banana"])
    err = capsys.readouterr().err
    assert code == 4, err
    assert err.strip() == "clustercheck: error: --expect: driver_min: expected a version: digits separated by dots, " \
                          "1 to 4 parts (e.g. '535.104'), got 'banana'"


def test_a_number_on_the_command_line_is_the_version_as_typed(capsys: pytest.CaptureFixture[str]) -> None:
    assert parse_expect_args(["driver_min=535.104", "cuda_min=12", "nccl_min=2.18"]) == \
        {"driver_min": "535.104", "cuda_min": "12", "nccl_min": "2.18"}
    # 565.60 as typed is above 565.57.01; YAML's float 565.6 would be below it (6 < 57) and pass
    assert main(["probe", "versions", "--input", str(SMI), "--expect", "driver_min=565.60"]) == 1
    assert "FAIL node: driver version: driver 565.57.01, minimum 565.60" in capsys.readouterr().out
    assert main(["probe", "versions", "--input", str(SMI), "--expect", "driver_min=565.57"]) == 0


@pytest.mark.parametrize("written", ["535.10", "12", "2.18"])
def test_an_unquoted_version_in_a_profile_is_refused_with_quote_it(written: str) -> None:
    doc = loads(f"expect:\n  driver_min: {written}\n", "p.yaml")
    with pytest.raises(UserError, match=f"^p.yaml:2: expect.driver_min: expected a version as text, got the number "
                                        f"{written}: quote it \\('{written}'\\)"):
        check_expect(doc["expect"], "p.yaml", "expect", 1)
    quoted = loads(f"expect:\n  driver_min: '{written}'\n", "p.yaml")
    assert check_expect(quoted["expect"], "p.yaml", "expect", 1) == {"driver_min": written}


def test_the_versions_probe_does_not_pass_a_minimum_that_is_no_version() -> None:
    from clustercheck.probes import versions

    inv = versions.parse(SMI.read_text())
    [verdict] = [v for v in versions.judge(inv, {"driver_min": "banana"}) if v.what == "driver version"]
    assert not verdict.passed and not verdict.judged and "'banana' is no version" in verdict.detail


# -- net and topology: a value no node can show failed the hardware (exit 1) instead of being refused --------------
FOUR_NICS = TOOLS.parent / "nccl-debug" / "nccl-707-a100-four-nics-gdrdma.txt"  # NET/IB channel lines, GDRDMA
TOPO = TOOLS / "nvidia-smi-topo" / "della-8xh100-nv18-6nic-empty-cpu-affinity-tabs.txt"


@pytest.mark.parametrize("value", ["InfiniBand", "TCP", "NVLink", "RDMA"])
def test_a_misspelled_network_is_refused_not_failed(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["probe", "nccl-log", "--input", str(FOUR_NICS), "--expect", f"net={value}"])
    err = capsys.readouterr().err
    assert code == 4, err
    assert err.strip() == f"clustercheck: error: --expect: net: expected IB, Socket or OFI (IBext, RoCE, EFA, " \
                          f"Libfabric name one of them), got '{value}'"


@pytest.mark.parametrize("value", ["IB", "ib", "IBext", "RoCE", "Socket", "OFI", "EFA", "AWS Libfabric"])
def test_the_networks_the_transport_judge_knows_are_kept(value: str) -> None:
    assert parse_expect_args([f"net={value}"]) == {"net": value}


def test_a_profile_network_is_refused_with_its_line() -> None:
    doc = loads("expect:\n  net: Infiniband\n", "p.yaml")
    with pytest.raises(UserError, match="^p.yaml:2: expect.net: expected IB, Socket or OFI"):
        check_expect(doc["expect"], "p.yaml", "expect", 1)


@pytest.mark.parametrize("item, message", [
    ("topology.gpu_gpu=[]", "expected at least one level, got an empty list"),
    ("topology.gpu_nic=[]", "expected at least one level, got an empty list"),
    ("topology.gpu_gpu=X", "X is a device to itself in nvidia-smi topo -m, never a level between two devices"),
    ("topology.gpu_nic=[PIX, X]", "X is a device to itself in nvidia-smi topo -m, never a level between two devices"),
])
def test_a_topology_no_pair_can_have_is_refused_not_failed(item: str, message: str,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["probe", "topo", "--input", str(TOPO), "--expect", item])
    err = capsys.readouterr().err
    assert code == 4, err
    assert err.strip() == f"clustercheck: error: --expect: {item.split('=')[0]}: {message}"


def test_the_topology_capture_passes_its_own_levels() -> None:
    assert main(["probe", "topo", "--input", str(TOPO), "--expect", "topology.gpu_gpu=NV18"]) == 0


NVLINK_12_OF_18 = TOOLS / "nvlink-status" / "2x-h100pcie-nvlink-bridge-12-of-18-active-hpe-dl380a.txt"


def test_an_expect_key_given_twice_is_refused_where_the_last_passed_unseen(capsys: pytest.CaptureFixture[str]) -> None:
    """`--expect nvlinks_per_gpu=18 --expect nvlinks_per_gpu=12` judged 12 alone and passed a node the 18 fails."""
    assert main(["probe", "nvlink", "--input", str(NVLINK_12_OF_18), "--expect", "nvlinks_per_gpu=18"]) == 1
    capsys.readouterr()
    code = main(["probe", "nvlink", "--input", str(NVLINK_12_OF_18), "--expect", "nvlinks_per_gpu=18",
                 "--expect", "nvlinks_per_gpu=12"])
    err = capsys.readouterr().err
    assert code == 4, err
    assert err.strip().splitlines() == ["clustercheck: error: --expect 'nvlinks_per_gpu' given twice"]


@pytest.mark.parametrize("items", [
    ["topology.gpu_nic=[PIX]", "topology={gpu_gpu: NV18}"],  # the whole block would wipe the gpu_nic typed
    ["topology={gpu_gpu: NV18}", "topology.gpu_nic=[PIX]"],
    ["topology.gpu_nic=[PIX]", "topology.gpu_nic=[SYS]"],
])
def test_an_expect_key_that_holds_or_extends_one_given_is_refused(items: list[str]) -> None:
    args = [a for item in items for a in ("--expect", item)]
    with pytest.raises(UserError, match=r"^--expect 'topology(\.gpu_nic)?' given twice"):
        parse_expect_args(items)
    assert main(["probe", "topo", "--input", str(next((TOOLS / "nvidia-smi-topo").glob("*.txt"))), *args]) == 4


def test_sibling_expect_keys_are_no_repetition() -> None:
    got = parse_expect_args(["topology.gpu_nic=[PIX]", "topology.gpu_gpu=NV18", "nvlinks_per_gpu=18"])
    assert got["topology"] == {"gpu_nic": ["PIX"], "gpu_gpu": "NV18"} and got["nvlinks_per_gpu"] == 18
