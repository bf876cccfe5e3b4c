"""Honest verdicts, one rule at a time, each on a real capture from tests/fixtures (edited where the rule is
about an edit: a number that is not one, a subject dropped or listed twice). Judged through the real CLI
(`clustercheck probe NAME --input FILE`) and, for the tools a suite also runs, through the same kind's
judge (`measure: nccl_tests`, `measure: nvbandwidth`): both paths must agree.

- numbers that are not numbers (nan, inf, 1e400, a negative count or temperature) fail or are refused;
- a judge that saw nothing says `not judged` and exits 5; one that saw less than the whole fails, naming
  what is missing, duplicated or contradictory;
- real evidence whose visible part decides is judged, not refused.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from clustercheck.cli import main
from clustercheck.kinds import KINDS
from clustercheck.kinds.base import Answers, CheckSpec, Rules
from clustercheck.schema import Fields
from evidence import TOOLS, text
from nccl_standin import asked, one_node

NCCL = "nccl-tests"
H100 = "allreduce-h100-2node-16rank-mpirun.txt"
A100_ALLGATHER = "allgather-8xa100-oldformat-validation0-superbench.txt"
GB300 = "alltoall-4xgb300-single-node-new-format-na.txt"
SRUN = "allreduce-h100-2node-16rank-srun-label-trailing-empty-line.txt"
NVB = "nvbandwidth"
H2D = "h2d-memcpy-ce-8gpu-readme.txt"
D2D = "d2d-memcpy-write-ce-8gpu-readme.txt"
P5 = "d2d-bidirectional-write-ce-total-8xh100-p5.txt"
GB200_SUM = "all-tests-grep-SUM-gb200-oci.txt"
GH200 = "all-tests-gh200-v0.6-waived-superbench-fixture.txt"
Q = "nvidia-smi-q"
H100_Q = "h100-80gb-hbm3-nvidia-smi-a-della.txt"
H100_8X_Q = "h100-sxm5-8gpu-565.57-nvidia-smi-a-nvsim.txt"
# the largest row of the H100 capture: 8 GiB, out-of-place time algbw busbw #wrong, in-place the same
LARGEST = ("  8589934592    2147483648     float     sum      -1    47535  180.71  338.82      0    47743  179.92"
           "  337.35      0")


def probe(capsys: pytest.CaptureFixture[str], tmp_path: Path, name: str, body: str, *args: str) -> tuple[int, str]:
    """Exit code and output (stdout, then stderr) of `clustercheck probe NAME --input FILE ARGS`."""
    path = tmp_path / "capture.txt"
    path.write_text(body, encoding="utf-8")
    code = main(["probe", name, "--input", str(path), *args])
    out = capsys.readouterr()
    return code, out.out + out.err


def edit(body: str, old: str, new: str, count: int = 1) -> str:
    assert body.count(old) >= count, old
    return body.replace(old, new, count)


def kind_verdicts(measure: str, params: dict[str, Any], stdout: str, binary: str) -> list[Any]:
    """The verdicts `measure: <kind>` gives a node whose first rank ran the tool and printed `stdout`."""
    kind = KINDS[measure]
    check = CheckSpec("x", measure, "node", kind.parse(Fields(params, "s.yaml", "checks[0].params")), (), 60.0, "",
                      "s.yaml", 1)
    argv = [binary]
    if measure == "nccl_tests":  # the capture as this node's run of what it asked (tests/nccl_standin.py)
        stdout = one_node(stdout)
        argv = asked(stdout, binary)
    ran = {"host": "node7", "binary": binary, "argv": argv, "outcome": "ran", "returncode": 0,
           "timed_out": False, "timeout": 54.0, "seconds": 1.0, "stdout": stdout, "stdout_bytes": len(stdout),
           "truncated": False, "stderr_tail": ""}
    _, verdicts = kind.judge(Answers(check, [ran, {}], [{"host": "node7"}, {"host": "node7"}], "gloo"), Rules({}))
    return verdicts


def captured(folder: str, name: str) -> str:
    """What the tool printed: the fixture without its source line and the blank line after it."""
    return "\n".join(text(folder, name).split("\n")[2:])


# -- 1. numbers that are not numbers ----------------------------------------------------------------------

NOT_NUMBERS = ["nan", "inf", "1e400", "-5"]


@pytest.mark.parametrize("value", NOT_NUMBERS)
@pytest.mark.parametrize("column", ["busbw", "algbw", "time"])
def test_a_busbw_algbw_or_time_that_is_not_a_number_fails_both_paths(capsys, tmp_path, value, column):
    old = {"busbw": "180.71  338.82", "algbw": "47535  180.71", "time": "-1    47535"}[column]
    new = {"busbw": f"180.71  {value}", "algbw": f"47535  {value}", "time": f"-1    {value}"}[column]
    body = edit(text(NCCL, H100), LARGEST, LARGEST.replace(old, new))
    code, out = probe(capsys, tmp_path, "nccl-tests", body, "--platform", "h100-sxm-8x")
    assert code == 1, out
    why = "below 0" if value == "-5" else "not a number"
    assert re.search(rf"FAIL all_reduce_perf: run: incomplete: line \d+: a table row with .*{why}", out), out
    busbw = " ".join(line for line in out.splitlines() if ": busbw: " in line)
    assert value not in busbw and "8589934592 B" not in busbw   # the broken row is never read as a busbw
    run = next(v for v in kind_verdicts("nccl_tests", {}, body, "all_reduce_perf") if v.metric == "run")
    assert not run.passed and why in str(run.detail)


@pytest.mark.parametrize("value, why", [("-5", "below 0"), ("nan", "not a number"), ("2.5", "not a whole count")])
def test_a_wrong_count_that_is_not_a_count_fails_both_paths(capsys, tmp_path, value, why):
    row = LARGEST.replace("338.82      0", f"338.82  {value:>5}")
    body = edit(text(NCCL, H100), LARGEST, row)
    code, out = probe(capsys, tmp_path, "nccl-tests", body)
    assert code == 1 and why in out and "#wrong 0" not in out, out
    verdicts = kind_verdicts("nccl_tests", {}, body, "all_reduce_perf")
    assert any(not v.passed and why in str(v.detail) for v in verdicts)


def test_an_avg_bus_bandwidth_that_is_not_a_number_fails(capsys, tmp_path):
    body = edit(text(NCCL, H100), "# Avg bus bandwidth    : 70.742", "# Avg bus bandwidth    : nan")
    code, out = probe(capsys, tmp_path, "nccl-tests", body)
    assert code == 1 and "Avg bus bandwidth 'nan' is not a finite number" in out, out


@pytest.mark.parametrize("value", ["nan", "inf", "1e400", "-26.00"])
def test_an_nvbandwidth_cell_that_is_not_a_number_fails_both_paths(capsys, tmp_path, value):
    body = edit(text(NVB, H2D), "26.00     26.19", f"{value}     26.19")
    code, out = probe(capsys, tmp_path, "nvbandwidth", body, "--platform", "a100-sxm-8x")
    assert code == 1 and "a matrix cell that no tool measured: row 0 column 3" in out, out
    assert "lowest nan" not in out
    run = kind_verdicts("nvbandwidth", {"testcases": ["host_to_device_memcpy_ce"]}, captured(NVB, H2D).replace(
        "26.00     26.19", f"{value}     26.19"), "nvbandwidth")[0]
    assert run.metric == "run" and not run.passed and "row 0 column 3" in str(run.detail)


@pytest.mark.parametrize("value", ["nan", "inf", "-44013.06"])
def test_an_nvbandwidth_sum_that_is_not_a_number_fails(capsys, tmp_path, value):
    body = edit(text(NVB, P5), "_total 44013.06", f"_total {value}")
    code, out = probe(capsys, tmp_path, "nvbandwidth", body)
    assert code == 1 and "SUM device_to_device_bidirectional_memcpy_write_ce_total" in out, out


@pytest.mark.parametrize("value, why", [("-1", "counter unreadable"), ("1e400", "counter unreadable")])
def test_an_ecc_counter_that_is_no_count_fails(capsys, tmp_path, value, why):
    body = edit(text(Q, H100_Q), "DRAM Uncorrectable            : 0", f"DRAM Uncorrectable            : {value}")
    code, out = probe(capsys, tmp_path, "ecc", body)
    assert code == 1 and why in out and repr(value) in out, out


@pytest.mark.parametrize("value", ["-300 C", "1e400 C", "500 C"])
def test_a_temperature_no_gpu_can_have_fails(capsys, tmp_path, value):
    body = edit(text(Q, H100_Q), "GPU Current Temp                  : 33 C", f"GPU Current Temp                  : {value}")
    code, out = probe(capsys, tmp_path, "throttle", body)
    temperature = next(line for line in out.splitlines() if ": temperature: " in line)
    assert code == 1 and temperature.startswith("FAIL "), out
    assert any(why in temperature for why in ("no temperature a GPU can have", "unreadable", "(limit 84 C)"))


def test_an_nvlink_speed_that_is_not_a_number_is_refused_and_zero_fails(capsys, tmp_path):
    a100 = text("nvlink-status", "a100-sxm4-gpu7-nvlink-s-azure.txt")
    code, out = probe(capsys, tmp_path, "nvlink", edit(a100, "Link 3: 25 GB/s", "Link 3: 1e400 GB/s"))
    assert code == 4 and "expected 'Link N: 25 GB/s'" in out
    code, out = probe(capsys, tmp_path, "nvlink", edit(a100, "Link 3: 25 GB/s", "Link 3: 0 GB/s"))
    assert code == 1 and "link 3 at 0 GB/s: up but moving nothing" in out, out


# -- 2. a judge that saw nothing, or less than the whole -----------------------------------------------------

def test_an_nvbandwidth_capture_with_only_its_header_judged_nothing(capsys, tmp_path):
    head = text(NVB, GH200).split("Running host_to_device_memcpy_ce.")[0]
    assert "Device 0: NVIDIA GH200 480GB" in head
    code, out = probe(capsys, tmp_path, "nvbandwidth", head, "--platform", "gh200")
    assert code == 5, out
    assert "NOT JUDGED nvbandwidth: run: not judged: no testcase result in this capture" in out
    assert "PASS" not in out and out.rstrip().endswith("(0 passed, 0 failed, 1 not judged)")


def test_an_nvbandwidth_sum_of_zero_fails(capsys, tmp_path):
    body = edit(text(NVB, GB200_SUM), "SUM host_to_device_memcpy_ce 802.86", "SUM host_to_device_memcpy_ce 0.00")
    code, out = probe(capsys, tmp_path, "nvbandwidth", body, "--platform", "a100-sxm-8x")
    assert code == 1 and "FAIL host_to_device_memcpy_ce: matrix: SUM host_to_device_memcpy_ce 0.00: nothing was " \
                         "measured" in out, out


def test_an_nvbandwidth_matrix_with_a_row_removed_fails_naming_it(capsys, tmp_path):
    lines = text(NVB, D2D).split("\n")
    row3 = next(i for i, line in enumerate(lines) if line.startswith("3 "))
    body = "\n".join(lines[:row3] + lines[row3 + 1:])
    code, out = probe(capsys, tmp_path, "nvbandwidth", body, "--platform", "a100-sxm-8x")
    assert code == 1, out
    assert "FAIL device_to_device_memcpy_write_ce: matrix: row 3 missing; a GPU-pair matrix of 7 rows and 8 columns: " \
           "not square" in out
    whole = [v for v in kind_verdicts("nvbandwidth", {"testcases": ["device_to_device_memcpy_write_ce"]},
                                      "\n".join(body.split("\n")[2:]), "nvbandwidth") if v.metric == "matrix"]
    assert [v.passed for v in whole] == [False] and "row 3 missing" in str(whole[0].detail)


def test_nvbandwidth_prints_the_sum_and_the_min_median_max_of_each_matrix(capsys, tmp_path):
    code, out = probe(capsys, tmp_path, "nvbandwidth", text(NVB, P5))
    assert code == 0, out
    assert ("PASS device_to_device_bidirectional_memcpy_write_ce_total: matrix: SUM "
            "device_to_device_bidirectional_memcpy_write_ce_total 44013.06 GB/s; 56 cell(s): min 785.78 (GPU0<->GPU5), "
            "median 785.93, max 786.14 (GPU7<->GPU6) GB/s") in out


@pytest.mark.parametrize("how", [("--platform", "a100-sxm-8x"), ("--expect", "gpu_count=8")])
def test_seven_rank_lines_fail_a_platform_of_eight_gpus_both_paths(capsys, tmp_path, how):
    body = "\n".join(line for line in text(NCCL, A100_ALLGATHER).split("\n") if "Rank  7" not in line)
    code, out = probe(capsys, tmp_path, "nccl-tests", body, *how)
    assert code == 1, out
    assert ("FAIL all_gather_perf: Rank lines: 7 Rank line(s) on 1 host(s): 7 rank(s) on localhost, the platform has "
            "8 GPUs per node (no rank on device 7); the header says nThread 1 nGpus 8 (8 rank(s) per process) and "
            "pid 112372 on localhost has 7") in out
    # the run path has no platform, and the header alone already says a rank is missing
    ranks = next(v for v in kind_verdicts("nccl_tests", {"binary": "all_gather_perf"}, body, "all_gather_perf")
                 if v.metric == "Rank lines")
    assert not ranks.passed and "pid 112372 on node7 has 7" in str(ranks.detail)   # run on node7 (nccl_standin)


def test_a_rank_listed_twice_fails(capsys, tmp_path):
    lines = text(NCCL, GB300).split("\n")
    rank1 = next(line for line in lines if "Rank  1 " in line)
    body = "\n".join(lines[:lines.index(rank1) + 1] + [rank1] + lines[lines.index(rank1) + 1:])
    code, out = probe(capsys, tmp_path, "nccl-tests", body)
    assert code == 1 and "rank 1 listed twice" in out and "device 1 on GPU-3882 used by more than one rank" in out


def test_a_one_rank_capture_moved_no_data_and_its_busbw_is_not_judged(capsys, tmp_path):
    body = "\n".join(line for line in text(NCCL, GB300).split("\n") if not re.search(r"Rank  [123] ", line))
    code, out = probe(capsys, tmp_path, "nccl-tests", body, "--platform", "h100-sxm-8x")
    assert "NOT JUDGED alltoall_perf: busbw: not judged: one rank moved no data between GPUs" in out
    assert "PASS alltoall_perf: busbw" not in out and "not judged)" in out
    assert code == 1 and "1 rank(s) on GPU-3882, the platform has 8 GPUs per node" in out  # and it is 1 of 8
    code, out = probe(capsys, tmp_path, "nccl-tests", body)  # never a pass; the rows' busbw/algbw (0.75) still
    # say the 4 ranks the capture ran, so its lone Rank line fails against them
    assert code == 1 and "NOT JUDGED alltoall_perf: busbw" in out and "PASS alltoall_perf: busbw" not in out
    assert "FAIL alltoall_perf: Rank lines: 1 Rank line(s) on 1 host(s): busbw/algbw 680.7/907.6 = 0.75 says 4 " \
           "ranks (alltoall), the Rank lines list 1" in out


@pytest.mark.parametrize("where, row", [("drop", "     1048576 "), ("duplicate", "     1048576 ")])
def test_a_table_row_dropped_or_repeated_fails_against_the_header_both_paths(capsys, tmp_path, where, row):
    lines = text(NCCL, H100).split("\n")
    at = next(i for i, line in enumerate(lines) if line.startswith(row))
    lines[at:at + 1] = [] if where == "drop" else [lines[at], lines[at]]
    body = "\n".join(lines)
    code, out = probe(capsys, tmp_path, "nccl-tests", body)
    assert code == 1 and "table rows: " in out and "the header promises 31 size(s) per sweep" in out, out
    assert any(v.metric == "table rows" and not v.passed for v in kind_verdicts("nccl_tests", {}, body,
                                                                               "all_reduce_perf"))


def test_an_nvlink_capture_with_a_gpu_block_removed_fails(capsys, tmp_path):
    body = text("nvlink-status", "3x-rtxa6000-nvlink-s-one-gpu-inactive.txt")
    start = body.index("GPU 1: ")
    body = body[:start] + body[body.index("GPU 2: "):]
    code, out = probe(capsys, tmp_path, "nvlink", body)
    assert code == 1 and "FAIL node: GPUs listed: GPU 1 not listed" in out, out
    code, out = probe(capsys, tmp_path, "nvlink", text("nvlink-status", "a100-sxm4-gpu7-nvlink-s-azure.txt"),
                      "--platform", "a100-sxm-8x")
    assert code == 1 and "PASS GPU7: active NVLinks: 12 active link(s)" in out
    assert "FAIL node: GPUs listed: GPU 0, 1, 2, 3, 4, 5, 6 not listed; 1 GPU(s) listed, the platform has 8" in out


def test_an_nvidia_smi_q_with_its_last_gpu_section_cut_fails_versions(capsys, tmp_path):
    body = text(Q, H100_8X_Q)
    body = body[:body.rindex("\nGPU 00000000:")] + "\n"
    code, out = probe(capsys, tmp_path, "versions", body, "--platform", "h100-sxm-8x")
    assert code == 1, out
    assert ("FAIL node: GPU sections: versions: the header says Attached GPUs: 8 and the capture has 7 GPU "
            "section(s)") in out
    assert "FAIL node: GPU count: 7 GPU(s)" in out and "8 GPU(s)" not in out.split("GPU count")[1][:20]
    for name in ("ecc", "throttle", "pcie-link"):  # every probe reading the report counts its sections alike
        code, out = probe(capsys, tmp_path, name, body)
        assert code == 1 and "GPU sections" in out, (name, out)


def test_a_topology_row_listed_twice_fails(capsys, tmp_path):
    body = text("nvidia-smi-topo", "della-8xh100-nv18-6nic-empty-cpu-affinity-tabs.txt")
    row = next(line for line in body.split("\n") if line.startswith("GPU3"))
    code, out = probe(capsys, tmp_path, "topo", edit(body, row + "\n", row + "\n" + row + "\n"), "--platform",
                      "h100-sxm-8x")
    assert code == 1 and "FAIL node: topology matrix: row GPU3 listed twice" in out, out
    code, out = probe(capsys, tmp_path, "topo", edit(body, row + "\n", ""), "--platform", "h100-sxm-8x")
    assert code == 1 and "GPU3 has a column and no row" in out, out


@pytest.mark.parametrize("old, new, why", [
    ("Physical state: LinkUp", "Physical state: Polling", "ACTIVE but physical state Polling"),
    ("Rate: 56", "Rate: 0", "ACTIVE at rate 0"),
    ("Rate: 56", "Rate: nan", "rate 'nan' unreadable"),
])
def test_an_active_ib_port_that_is_not_up_fails(capsys, tmp_path, old, new, why):
    body = edit(text("ibstat", "2x-connectx3-mlx4-dualport-fdr56-active.txt"), old, new)
    code, out = probe(capsys, tmp_path, "ib", body)
    assert code == 1 and why in out, out


def test_an_ib_port_section_missing_fails_against_the_device_port_count(capsys, tmp_path):
    body = text("ibstat", "2x-connectx3-mlx4-dualport-fdr56-active.txt")
    body = body[:body.rindex("\tPort 2:")]
    code, out = probe(capsys, tmp_path, "ib", body)
    assert code == 1 and "FAIL mlx4_1: ports listed: 1 port section(s), the device says it has 2" in out, out


@pytest.mark.parametrize("mark", ["?", "*"])
def test_a_redirect_flag_that_is_neither_plus_nor_minus_is_not_read_as_off(capsys, tmp_path, mark):
    body = text("lspci-acs", "cx7-endpoint-21-00.0-acs-all-minus.txt")
    ctl = next(line for line in body.split("\n") if "ACSCtl:" in line)
    code, out = probe(capsys, tmp_path, "pci-acs", edit(body, ctl, ctl.replace("ReqRedir-", f"ReqRedir{mark}")))
    assert code == 1 and f"redirect state unreadable: lspci printed ReqRedir{mark}" in out, out
    code, out = probe(capsys, tmp_path, "pci-acs", edit(body, ctl, ctl.replace(" ReqRedir-", "")))
    assert code == 1 and "ReqRedir (absent)" in out, out


# -- 3. real evidence whose visible part decides is judged --------------------------------------------------

def test_the_srun_labelled_two_node_capture_passes_its_run_and_data_lines_both_paths(capsys, tmp_path):
    # the nodes' line rate judges its multi-node busbw (without one that line is not judged). The capture
    # ran with -c 0: its data was never checked, so that one line is NOT JUDGED (never a pass) and the
    # probe says "not all judged" (exit 3); every line it does judge passes, none reads as garbled
    code, out = probe(capsys, tmp_path, "nccl-tests", text(NCCL, SRUN), "--platform", "h100-sxm-8x",
                      "--expect", "fabric_gbps=800")
    assert code == 3 and "nccl-tests: not all judged (6 passed, 0 failed, 1 not judged)" in out, out
    assert "PASS all_reduce_perf: run: 16 ranks on 2 host(s) (NVIDIA H100 80GB HBM3); 11 sizes" in out
    assert "garbled" not in out and "PASS all_reduce_perf: out_of_bounds" in out
    assert "PASS all_reduce_perf: Rank lines: 16 rank(s) 0..15 on 2 host(s), each GPU once, 8 per host" in out
    assert "NOT JUDGED all_reduce_perf: data check: not judged: validation off (-c 0" in out
    # the run path asks nccl-tests to check (check: 0 is refused): the same text then fails only that
    verdicts = kind_verdicts("nccl_tests", {"check": 1}, captured(NCCL, SRUN), "all_reduce_perf")
    assert [(v.metric, v.detail) for v in verdicts if not v.passed] == [
        ("wrong", "validation was asked for (-c 1) and the table says N/A: not checked")]


@pytest.mark.parametrize("name, states", [("gdscheck-p-driver-configuration-all-unsupported.txt", "Unsupported"),
                                          ("gdscheck-p-gds1.18-all-compat-no-gpu.txt", "Unsupported or compat")])
def test_a_gdscheck_capture_whose_transports_decide_is_judged_not_refused(capsys, tmp_path, name, states):
    code, out = probe(capsys, tmp_path, "gds", text("gdscheck", name))
    assert code == 1, out
    assert f"FAIL gdscheck: storage transport: no storage transport is Supported (" in out and states in out
    assert "NOT JUDGED gdscheck: platform verification: not judged: the capture stops before GPU INFO" in out
    # cut where nothing shown fails: still refused, since nothing it shows decides
    code, out = probe(capsys, tmp_path, "gds", text("gdscheck", "gdscheck-p-gds1.14-noindent-truncated.txt"))
    assert code == 4 and "nothing it shows fails" in out


def test_an_elided_nvlink_capture_showing_inactive_links_fails_them(capsys, tmp_path):
    code, out = probe(capsys, tmp_path, "nvlink",
                      text("nvlink-status", "v100-sxm2-gpu3-links-3-5-inactive-leading-elision.txt"))
    assert code == 1, out
    assert "FAIL GPU3: active NVLinks: link 3, 5 inactive among 4 active" in out
    assert "NOT JUDGED node: GPUs listed: not judged: the capture is elided at line 2" in out
    assert out.rstrip().endswith("nvlink: failed (0 passed, 1 failed, 1 not judged)")


# -- 6. a long line is read in linear time, in a run as offline ----------------------------------------------

@pytest.mark.parametrize("measure, name, folder, params, binary", [
    ("nccl_tests", H100, NCCL, {}, "all_reduce_perf"),
    ("nvbandwidth", H2D, NVB, {"testcases": ["host_to_device_memcpy_ce"]}, "nvbandwidth"),
])
def test_a_native_tool_printing_one_96_kib_line_is_judged_at_once(measure, name, folder, params, binary):
    import time

    out = captured(folder, name)
    lines = out.split("\n")
    for line in ("x" * (96 << 10), "-" * (96 << 10), "7" * (96 << 10)):
        stdout = "\n".join(lines[:3] + [line] + lines[3:])
        t0 = time.thread_time()  # CPU, not wall: the cores the tests run on are shared with other workers
        kind_verdicts(measure, params, stdout, binary)
        assert time.thread_time() - t0 < 1.0, f"{measure}: a 96 KiB line of {line[0]!r} took too long"


@pytest.mark.parametrize("value", ["nan", -5.0, 2.5])
def test_the_json_output_holds_numbers_to_the_same_rule(value):
    """nccl-tests -J writes NaN as the string "nan" (src/util.cu jsonDouble): a NaN busbw or a nwrong that is no
    count is no result, as in the text table. The document is the H100 capture's last two rows as -J prints them."""
    import json

    from test_toolout_nccl_tests import _json_doc
    from clustercheck.probes import nccl_tests as probe
    from clustercheck.toolout import nccl_tests as reader

    doc = _json_doc()
    place = doc["results"][1]["out_of_place"]
    place["bus_bw" if value == "nan" else "nwrong"] = value
    run = reader.parse(json.dumps(doc))
    assert run.failure is not None and run.failure.startswith("result 2: out-of-place") and len(run.rows) == 1
    verdicts = probe.judge(run, {})
    assert any(v.what == "wrong" and not v.passed and v.subject == "line 2" for v in verdicts)
    assert not any(v.what == "wrong" and v.passed for v in verdicts)


