"""`clustercheck probe nccl-tests --input FILE`: real captures judged through the real CLI (exit 0 passed,
1 failed, 2 not nccl-tests output or a bad expectation), plus #wrong, crashes and floors."""

from __future__ import annotations

from pathlib import Path

import pytest

from clustercheck import probes
from clustercheck.cli import main
from clustercheck.probes import nccl_tests as probe
from evidence import TOOLS, text

H100 = TOOLS / "nccl-tests" / "allreduce-h100-2node-16rank-mpirun.txt"
GB300 = TOOLS / "nccl-tests" / "alltoall-4xgb300-single-node-new-format-na.txt"
DGX2 = TOOLS / "nccl-tests" / "allreduce-dgxa100-2node-oldformat-error-col.txt"


def cc(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["probe", "nccl-tests", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def _file(tmp_path: Path, lines: list[str]) -> str:
    path = tmp_path / "run.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


def test_h100_two_node_capture_is_not_judged_on_its_platform_without_a_line_rate(capsys):
    """The profile's busbw_min is one node's NVLink floor (430); this capture spans 2 nodes, so the network
    bounds it and the NVLink floor never judges it. The profile's fabric rule reads the line rate from the
    nodes, which a capture does not carry: the busbw is not judged (exit 3), never passed."""
    code, out, err = cc(capsys, "--input", str(H100), "--platform", "h100-sxm-8x")
    assert code == 3, out + err
    assert "platform: h100-sxm-8x" in out and "PASS all_reduce_perf: GPU model: NVIDIA H100 80GB HBM3" in out
    busbw = next(line for line in out.splitlines() if ": busbw: " in line)
    assert busbw.startswith("NOT JUDGED all_reduce_perf: busbw: not judged: network line rate unknown (give --expect "
                            "fabric_gbps=N or a profile's fabric block); 338.82 / 337.35 GB/s (out-of-place / "
                            "in-place) at 8589934592 B; 2 node(s)"), busbw
    assert "430" not in busbw
    assert "16 ranks on 2 host(s)" in out and "Avg bus bandwidth 70.742" in out and out.endswith("1 not judged)\n")


@pytest.mark.parametrize("floor, code", [("300", 0), ("340", 1)])
def test_a_multinode_floor_judges_the_two_node_capture(capsys, floor, code):
    got, out, _ = cc(capsys, "--input", str(H100), "--platform", "h100-sxm-8x", "--expect",
                     f"busbw_min_multinode={floor}")
    assert got == code and f"floor {floor} GB/s (busbw_min_multinode)" in out


@pytest.mark.parametrize("expect, code", [("busbw_min=600", 0), ("busbw_min=650", 1), ("busbw_min={alltoall: 650}", 1),
                                          ("busbw_min={all_reduce: 900}", 3)])
def test_single_node_floor_uses_the_worse_placement_at_the_largest_size(capsys, expect, code):
    got, out, _ = cc(capsys, "--input", str(GB300), "--expect", expect)
    assert got == code, out
    assert "627.69 / 680.70 GB/s (out-of-place / in-place) at 17179869184 B; 1 node(s)" in out


def test_no_busbw_floor_is_not_judged_never_passed(capsys):
    """As ib-write-bw without ib_write_bw_min: the data verdicts passed, the busbw was judged against nothing,
    so the probe says not all judged (exit 3, README's table), never passed."""
    code, out, _ = cc(capsys, "--input", str(GB300))
    assert code == 3, out
    assert ("NOT JUDGED alltoall_perf: busbw: not judged: no busbw floor given (busbw_min); 627.69 / 680.70 GB/s "
            "(out-of-place / in-place) at 17179869184 B; 1 node(s)") in out
    assert not any(line.startswith("PASS alltoall_perf: busbw") for line in out.splitlines())


def test_node_count_from_busbw_ratio_without_rank_lines(capsys):
    code, out, _ = cc(capsys, "--input", str(DGX2), "--platform", "a100-sxm-8x")
    assert code == 3 and "2 node(s): 16 ranks (from busbw/algbw, no Rank lines) at 8 GPUs per node" in out
    code, out, _ = cc(capsys, "--input", str(DGX2), "--expect", "busbw_min=200")
    assert code == 1 and "node count unknown (no Rank lines): judged as one node; floor 200 GB/s" in out


def test_wrong_values_fail_naming_size_and_count(tmp_path, capsys):
    lines = text("nccl-tests", H100.name).splitlines()
    row = lines[-5]                       # the 2147483648 B row: in-place #wrong 0 -> 4
    assert row.split()[0] == "2147483648"
    lines[-5] = row[:row.rindex("0")] + "4"
    lines[-2] = "# Out of bounds values : 4 FAILED"
    code, out, _ = cc(capsys, "--input", _file(tmp_path, lines[2:]))
    assert code == 1
    assert "FAIL 2147483648 B in-place: wrong: 4 wrong elements at size 2147483648 B in-place (output line 52)" in out
    assert "FAIL all_reduce_perf: out_of_bounds: Out of bounds values : 4 FAILED" in out


CRASH = "ztan-mig-gq73: Test NCCL failure common.cu:1058 'unhandled system error (run with NCCL_DEBUG=INFO for details)'"


@pytest.mark.parametrize("cut, tail, named", [
    (40, [CRASH, "MPI_ABORT was invoked on rank 9 in communicator MPI_COMM_WORLD"], f"crashed: line 41: {CRASH}"),
    (19, ["ztan-mig-235z: Test CUDA failure common.cu:892 'out of memory'"],
     "crashed: line 20: ztan-mig-235z: Test CUDA failure common.cu:892 'out of memory'"),
    (40, [], "incomplete: line 40: the table stops at 524288 B without its 'Out of bounds values' footer"),
])
def test_crashed_and_cut_off_runs_fail_naming_the_line(tmp_path, capsys, cut, tail, named):
    lines = text("nccl-tests", H100.name).splitlines()[2:]
    code, out, _ = cc(capsys, "--input", _file(tmp_path, lines[:cut] + tail))
    fails = [line for line in out.splitlines() if line.startswith("FAIL ")]
    assert code == 1 and any(f": run: {named}" in line for line in fails), out  # subject: the binary when known


def test_validation_off_is_not_judged_never_passed():
    run = probe.parse(text("nccl-tests", "allgather-8xa100-oldformat-validation0-superbench.txt"))
    verdicts = probe.judge(run, {})
    check = next(v for v in verdicts if v.what == "data check")
    assert not check.judged and not check.passed and check.word == "NOT JUDGED"
    assert "not judged: validation off (-c 0" in check.detail and "the data was not checked" in check.detail


def test_one_unchecked_result_among_checked_ones_is_not_judged(tmp_path, capsys):
    """validation: 1 in the header and #wrong 0 everywhere else: the one N/A is a result nobody checked."""
    lines = text("nccl-tests", H100.name).splitlines()[2:]
    row = lines[-3]                       # the 8589934592 B row: in-place #wrong 0 -> N/A
    assert row.split()[0] == "8589934592" and "validation: 1" in lines[0]
    lines[-3] = row[:row.rindex("0")] + "N/A"
    code, out, _ = cc(capsys, "--input", _file(tmp_path, lines))
    assert code == 3, out
    assert ("NOT JUDGED 8589934592 B in-place: wrong: not judged: #wrong N/A at 8589934592 B in-place (output "
            "line 54) where the header says validation: 1 and the other results were checked") in out
    assert "PASS all_reduce_perf: wrong: #wrong 0 in 61 checked result(s)" in out


def test_a_column_unchecked_throughout_is_the_tools_own_and_passes_as_before():
    """nccl-tests 2.28 prints N/A for every in-place alltoall #wrong: nothing there was left out."""
    verdicts = probe.judge(probe.parse(text("nccl-tests", GB300.name)), {"busbw_min": 600})
    assert all(v.judged for v in verdicts)
    assert [v.detail for v in verdicts if v.what == "wrong"] == ["#wrong 0 in 2 checked result(s)"]


def test_the_tools_own_avg_check_failing_fails(tmp_path, capsys):
    lines = text("nccl-tests", GB300.name).splitlines()[2:]
    lines = [l.replace("381.478", "381.478 FAILED") for l in lines]
    code, out, _ = cc(capsys, "--input", _file(tmp_path, lines))
    assert code == 1 and "FAIL alltoall_perf: Avg bus bandwidth: the tool's own check failed" in out


@pytest.mark.parametrize("args, message", [
    (["--input", str(TOOLS / "nvbandwidth" / "h2d-memcpy-ce-8gpu-readme.txt")], "expected nccl-tests or rccl-tests"),
    (["--input", str(GB300), "--expect", "busbw_min={allreduce: 400}"], "busbw_min: 'allreduce' is not a collective"),
    (["--input", str(GB300), "--expect", "busbw_min=fast"], "busbw_min"),
])
def test_not_the_tools_output_or_a_bad_floor_is_one_line_exit_4(capsys, args, message):
    code, out, err = cc(capsys, *args)
    assert code == 4 and message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_live_collect_skips_with_what_to_give():
    outcome = probes.run_live(probes.get("nccl-tests"), {})
    assert outcome.outcome == "skipped" and "--input FILE" in outcome.reason


def test_a_capture_missing_its_last_rank_line_fails_against_the_busbw_algbw_ratio(tmp_path, capsys):
    # allreduce-h100-2node-16rank-mpirun.txt edited: its `Rank 15` line removed (the audit's repro). Ranks 0..14
    # count without a gap, and no platform says 8 per host: only busbw/algbw (338.82/180.71 = 2*15/16) tells
    lines = [line for line in text("nccl-tests", H100.name).splitlines() if "Rank 15 " not in line]
    code, out, _ = cc(capsys, "--input", _file(tmp_path, lines), "--expect", "fabric_gbps=400",
                      "--expect", "busbw_min_multinode=100")
    assert code == 1, out  # PASS "15 rank(s) 0..14 on 2 host(s)" before
    assert "FAIL all_reduce_perf: Rank lines: 15 Rank line(s) on 2 host(s): busbw/algbw 338.82/180.71 = 1.875 says " \
           "16 ranks (all_reduce), the Rank lines list 15: a Rank line is missing or added" in out


def test_busbw_is_not_judged_at_a_smaller_size_when_the_largest_row_cannot_be_read_or_is_missing(tmp_path, capsys):
    # the same capture edited: the largest size's out-of-place busbw written `nan` (row refused), or its row removed
    lines = text("nccl-tests", H100.name).splitlines()
    last = max(i for i, line in enumerate(lines) if line.strip().startswith("8589934592 "))
    nan = lines[:last] + [lines[last].replace("338.82", "   nan")] + lines[last + 1:]
    code, out, _ = cc(capsys, "--input", _file(tmp_path, nan), "--expect", "busbw_min_multinode=100")
    assert code == 1 and "PASS all_reduce_perf: busbw" not in out, out  # PASS at 4294967296 B before
    assert f"NOT JUDGED all_reduce_perf: busbw: not judged: the table row at line {last + 1} could not be read: the " \
           "busbw at the largest size is not known" in out
    code, out, _ = cc(capsys, "--input", _file(tmp_path, lines[:last] + lines[last + 1:]),
                      "--expect", "busbw_min_multinode=100")
    assert code == 1 and "NOT JUDGED all_reduce_perf: busbw: not judged: the header promises sizes up to 8589934592 B " \
                         "and the table stops at 4294967296 B" in out, out
