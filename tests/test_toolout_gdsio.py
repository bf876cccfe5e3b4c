"""clustercheck.toolout.gdsio: a result line whose numbers do not read, or read below 0, is refused naming
its line (the offline probe exits 4 with one line), never a traceback and never a result."""

from __future__ import annotations

import pytest

from clustercheck.cli import main
from clustercheck.toolout import NotToolOutput
from clustercheck.toolout import gdsio as reader
from evidence import text

WRX90 = "wrx90-2gpu-raid0-write-gpud-cpuonly-stelline.txt"


@pytest.mark.parametrize("old, new", [
    ("Throughput: 25.112706", "Throughput: 2.5.112706"),
    ("Throughput: 25.112706", "Throughput: -25.112706"),
    ("Avg_Latency: 38738.000000", "Avg_Latency: 3.8738.0"),
    ("Avg_Latency: 38738.000000", "Avg_Latency: -38738.000000"),
    ("total_time 1.991024", "total_time -1.991024"),
    ("total_time 1.991024", "total_time 1e400"),
    ("ops: 50 total_time 1.991024", "ops: -50 total_time 1.991024"),
])
def test_a_result_that_does_not_read_or_is_below_0_is_refused_naming_its_line(old, new):
    capture = text("gdsio", WRX90)
    assert capture.count(old) == 1 and reader.parse(capture).results[0].seconds == 1.991024
    with pytest.raises(NotToolOutput, match=r"^line 2: "):
        reader.parse(capture.replace(old, new))


def test_the_probe_says_so_in_one_line_exit_4(tmp_path, capsys):
    path = tmp_path / "gdsio.txt"
    path.write_text(text("gdsio", WRX90).replace("Throughput: 25.112706", "Throughput: 1.2.22.0"), encoding="utf-8")
    code = main(["probe", "gdsio", "--input", str(path), "--expect", "gdsio_write_min=1"])
    err = capsys.readouterr().err
    assert code == 4 and "1.2.22.0" in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
