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
