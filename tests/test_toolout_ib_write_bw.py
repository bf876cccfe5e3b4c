"""clustercheck.toolout.ib_write_bw: a bandwidth row whose numbers do not read is refused naming its line
(the offline probe exits 4 with one line, a run's judge says so as a harness error), never a traceback."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from clustercheck.cli import main
from clustercheck.errors import HarnessError
from clustercheck.kinds.base import Answers, CheckSpec, Rules
from clustercheck.kinds.ib_write_bw import judge
from clustercheck.toolout import NotToolOutput
from clustercheck.toolout import ib_write_bw as reader
from evidence import text

ROCE = "roce-mlx5_0-all-sizes-gpu-operator-docs.txt"
LAST = "      8388608    5000             92.39              92.39              0.001377"


@pytest.mark.parametrize("cell", ["92.3.9", ".", "N/A", "nan", "-92.39", "1e400"])
def test_a_row_whose_bandwidth_does_not_read_is_refused_naming_its_line(cell):
    capture = text("ib_write_bw", ROCE)
    assert LAST in capture and reader.parse(capture).largest().avg_gbps == 92.39  # type: ignore[union-attr]
    with pytest.raises(NotToolOutput, match=r"^line \d+: .*8388608"):
        reader.parse(capture.replace(LAST, LAST.replace("92.39              0.0", f"{cell}              0.0")))


@pytest.mark.parametrize("avg", ["MB/sec", "Mb/sec", "Gb/sec "])
def test_an_average_in_another_unit_than_the_peak_is_refused(avg):
    """The average is what is judged, but it was converted with the peak column's unit: `BW peak[Gb/sec]`
    beside `BW average[MB/sec]` read 92.39 MB/s as 92.39 Gb/s."""
    capture = text("ib_write_bw", ROCE)
    assert "BW average[Gb/sec]" in capture
    with pytest.raises(NotToolOutput, match=r"^line \d+: the average's unit .* is not the peak's 'Gb/sec'"):
        reader.parse(capture.replace("BW average[Gb/sec]", f"BW average[{avg}]"))


def test_the_probe_and_a_run_say_so_in_one_line(tmp_path, capsys):
    bad = text("ib_write_bw", ROCE).replace(LAST, LAST.replace("92.39              0.0", "92.3.9              0.0"))
    path = tmp_path / "ibw.txt"
    path.write_text(bad, encoding="utf-8")
    code = main(["probe", "ib-write-bw", "--input", str(path), "--expect", "ib_write_bw_min=90"])
    err = capsys.readouterr().err
    assert code == 4 and "92.3.9" in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    client = {"outcome": "ran", "stdout": bad, "returncode": 0, "timed_out": False}
    result: dict[str, Any] = {"host": "n1", "binary": "ib_write_bw", "outcome": "ran",
                              "runs": [{"device": "mlx5_0", "port": 1, "rate_gbps": 100.0, "up": True,
                                        "client": client, "server": {}}]}
    check = CheckSpec("c", "ib_write_bw", "node", {}, (), 60, "", "s.yaml", 1)
    with pytest.raises(HarnessError, match="92.3.9"):
        judge(Answers(check, [result, {}], [{"host": "n1"}, {"host": "n1"}], "nccl"), Rules({}))


def test_a_unit_perftest_does_not_print_is_refused_never_read_as_gbps() -> None:
    """perftest prints `MB/sec` (MiB/s) or `Gb/sec` (src/perftest_parameters.h RESULT_FMT, RESULT_FMT_G), newer
    builds `MiB/sec`: `Mb/sec` read with no factor made 9000 Mb/s a 9000 Gb/s pass."""
    capture = text("ib_write_bw", ROCE)
    mbits = capture.replace("BW peak[Gb/sec]    BW average[Gb/sec]", "BW peak[Mb/sec]    BW average[Mb/sec]")
    assert mbits != capture
    with pytest.raises(NotToolOutput, match=r"^line \d+: bandwidth in 'Mb/sec', a unit perftest does not print"):
        reader.parse(mbits)


def test_two_devices_runs_in_one_file_are_refused_not_named_after_the_first() -> None:
    """The real RoCE capture of mlx5_0 followed by the same run on mlx5_1 at 12.40 Gb/s: the slow row was
    named mlx5_0."""
    one = text("ib_write_bw", "roce-cx5-100g-deepops.txt")
    assert "Device         : mlx5_0" in one and "92.40" in one
    two = one + "\n" + one.replace("Device         : mlx5_0", "Device         : mlx5_1").replace("92.40", "12.40")
    with pytest.raises(NotToolOutput, match=r"a second device 'mlx5_1' after 'mlx5_0': one NIC's run per file"):
        reader.parse(two)
    assert reader.parse(one + "\n" + one).device == "mlx5_0"  # the same device twice (server and client) is one run


class _Counted(str):
    finds = 0

    def find(self, *args: Any) -> int:
        _Counted.finds += 1
        return super().find(*args)


def test_header_fields_are_read_colon_to_colon_in_one_pass() -> None:
    """A line is read once from colon to colon (no pattern tried at every offset, which was quadratic in a
    colon-less line): one search per colon plus the last, whatever the line's length."""
    assert reader.fields_of("    Dual-port       : OFF          Device         : mlx5_0") == [("Dual-port", "OFF"),
                                                                                             ("Device", "mlx5_0")]
    assert reader.fields_of(" GID: 00:00:ff:10:10:11:12") == [("GID", "00:00:ff:10:10:11:12")]
    for line, searches in ((" " + "x" * 200_000, 1), ("ab " * 50_000 + "Device : mlx5_0", 2),
                           ("k : v " * 1000, 1001)):
        _Counted.finds = 0
        reader.fields_of(_Counted(line))
        assert _Counted.finds == searches, (len(line), _Counted.finds)


