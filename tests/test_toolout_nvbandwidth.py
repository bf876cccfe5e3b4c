"""clustercheck.toolout.nvbandwidth: every captured nvbandwidth output read to the key numbers of
tests/fixtures/tool-outputs/INDEX.md; -j JSON, --perfFormatter and failures built from the captures and
NVIDIA/nvbandwidth's own printing (json_output.cpp, inline_common.h, memcpy.cpp, error_handling.h)."""

from __future__ import annotations

import json

import pytest

from clustercheck.toolout import NotToolOutput
from clustercheck.toolout import nvbandwidth as nb
from evidence import files, text

GH200 = "all-tests-gh200-v0.6-waived-superbench-fixture.txt"
H2D = "h2d-memcpy-ce-8gpu-readme.txt"
D2D = "d2d-memcpy-write-ce-8gpu-readme.txt"


def sig3(value: float | None) -> str:
    assert value is not None
    return f"{value:.3g}"


def test_every_capture_is_tested():
    tested = {GH200, H2D, D2D, "h2d-bidirectional-memcpy-ce-8gpu-readme.txt", "all-tests-grep-SUM-gb200-oci.txt",
              "d2d-bidirectional-write-ce-total-8xh100-p5.txt", "all-tests-partial-dgx-station-gb300-c2c.txt"}
    assert {p.name for p in files("nvbandwidth")} == tested


CRASHED = "one-to-all-read-sm-8xl40s-aborted-core-dumped.txt"


def test_crashed_capture_names_the_pattern_check_line():
    """NVIDIA/nvbandwidth#19: v0.4 on 8 x L40S aborts in its data check; no matrix was printed."""
    run = nb.parse(text("nvbandwidth-crashed", CRASHED))
    assert [p.name for p in files("nvbandwidth-crashed")] == [CRASHED]
    assert (run.version, run.driver, len(run.devices), run.devices[7]) == ("v0.4", "535.154.05", 8,
                                                                         nb.Device(7, "NVIDIA L40S", None, None))
    assert run.ran == ("one_to_all_read_sm",) and run.testcases == () and run.failure_line == 23
    assert run.failure == "line 23: Invalid value when checking the pattern at <0x7fac6200e480>"


def test_h2d_readme_matrix_without_sum():
    run = nb.parse(text("nvbandwidth", H2D))
    case = run.testcase("host_to_device_memcpy_ce")
    assert case is not None and (case.unit, case.sum, run.failure) == ("GB/s", None, None)
    values = [v for _, _, v in case.cells()]
    assert len(values) == 8 and (min(values), max(values)) == (25.94, 26.19)
    assert case.computed_sum == pytest.approx(208.05) and sig3(case.computed_sum) == "208"
    assert case.matrix["0"]["4"] == 26.19


def test_h2d_bidirectional_readme():
    case = nb.parse(text("nvbandwidth", "h2d-bidirectional-memcpy-ce-8gpu-readme.txt")).testcase(
        "host_to_device_bidirectional_memcpy_ce")
    assert case is not None and case.matrix["0"]["3"] == 19.59 and min(v for _, _, v in case.cells()) == 18.37
    assert case.computed_sum == pytest.approx(150.46) and case.sum is None


def test_d2d_readme_zero_diagonal_is_left_out():
    run = nb.parse(text("nvbandwidth", D2D))
    case = run.testcase("device_to_device_memcpy_write_ce")
    assert case is not None and case.peer_to_peer and case.matrix["3"]["3"] == 0.0
    pairs = case.cells(off_diagonal=True)
    assert len(pairs) == 56 and min(pairs, key=lambda c: c[2]) == ("6", "0", 274.89)
    assert max(pairs, key=lambda c: c[2]) == ("4", "3", 276.76)
    assert run.summary()["device_to_device_memcpy_write_ce"]["min"] == 274.89


def test_p5_total_takes_sum_from_its_line():
    run = nb.parse(text("nvbandwidth", "d2d-bidirectional-write-ce-total-8xh100-p5.txt"))
    (case,) = run.testcases
    assert case.name == "device_to_device_bidirectional_memcpy_write_ce_total" and case.sum == 44013.06
    assert case.computed_sum == pytest.approx(44013.03) and sig3(case.sum) == "4.4e+04"
    assert case.matrix["0"]["0"] is None and len(case.cells(off_diagonal=True)) == 56 and run.failure is None


