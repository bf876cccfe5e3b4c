"""`clustercheck probe nvbandwidth --input FILE`: failures, per-GPU and per-pair floors and P2P uniformity
judged on real captures through the real CLI."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from clustercheck.cli import main
from evidence import TOOLS, text

D2D = TOOLS / "nvbandwidth" / "d2d-memcpy-write-ce-8gpu-readme.txt"
H2D = TOOLS / "nvbandwidth" / "h2d-memcpy-ce-8gpu-readme.txt"


def cc(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["probe", "nvbandwidth", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def _file(tmp_path: Path, body: str) -> str:
    path = tmp_path / "nvbandwidth.txt"
    path.write_text(body, encoding="utf-8")
    return str(path)


def test_readme_d2d_passes_the_a100_floors(capsys):
    code, out, _ = cc(capsys, "--input", str(D2D), "--platform", "a100-sxm-8x")
    assert code == 3, out  # the p2p floors pass; the platform's host floors cannot be judged on it: not a pass
    assert ("PASS device_to_device_memcpy_write_ce: p2p_min: 56 value(s) >= 243 GB/s; lowest 274.89 (GPU6<-GPU0)"
            in out)
    assert "p2p_uniformity: 56 pairs within 10% of the median 276.35 GB/s" in out
    # floors whose tests are not in the capture are named and never passed; the matrix prints what was read
    assert ("NOT JUDGED nvbandwidth: h2d_min: not judged: none of host_to_device_memcpy_ce, "
            "host_to_device_memcpy_sm is in this capture") in out
    assert "NOT JUDGED nvbandwidth: d2h_min: not judged: none of device_to_host_memcpy_ce" in out
    assert ("PASS device_to_device_memcpy_write_ce: matrix: no SUM line for device_to_device_memcpy_write_ce; 56 "
            "cell(s): min 274.89 (GPU6<-GPU0), median 276.35, max 276.76 (GPU4<-GPU3) GB/s") in out
    assert out.endswith("nvbandwidth: not all judged (4 passed, 0 failed, 2 not judged)\n")


def test_the_same_matrix_fails_the_h100_pair_floor_naming_pairs(capsys):
    code, out, _ = cc(capsys, "--input", str(D2D), "--expect", "p2p_min=276.3")
    assert code == 1 and "FAIL device_to_device_memcpy_write_ce: p2p_min: " in out
    assert "GPU6<-GPU0 274.89" in out and " more" in out   # more than 8 pairs: the rest are counted


def test_a_slow_pair_and_a_missing_pair_fail(tmp_path, capsys):
    body = text("nvbandwidth", D2D.name).replace("276.62    276.24      0.00", "138.31    276.24      0.00", 1)
    body = body.replace("0.00    276.07", "0.00       N/A", 1)
    code, out, _ = cc(capsys, "--input", _file(tmp_path, body), "--expect", "p2p_min=243", "--expect",
                      "p2p_uniformity=0.1")
    assert code == 1
    assert "2 of 56 below 243 GB/s: GPU3<-GPU1 138.31, GPU0<-GPU1 N/A (not measured)" in out
    assert "1 of 55 pair(s) more than 10% from the median 276.33 GB/s" in out and "GPU3<-GPU1 138.31 (-49.9%)" in out
    assert "1 of 56 pair(s) not measured: GPU0<-GPU1 N/A (not measured)" in out   # uniformity never drops it


P5 = "d2d-bidirectional-write-ce-total-8xh100-p5.txt"
# (fixture, the cell edited to N/A, the edited copy's SUM line adjusted by that cell, the pair named)
NA_PAIRS = [
    (D2D.name, ("0      0.00    276.07", "0      0.00       N/A"), None, "GPU0<-GPU1"),
    (P5, (" 0       N/A    785.81", " 0       N/A    N/A"),
     ("_total 44013.06", "_total 43227.25"), "GPU0<->GPU1"),
]


@pytest.mark.parametrize("name, cell, total, pair", NA_PAIRS, ids=["readme-d2d-write", "p5-bidirectional"])
def test_a_gpu_pair_printed_n_a_off_the_diagonal_fails_both_paths(tmp_path, capsys, name, cell, total, pair):
    """A real capture edited the way a pair with no result reads: one off-diagonal cell N/A (the diagonal's
    N/A, a GPU to itself, is by design and stays a pass: the unedited captures pass). Never a pass, on the
    probe and in `measure: nvbandwidth`, with or without a p2p_uniformity gate."""
    from test_honest_verdicts import captured, kind_verdicts

    body = text("nvbandwidth", name)
    assert body.count(cell[0]) == 1
    body = body.replace(*cell)
    if total:
        body = body.replace(*total)  # so the SUM still adds up: only the N/A is wrong
    code, out, _ = cc(capsys, "--input", _file(tmp_path, body), "--expect", "p2p_uniformity=0.1")
    assert code == 1, out
    assert f"matrix: 1 GPU pair(s) N/A, not measured: {pair} (" in out, out
    if name == D2D.name:
        assert f"FAIL device_to_device_memcpy_write_ce: p2p_uniformity: 1 of 56 pair(s) not measured: {pair} N/A" in out
    testcase = "device_to_device_memcpy_write_ce" if name == D2D.name else "device_to_device_bidirectional_memcpy_write_ce"
    stdout = "\n".join(body.split("\n")[2:])
    verdicts = kind_verdicts("nvbandwidth", {"testcases": [testcase]}, stdout, "nvbandwidth")
    matrix = [v for v in verdicts if v.metric == "matrix"]
    assert matrix and not matrix[0].passed and pair in str(matrix[0].detail), matrix
    clean = kind_verdicts("nvbandwidth", {"testcases": [testcase]}, captured("nvbandwidth", name), "nvbandwidth")
    assert all(v.passed for v in clean), clean


def test_a_run_with_an_n_a_pair_has_no_lowest_or_spread_to_pass(tmp_path):
    """`measure: nvbandwidth`: a matrix with an N/A pair gives no _min, _median or _min_ratio that a limit
    could pass on the pairs that were measured."""
    from clustercheck.kinds import KINDS
    from clustercheck.kinds.base import Answers, CheckSpec, Rules
    from clustercheck.schema import Fields

    stdout = "\n".join(text("nvbandwidth", D2D.name).replace("0      0.00    276.07", "0      0.00       N/A")
                       .split("\n")[2:])
    kind = KINDS["nvbandwidth"]
    check = CheckSpec("x", "nvbandwidth", "node", kind.parse(Fields({"testcases": ["device_to_device_memcpy_write_ce"]},
                      "s.yaml", "checks[0].params")), (), 60.0, "", "s.yaml", 1)
    ran = {"host": "node7", "binary": "nvbandwidth", "argv": ["nvbandwidth"], "outcome": "ran", "returncode": 0,
           "timed_out": False, "timeout": 54.0, "seconds": 1.0, "stdout": stdout, "stdout_bytes": len(stdout),
           "truncated": False, "stderr_tail": ""}
    m, _ = kind.judge(Answers(check, [ran, {}], [{"host": "node7"}, {"host": "node7"}], "gloo"), Rules({}))
    for suffix in ("_min", "_median", "_min_ratio"):
        assert math.isnan(m.metrics[f"device_to_device_memcpy_write_ce{suffix}"]), suffix
    assert math.isnan(m.subjects["GPU0<-GPU1"]["device_to_device_memcpy_write_ce"])


@pytest.mark.parametrize("floor, code", [("25.9", 0), ("26", 1)])
def test_h2d_floor_per_gpu(capsys, floor, code):
    got, out, _ = cc(capsys, "--input", str(H2D), "--expect", f"h2d_min={floor}")
    assert got == code, out
    if code:
        assert ("FAIL host_to_device_memcpy_ce: h2d_min: 4 of 8 below 26 GB/s: GPU1 25.94, GPU5 25.95, GPU2 25.97, "
                "GPU7 25.97") in out


def test_pattern_check_failure_fails_naming_its_line(tmp_path, capsys):
    lines = text("nvbandwidth", H2D.name).splitlines()
    body = "\n".join(lines[:3] + [" Invalid value when checking the pattern at <0x7f5e2c000000>",
                                  " Current offset [ 0/536870912]", "Aborted (core dumped)"])
    code, out, _ = cc(capsys, "--input", _file(tmp_path, body))
    assert code == 1
    assert "FAIL nvbandwidth: run: failed: line 4: Invalid value when checking the pattern at <0x7f5e2c000000>" in out


def test_crashed_capture_fails_through_the_cli(capsys):
    crashed = TOOLS / "nvbandwidth-crashed" / "one-to-all-read-sm-8xl40s-aborted-core-dumped.txt"
    code, out, _ = cc(capsys, "--input", str(crashed), "--platform", "h100-sxm-8x")
    assert code == 1 and ("FAIL nvbandwidth: run: failed: line 23: Invalid value when checking the pattern at "
                          "<0x7fac6200e480>") in out


def test_sum_only_output_passes_and_says_what_it_cannot_judge(capsys):
    code, out, _ = cc(capsys, "--input", str(TOOLS / "nvbandwidth" / "all-tests-grep-SUM-gb200-oci.txt"),
                      "--platform", "h100-sxm-8x")
    # what it shows passes; the per-GPU floors it cannot show are NOT JUDGED, so the probe is no pass (3)
    assert code == 3 and "SUM lines only: per-GPU values are not in this output" in out and "NOT JUDGED" in out


def test_not_nvbandwidth_output_exits_4(capsys):
    code, out, err = cc(capsys, "--input", str(TOOLS / "nccl-tests" / "allreduce-h100-2node-16rank-mpirun.txt"))
    assert code == 4 and "expected nvbandwidth output" in err and len(err.strip().splitlines()) == 1


def test_a_testcase_printed_twice_fails_the_probe_and_the_kind(tmp_path, capsys):
    """A second host_to_device_memcpy_ce matrix with GPU0 at 1.03 GB/s: the h2d_min floor reads the first
    matrix by name and passes; the run itself fails, on the probe and in `measure: nvbandwidth`."""
    from test_honest_verdicts import kind_verdicts

    body = text("nvbandwidth", H2D.name)
    body += "\n" + body.split("\n", 2)[2].replace("26.03", "1.03")
    code, out, _ = cc(capsys, "--input", _file(tmp_path, body), "--expect", "h2d_min=25", "--expect", "gpu_count=8")
    assert code == 1, out
    assert "FAIL nvbandwidth: run: failed: line 8: testcase host_to_device_memcpy_ce printed twice (lines 3 and 8)" in out
    stdout = "\n".join(body.split("\n")[2:])
    run = next(v for v in kind_verdicts("nvbandwidth", {"testcases": ["host_to_device_memcpy_ce"]}, stdout,
                                        "nvbandwidth") if v.metric == "run")
    assert not run.passed and "printed twice (lines 1 and 6)" in str(run.detail), run


def test_a_json_testcase_passed_with_nothing_measured_fails(tmp_path, capsys):
    """-j output whose device_to_host_memcpy_ce says Passed with no matrix and no sum: it was dropped, and the
    run passed unless a d2h floor asked for it."""
    import json

    row = ["26.03", "25.94", "25.97", "26", "26.19", "25.95", "26", "25.97"]
    cases = [{"name": "host_to_device_memcpy_ce", "status": "Passed", "bandwidth_description":
              "memcpy CE CPU(row) -> GPU(column) bandwidth (GB/s)", "bandwidth_matrix": [row], "sum": "208.05"},
             {"name": "device_to_host_memcpy_ce", "status": "Passed"}]
    body = json.dumps({"nvbandwidth": {"version": "v0.7", "testcases": cases}})
    code, out, _ = cc(capsys, "--input", _file(tmp_path, body), "--expect", "h2d_min=25")
    assert code == 1, out
    assert ("FAIL nvbandwidth: run: failed: testcase device_to_host_memcpy_ce: status Passed but no bandwidth_matrix "
            "and no sum: it measured nothing") in out


def test_a_json_matrix_without_its_sum_fails_the_probe(tmp_path, capsys):
    """-j output whose only matrix lost its sum: it passed h2d_min, where the text's matrix without a SUM line fails."""
    import json

    row = ["26.03", "25.94", "25.97", "26", "26.19", "25.95", "26", "25.97"]
    cases = [{"name": "host_to_device_memcpy_ce", "status": "Passed", "bandwidth_description":
              "memcpy CE CPU(row) -> GPU(column) bandwidth (GB/s)", "bandwidth_matrix": [row], "sum": None}]
    body = json.dumps({"nvbandwidth": {"version": "v0.7", "testcases": cases}})
    code, out, _ = cc(capsys, "--input", _file(tmp_path, body), "--expect", "h2d_min=25")
    assert code == 1, out
    assert ("FAIL nvbandwidth: run: failed: testcase host_to_device_memcpy_ce: a bandwidth_matrix with no sum") in out