@pytest.mark.parametrize("row", ["      8388608    5000", "      8388608", "      8388608   ",
                                 "      -8388608    5000             12.39              12.39              0.001377",
                                 "      8388608    -5000             12.39              12.39              0.001377"])
def test_a_row_cut_short_or_signed_is_refused_not_skipped(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                        row: str) -> None:
    """The largest size's row cut to `8388608 5000`, to its size alone, or printed with a sign fell through
    to the header fields: the 4194304 B row before it was judged and passed at 92.39 Gb/s."""
    capture = text("ib_write_bw", ROCE)
    assert LAST in capture
    bad = capture.replace(LAST, row)
    with pytest.raises(NotToolOutput, match=r"^line \d+: a bandwidth row that is not numbers .*8388608"):
        reader.parse(bad)
    path = tmp_path / "ibw.txt"
    path.write_text(bad, encoding="utf-8")
    code = main(["probe", "ib-write-bw", "--input", str(path), "--expect", "ib_write_bw_min=90"])
    out, err = capsys.readouterr()
    assert code == 4 and "8388608" in err and len(err.strip().splitlines()) == 1 and "PASS" not in out


def _probe(tmp_path: Path, capsys: pytest.CaptureFixture[str], capture: str) -> tuple[int, str, str]:
    path = tmp_path / "ibw.txt"
    path.write_text(capture, encoding="utf-8")
    code = main(["probe", "ib-write-bw", "--input", str(path), "--expect", "ib_write_bw_min=90"])
    out, err = capsys.readouterr()
    return code, out, err


# -- a row no perftest run prints: refused naming its line, never a pass ----------------------------------

@pytest.mark.parametrize("row", ["      8388608    0             92.39              92.39              0.001377",
                                 "      8388608    0             0.00               92.39              0.001377"])
def test_a_bandwidth_over_0_iterations_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str], row: str) -> None:
    """perftest's average is the bytes of its iterations over their time (print_report_bw; a -D run counts its
    iterations too): 92.39 Gb/s over `#iterations 0` read as the 8 MiB reading and passed a 90 Gb/s floor."""
    bad = text("ib_write_bw", ROCE).replace(LAST, row)
    with pytest.raises(NotToolOutput, match=r"^line 45: a bandwidth over 0 iterations, .*8388608"):
        reader.parse(bad)
    code, out, err = _probe(tmp_path, capsys, bad)
    assert code == 4 and "0 iterations" in err and len(err.strip().splitlines()) == 1 and "PASS" not in out