def test_gh200_all_tests_waived_latency_and_odd_first_matrix():
    run = nb.parse(text("nvbandwidth", GH200))
    assert (run.version, run.cuda_runtime, run.driver, run.waived, len(run.ran)) == ("v0.6", "12040", "550.54.15", 17, 15)
    assert run.devices == (nb.Device(0, "NVIDIA GH200 480GB", "00000009:01:00", None),)
    h2d = run.testcase("host_to_device_memcpy_ce")
    assert h2d is not None and h2d.sum == 1985.60 and len(h2d.rows) == 2 and len(h2d.columns) == 3  # edited upstream
    assert run.testcase("device_to_host_memcpy_ce").sum == 607.26  # type: ignore[union-attr]
    lat = run.testcase("host_device_latency_sm")
    assert lat is not None and (lat.unit, lat.sum, sig3(lat.sum)) == ("ns", 772.58, "773")
    assert len(run.testcases) == 15 and run.failure is None


def test_grep_sum_only_output():
    run = nb.parse(text("nvbandwidth", "all-tests-grep-SUM-gb200-oci.txt"))
    assert run.format == "sum-only" and len(run.testcases) == 43 and all(not t.rows for t in run.testcases)
    assert run.testcase("host_to_device_memcpy_ce").sum == 802.86  # type: ignore[union-attr]
    assert run.testcase("device_to_device_memcpy_read_ce").sum == 9216.17  # type: ignore[union-attr]
    assert run.testcases[-1].name == "device_local_copy" and run.testcases[-1].sum == 13094.41
    assert run.testcase("device_to_device_latency_sm").unit == "ns"  # type: ignore[union-attr]


def test_partial_gb300_with_elisions():
    run = nb.parse(text("nvbandwidth", "all-tests-partial-dgx-station-gb300-c2c.txt"))
    sums = {t.name: t.sum for t in run.testcases}
    assert sums == {"host_to_device_memcpy_ce": 359.05, "device_to_host_memcpy_ce": 377.15,
                    "host_to_device_bidirectional_memcpy_ce": 175.38, "device_to_host_bidirectional_memcpy_ce": None}
    last = run.testcase("device_to_host_bidirectional_memcpy_ce")
    assert last is not None and last.computed_sum == 171.76 and run.failure is None and len(run.notes) == 2


# -- JSON, perfFormatter and failures ------------------------------------------------------------

def _json(status: str = "Passed", **extra: object) -> str:
    """nvbandwidth -j (json_output.cpp) holding the README H2D matrix."""
    row = ["26.03", "25.94", "25.97", "26", "26.19", "25.95", "26", "25.97"]
    case = {"name": "host_to_device_memcpy_ce", "status": status, "bandwidth_description":
            "memcpy CE CPU(row) -> GPU(column) bandwidth (GB/s)", "bandwidth_matrix": [row], "sum": 208.05, **extra}
    return json.dumps({"nvbandwidth": {"version": "v0.8", "git_version": "v0.8", "CUDA Runtime Version": 12080,
                                       "Driver Version": "570.86.15",
                                       "GPU Device list": [f"{i}: NVIDIA H100 80GB HBM3 (00000000:{i:02x}:00): (node1)"
                                                           for i in range(8)],
                                       "testcases": [case, {"name": "device_local_copy", "status": "Waived"}]}},
                      indent=4)


def test_json_output_is_the_same_data():
    run = nb.parse(_json())
    case = run.testcase("host_to_device_memcpy_ce")
    assert case is not None and run.format == "json" and case.sum == 208.05 and case.matrix["0"]["4"] == 26.19
    assert (run.version, run.waived, len(run.devices), run.devices[1].pci_id, run.failure) == ("v0.8", 1, 8,
                                                                                              "00000000:01:00", None)
    failed = nb.parse(_json("Error", error="Invalid value when checking the pattern"))
    assert failed.failure == "testcase host_to_device_memcpy_ce: status Error: Invalid value when checking the pattern"
    assert "stops at char" in (nb.parse(_json()[:300]).failure or "")
    with pytest.raises(NotToolOutput):
        nb.parse('{"results": []}')


def test_perf_formatter_lines_are_sums():
    body = text("nvbandwidth", "all-tests-partial-dgx-station-gb300-c2c.txt").replace(
        "SUM host_to_device_memcpy_ce 359.05", "&&&& PERF host_to_device_memcpy_ce 359.05 +GB/s")
    assert nb.parse(body).testcase("host_to_device_memcpy_ce").sum == 359.05  # type: ignore[union-attr]


