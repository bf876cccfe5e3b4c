"""clustercheck.toolout.nccl_measured: a row whose time, algbw and busbw cannot be one nccl-tests measurement
(no time with a bandwidth, busbw above 2 x algbw, algbw above size / time) is refused by the text and the -J
JSON reader alike, as a garbled row is: the run fails, named by line or result; real captures still read."""

from __future__ import annotations

import json

import pytest

from clustercheck.probes import nccl_tests as probe
from clustercheck.toolout import nccl_tests as nt
from evidence import files, text
from test_toolout_nccl_tests import _json_doc

H100 = "allreduce-h100-2node-16rank-mpirun.txt"
LARGEST = ("  8589934592    2147483648     float     sum      -1    47535  180.71  338.82      0    47743  179.92"
           "  337.35      0")

BAD_ROWS = {
    "no time": LARGEST.replace("47535", "    0").replace("47743", "    0"),
    "busbw above 2 x algbw": LARGEST.replace("338.82", "900.00").replace("337.35", "900.00"),
    "absurd bandwidth": LARGEST.replace("180.71  338.82", " 1e300   1e300").replace("179.92  337.35", " 1e300   1e300"),
    "time 180x the bandwidth's": LARGEST.replace("47535", "8589934").replace("47743", "8589934"),
}
WHY = {"no time": "nothing is moved in no time", "busbw above 2 x algbw": "above 2 x its algbw",
       "absurd bandwidth": "not one measurement", "time 180x the bandwidth's": "not one measurement"}


@pytest.mark.parametrize("case", sorted(BAD_ROWS))
def test_a_row_that_is_no_measurement_fails_the_text_run(case):
    body = text("nccl-tests", H100)
    assert LARGEST in body
    run = nt.parse(body.replace(LARGEST, BAD_ROWS[case]))
    line = next(i + 1 for i, s in enumerate(body.splitlines()) if s == LARGEST)
    assert run.failure_kind == "incomplete" and run.failure.startswith(f"line {line}: a table row with out-of-place")
    assert WHY[case] in run.failure and run.rows[-1].size == 4294967296
    verdicts = probe.judge(run, {"busbw_min_multinode": 300, "gpu_count": 8})
    assert not next(v for v in verdicts if v.what == "run").passed
    assert not any(v.what == "busbw" and v.passed for v in verdicts)


@pytest.mark.parametrize("case", ["no time", "busbw above 2 x algbw", "absurd bandwidth", "slow time"])
def test_a_json_result_that_is_no_measurement_fails_the_run(case):
    doc = _json_doc()
    half = doc["results"][1]["out_of_place"]
    if case == "no time":
        half["time"] = 0.0
    elif case == "busbw above 2 x algbw":
        half["bus_bw"] = 900.0
    elif case == "absurd bandwidth":
        half["alg_bw"] = half["bus_bw"] = 1e300
    else:
        half["time"] = 8589934.0
    run = nt.parse(json.dumps(doc))
    assert run.failure and run.failure.startswith("result 2: out-of-place"), run.failure
    assert [r.size for r in run.rows] == [4294967296]


def test_the_captures_and_the_tools_own_roundings_still_read():
    for name in files("nccl-tests"):
        run = nt.parse(text("nccl-tests", name))
        assert not run.unread_rows, (name, run.unread_rows)
    # a cputime table: the time is the CPU's and the bandwidths come from the GPU time (common.cu)
    cpu = text("nccl-tests", H100).replace("     time   algbw", "  cputime   algbw").replace("47535", "  900")
    assert not nt.parse(cpu).unread_rows
    # nccl-tests before 2020-06 (ec1b5e2) and hypercube: algbw = size x (n-1)/n / time, below size / time
    assert not nt.parse(text("nccl-tests", H100).replace("180.71  338.82", " 90.36  169.41")).unread_rows
    # getFloatStr past 7 columns prints a 10 s time with 2 digits: 8 GiB at 0.8 GB/s
    slow = LARGEST.replace("47535  180.71  338.82", "1.1e+07    0.80    1.50")
    assert not nt.parse(text("nccl-tests", H100).replace(LARGEST, slow)).unread_rows
    # NCCL 1.x test/single reduce_scatter prints busbw = algbw x (n-1): a `bytes N` table is not bounded by 2
    nccl1 = ("#   Rank  0 uses device  0 [0x04] Tesla P100\n#   Rank  1 uses device  1 [0x05] Tesla P100\n"
             "#      bytes             N    type      op     time  algbw  busbw      res     time  algbw  busbw"
             "      res\n  4294967296    1073741824   float     sum   42.715 100.55 703.85    5e-07   42.677 100.64"
             " 704.48    5e-07\n Out of bounds values : 0 OK\n Avg bus bandwidth    : 703.0\n")
    assert not nt.parse(nccl1).unread_rows