def test_nothing_moved_over_0_iterations_reads_and_fails_at_the_floor(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """0.00 Gb/s over 0 iterations is what a run that moved nothing prints: read, and failed by the floor."""
    idle = text("ib_write_bw", ROCE).replace(LAST, "      8388608    0        0.00        0.00        0.000000")
    assert reader.parse(idle).largest() == reader.Row(8388608, 0, None, 0.0, 0.0, 45)
    code, out, _ = _probe(tmp_path, capsys, idle)
    assert code == 1 and "FAIL mlx5_0: bandwidth: BW average 0.00 Gb/s at 8388608 B" in out and "PASS" not in out


@pytest.mark.parametrize("fixture, row, why", [
    (ROCE, "      8388608    5000             99999999.39        99999999.39        0.001377",
     r"BW peak 99999999.39 Gb/s, above the 100000 Gb/s no NIC port reaches"),
    (ROCE, "      8388608    5000             92.39              100000.01          0.001377",
     r"BW average 100000.01 Gb/s, above the 100000 Gb/s"),
    ("loopback-ib0-all-sizes-interleaved-superbench.txt",  # MiB/s: 12 Mi MiB/s is 100.7 Tb/s
     "8388608    2000             12000000.00         12000000.00               0.002905",
     r"BW peak 100663.30 Gb/s, above the 100000 Gb/s"),
    (ROCE, "      8388608    5000             92.39              92.41              0.001377",
     r"BW average 92.41 above BW peak 92.39 by more than the printed step 0.01"),
    (ROCE, "      8388608    5000             9.39               92.39              0.001377",
     r"BW average 92.39 above BW peak 9.39"),
])
def test_a_rate_no_nic_reaches_or_an_average_above_its_peak_is_refused(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str],
                                                                       fixture: str, row: str, why: str) -> None:
    """99,999,999.39 Gb/s passed a 90 Gb/s floor. No port reaches 100 Tb/s (reader.MAX_PORT_GBPS), and the
    peak is the fastest window of the same iterations, the whole run among them: an average above it is no
    perftest output either."""
    capture = text("ib_write_bw", fixture)
    last = next(line for line in capture.splitlines() if line.strip().startswith("8388608 "))
    bad = capture.replace(last, row)
    with pytest.raises(NotToolOutput, match=rf"^line \d+: {why}"):
        reader.parse(bad)
    code, out, err = _probe(tmp_path, capsys, bad)
    assert code == 4 and "8388608" in err and len(err.strip().splitlines()) == 1 and "PASS" not in out


@pytest.mark.parametrize("row, avg", [
    ("      8388608    5000             92.39              92.40              0.001377", 92.40),  # one printed step
    ("      8388608    5000             0.00               92.39              0.001377", 92.39),  # no peak (-D)
    ("      8388608    5000             1600.00            1599.98            0.023840", 1599.98),  # a 1.6 Tb/s port
])
def test_a_rate_a_nic_can_reach_and_an_average_within_a_printed_step_of_its_peak_still_read(row: str,
                                                                                            avg: float) -> None:
    largest = reader.parse(text("ib_write_bw", ROCE).replace(LAST, row)).largest()
    assert largest is not None and largest.avg_gbps == avg


# -- perftest's own error lines: the run failed, wherever they stand ------------------------------------------

@pytest.mark.parametrize("where, said", [
    ("after", "ibv_poll_cq: Completion with error"),
    ("after", " Completion with error at client\n Failed status 12: wr_id 0 syndrom 0x81"),
    ("after", " Failed status 10: wr_id 0 syndrom 0x88"),
    ("after", " Error occurred while running infinitely! aborting ..."),
    ("in", " Problems with warm up"),
    ("in", "ibv_poll_cq: Completion with error"),
])
def test_a_perftest_error_line_in_or_after_the_table_fails_the_run_naming_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], where: str, said: str) -> None:
    """perftest prints these to stderr when a run fails (src/perftest_resources.c NOTIFY_COMP_ERROR_SEND,
    `Problems with warm up` in the *_bw.c mains); a capture of stdout and stderr in one stream has them beside
    the table. `ibv_poll_cq: Completion with error` (behind a prefix) and `Problems with warm up` passed."""
    capture = text("ib_write_bw", ROCE)
    bad = capture.replace(LAST, LAST + "\n" + said) if where == "in" else capture.rstrip("\n") + "\n" + said + "\n"
    first = said.splitlines()[0].strip()
    run = reader.parse(bad)
    assert run.failure is not None and run.failure.endswith(first), run.failure
    assert reader.failure_in(said) == first  # a server's stderr tail, read alone
    code, out, _ = _probe(tmp_path, capsys, bad)
    assert code == 1 and "FAIL mlx5_0: run: the run failed: line " in out and first in out