@pytest.mark.parametrize("tail, expect", [
    # memcpy.cpp (v0.5-v0.6): the pattern check prints two lines, then std::abort()
    ([" Invalid value when checking the pattern at <0x7f5e2c000000>", " Current offset [ 0/536870912]",
      "Aborted (core dumped)"], " Invalid value when checking the pattern at <0x7f5e2c000000>"),
    # error_handling.h ASSERT, as the v0.7+ compare kernel's failed check ends
    (["ASSERT in expression h_errorFlag == 0 in void memcmpPatternHelper(CUstream, CUdeviceptr, unsigned long long,"
      " unsigned int, CompareKernelFunc, std::shared_ptr<NodeHelper>)() : /src/nvbandwidth/memcpy.cpp:165"],
     "ASSERT in expression h_errorFlag == 0"),
    (["[CUDA_ERROR_PEER_ACCESS_UNSUPPORTED] peer access is not supported between these two devices in expression "
      "cuCtxEnablePeerAccess(peerCtx, 0) in void enablePeerAcess() : /src/nvbandwidth/memcpy.cpp:255"],
     "[CUDA_ERROR_PEER_ACCESS_UNSUPPORTED]"),
    (["Running device_to_host_memcpy_ce."], "Running device_to_host_memcpy_ce: no result before the output ends"),
])
def test_failures_name_their_line(tail, expect):
    lines = text("nvbandwidth", H2D).splitlines()[2:]
    # the copies (and their data check) run before the title and matrix are printed
    run = nb.parse("\n".join(lines[:1] + tail) if "Running" not in tail[0] else "\n".join(lines + tail))
    assert run.failure is not None and expect in run.failure


def test_a_short_matrix_row_fails():
    lines = text("nvbandwidth", D2D).splitlines()[2:]
    lines[5] = lines[5][:40]
    run = nb.parse("\n".join(lines))
    assert run.failure is not None and "values under 8 columns" in run.failure


@pytest.mark.parametrize("folder, name", [
    ("nccl-tests", "allreduce-h100-2node-16rank-mpirun.txt"),
    ("ib_write_bw", "roce-cx5-100g-deepops.txt"),
    ("gdscheck", "gdscheck-p-h100pcie-gds1.15-nvme-supported.txt"),
])
def test_other_tools_output_is_refused(folder, name):
    with pytest.raises(NotToolOutput, match="expected nvbandwidth"):
        nb.parse(text(folder, name))


# -- SUM lines: every one read, named for its test, printed once, under every matrix ---------------

P5 = "d2d-bidirectional-write-ce-total-8xh100-p5.txt"
P5_SUM = "SUM device_to_device_bidirectional_memcpy_write_ce_total 44013.06"


@pytest.mark.parametrize("line", [
    "SUM device_to_device_bidirectional_memcpy_write_ce_total N/A",
    "SUM device_to_device_bidirectional_memcpy_write_ce_total",
    "SUM device_to_device_bidirectional_memcpy_write_ce_total 44O13.06",
    "&&&& PERF device_to_device_bidirectional_memcpy_write_ce_total abc +GB/s",
])
def test_a_sum_line_that_does_not_read_fails_naming_it(line):
    run = nb.parse(text("nvbandwidth", P5).replace(P5_SUM, line))
    assert run.failure is not None and run.failure.startswith("line 14: ") and line in run.failure


def test_a_sum_key_of_another_test_fails():
    body = text("nvbandwidth", GH200).replace("SUM device_to_host_memcpy_ce 607.26",
                                              "SUM device_to_device_memcpy_write_ce 607.26")
    run = nb.parse(body)
    assert run.failure is not None and "SUM device_to_device_memcpy_write_ce" in run.failure
    assert "Running device_to_host_memcpy_ce" in run.failure
    assert run.testcase("device_to_device_memcpy_write_ce") is None


def test_a_sum_key_with_the_running_tests_matrix_suffix_reads():
    run = nb.parse(text("nvbandwidth", P5).replace("memcpy CE GPU(row)",
                                                    "Running device_to_device_bidirectional_memcpy_write_ce.\n"
                                                    "memcpy CE GPU(row)"))
    assert run.failure is None and run.testcases[0].name == "device_to_device_bidirectional_memcpy_write_ce_total"


def test_a_sum_line_twice_fails():
    body = text("nvbandwidth", GH200).replace("SUM host_to_device_memcpy_ce 1985.60",
                                              "SUM host_to_device_memcpy_ce 1985.60\nSUM host_to_device_memcpy_ce 1985.60")
    run = nb.parse(body)
    assert run.failure is not None and "SUM host_to_device_memcpy_ce" in run.failure and "twice" in run.failure
    assert [t.name for t in run.testcases].count("host_to_device_memcpy_ce") == 1