def test_a_probe_in_a_run_never_records_what_it_could_not_judge_as_a_pass(capsys, tmp_path):
    """`measure: probe` gets a probe's verdicts from the node's first rank as measure.probe sends them: one
    that judged nothing is an error (`not judged: ...`), one that judged only a part is an error naming what it
    could not judge; only a probe absent here (ProbeSkip, outcome skipped) is a skip.
    The verdicts are those of the elided V100 capture and the nvbandwidth header-only capture."""
    from clustercheck.errors import HarnessError
    from clustercheck.probes import nvbandwidth, nvlink

    def answers(verdicts: list[Any], name: str) -> Answers:
        kind = KINDS["probe"]
        check = CheckSpec("p", "probe", "node", kind.parse(Fields({"probe": name}, "s.yaml", "checks[0].params")), (),
                          60.0, "", "s.yaml", 1)
        sent = {"outcome": "passed", "reason": "", "host": "node7",
                "verdicts": [{"subject": v.subject, "what": v.what, "passed": v.passed, "judged": v.judged,
                              "detail": v.detail, "measured": None, "expected": None} for v in verdicts]}
        return Answers(check, [sent], [{"host": "node7"}], "gloo")

    head = text(NVB, GH200).split("Running host_to_device_memcpy_ce.")[0]
    nothing = nvbandwidth.judge(nvbandwidth.parse(head), {})
    with pytest.raises(HarnessError, match="^not judged: probe nvbandwidth on node7 judged nothing: nvbandwidth: "
                                           "run: not judged: no testcase result"):
        KINDS["probe"].judge(answers(nothing, "nvbandwidth"), Rules({}))
    elided = nvlink.judge(nvlink.parse(text("nvlink-status", "v100-sxm2-gpu3-links-3-5-inactive-leading-elision.txt")),
                          {})
    _, recorded = KINDS["probe"].judge(answers(elided, "nvlink"), Rules({}))  # a failure stands: GPU3 fails
    assert [(v.subject, v.passed) for v in recorded] == [("GPU3", False)]
    part = [v for v in nvbandwidth.judge(nvbandwidth.parse(text(NVB, D2D)), {"h2d_min": 23.6})]
    assert any(not v.judged for v in part) and all(v.passed for v in part if v.judged)
    with pytest.raises(HarnessError, match="could not judge all it read: nvbandwidth: h2d_min: not judged"):
        KINDS["probe"].judge(answers(part, "nvbandwidth"), Rules({}))
    # beside a failure, what the probe could not judge is said in the item's notes, never dropped
    part_failed = [*part, *(v for v in elided if not v.passed)]
    m, recorded = KINDS["probe"].judge(answers(part_failed, "nvbandwidth"), Rules({}))
    assert [v.subject for v in recorded if not v.passed] == ["GPU3"]
    assert any(n.startswith("probe nvbandwidth could not judge all it read: nvbandwidth: h2d_min: not judged")
               for n in m.notes), m.notes