def test_a_run_cut_off_before_its_last_sum_line_fails():
    body = text("nvbandwidth", GH200)
    run = nb.parse(body[:body.index("SUM host_device_latency_sm")])
    assert run.failure is not None and "host_device_latency_sm" in run.failure and "cut off" in run.failure


def test_a_matrix_whose_sum_line_is_lost_fails():
    body = text("nvbandwidth", GH200).replace("SUM device_to_host_memcpy_ce 607.26\n", "")
    run = nb.parse(body)
    assert run.failure is not None and "device_to_host_memcpy_ce" in run.failure and "no SUM line" in run.failure


def test_a_garbled_matrix_cell_fails_naming_its_row():
    lines = text("nvbandwidth", D2D).splitlines()[2:]
    assert lines[6].startswith("3 ")
    lines[6] = lines[6].replace("276.24", "276.2A")
    run = nb.parse("\n".join(lines))
    assert run.failure is not None and "row 3 column 2" in run.failure and "'276.2A'" in run.failure
    assert len(run.testcases[0].rows) == 8


# -- a testcase printed twice: a judge reading it by name sees only the first ------------------------

def _h2d_twice(second_sum: str = "") -> str:
    """The README H2D run with the same test printed again below it, GPU0 and GPU1 at 1.03 and 1.94 GB/s."""
    body = text("nvbandwidth", H2D).split("\n", 2)[2].rstrip()
    low = body.replace("26.03", "1.03").replace("25.94", "1.94")
    return body + "\n\n" + low + (f"\n\n{second_sum}\n" if second_sum else "\n")


def test_a_testcase_running_twice_fails_naming_both_lines():
    run = nb.parse(_h2d_twice())
    assert run.failure == ("line 6: testcase host_to_device_memcpy_ce printed twice (lines 1 and 6): which one is "
                           "the run's cannot be told")
    assert run.failure_line == 6


def test_a_second_matrix_under_one_running_line_fails():
    lines = _h2d_twice().split("\n")
    assert lines[5] == "Running host_to_device_memcpy_ce."
    run = nb.parse("\n".join(lines[:5] + lines[6:]))
    assert run.failure is not None and "testcase host_to_device_memcpy_ce printed twice (lines 2 and 6)" in run.failure


def test_a_testcase_listed_twice_in_json_fails():
    doc = json.loads(_json())
    first = doc["nvbandwidth"]["testcases"][0]
    doc["nvbandwidth"]["testcases"].append(dict(first, bandwidth_matrix=[["1.03"] * 8], sum=8.24))
    run = nb.parse(json.dumps(doc))
    assert run.failure == ("testcase host_to_device_memcpy_ce printed twice (entries 1 and 3 of testcases): which "
                           "one is the run's cannot be told")


# -- JSON: a testcase Passed with nothing measured is no silent pass ------------------------------

def test_a_json_testcase_passed_with_no_matrix_and_no_sum_fails():
    doc = json.loads(_json())
    doc["nvbandwidth"]["testcases"].append({"name": "device_to_host_memcpy_ce", "status": "Passed"})
    run = nb.parse(json.dumps(doc))
    assert run.failure == ("testcase device_to_host_memcpy_ce: status Passed but no bandwidth_matrix and no sum: "
                           "it measured nothing")


def test_a_json_sum_without_its_matrix_is_kept_as_a_sum():
    doc = json.loads(_json())
    doc["nvbandwidth"]["testcases"].append({"name": "device_to_host_memcpy_ce", "status": "Passed", "sum": "607.26"})
    run = nb.parse(json.dumps(doc))
    case = run.testcase("device_to_host_memcpy_ce")
    assert run.failure is None and case is not None and (case.sum, case.rows) == (607.26, ())


# -- JSON: a matrix without its sum is cut or edited output, as in the text ----------------------

@pytest.mark.parametrize("drop", ["absent", "null"])
def test_a_json_matrix_without_its_sum_fails(drop):
    """json_output.cpp writes `sum` with every matrix; the text reader fails a matrix with no SUM line under it."""
    doc = json.loads(_json())
    case = doc["nvbandwidth"]["testcases"][0]
    if drop == "absent":
        del case["sum"]
    else:
        case["sum"] = None
    run = nb.parse(json.dumps(doc))
    assert run.failure == ("testcase host_to_device_memcpy_ce: a bandwidth_matrix with no sum, as nvbandwidth "
                           "writes with every matrix: the output was cut or edited")
