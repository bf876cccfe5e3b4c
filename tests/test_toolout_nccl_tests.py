"""clustercheck.toolout.nccl_tests: every captured nccl-tests log read to the key numbers of
tests/fixtures/tool-outputs/INDEX.md, and the formats without a capture (NCCL 1.x `res` tables, srun
--label, rccl-tests, per-iteration and timestamp columns, -J JSON, crashes) built from real captures and
the printf formats of NVIDIA/nccl-tests src/util.cu, src/common.h and NVIDIA/nccl test/single/."""

from __future__ import annotations

import json
import math

import pytest

from clustercheck.toolout import NotToolOutput
from clustercheck.toolout import nccl_tests as nt
from evidence import files, text

H100 = "allreduce-h100-2node-16rank-mpirun.txt"

# file -> (collective, ranks, hosts, largest size, busbw oop/ip, algbw oop/ip or None, avg, OOB, NCCL version)
EXPECTED = {
    H100: ("all_reduce", 16, 2, 8589934592, (338.82, 337.35), (180.71, 179.92), 70.742, 0, None),
    "allreduce-dgxa100-2node-oldformat-error-col.txt":
        ("all_reduce", None, 0, 4294967296, (188.53, 188.70), (100.55, 100.64), 53.7098, 0, None),
    "allreduce-4x-dgxa100-slurm-oldformat-narrow.txt":
        ("all_reduce", None, 0, 4294967296, (191.05, 191.56), (98.61, 98.87), 113.289, 0, None),
    "allreduce-k8s-sriov-roce-oldformat.txt":
        ("all_reduce", None, 0, 2147483648, (22.92, 22.85), (12.22, 12.19), 7.76739, 0, None),
    "allreduce-p3dn-2node-efa-nccl-debug-info.txt":
        ("all_reduce", 16, 2, 1073741824, (8.82, 8.95), (4.71, 4.77), 2.80613, 0, "2.4.8+cuda10.0"),
    "allgather-8xa100-oldformat-validation0-superbench.txt":
        ("all_gather", 8, 1, 8589934592, (223.39, 230.07), (255.31, 262.94), 58.2651, 0, None),
    "alltoall-8xa100-oldformat-validation0-superbench.txt":
        (None, 8, 1, 8589934592, (224.31, 226.16), (256.36, 258.47), 58.6481, 0, None),
    "reducescatter-8xa100-oldformat-validation0-superbench.txt":
        ("reduce_scatter", 8, 1, 8589934592, (231.52, 231.25), (264.60, 264.29), 60.168, 0, None),
    "sendrecv-8xa100-nvlink-snippet.txt":
        (None, None, 0, 1073741824, (195.10, 195.56), (195.10, 195.56), None, None, None),
    "alltoall-4xgb300-single-node-new-format-na.txt":
        ("alltoall", 4, 1, 17179869184, (627.69, 680.70), (836.92, 907.60), 381.478, 0, "2.28.7+cuda13.0"),
    # srun --label: every line ' 0: ', the last one an empty line whose label kept no trailing space
    "allreduce-h100-2node-16rank-srun-label-trailing-empty-line.txt":
        ("all_reduce", 16, 2, 8589934592, (155.57, 155.56), (82.97, 82.96), 142.735, 0, None),
}
INCOMPLETE = {"sendrecv-8xa100-nvlink-snippet.txt"}   # a table pasted without its footer


def sig3(value: float) -> str:
    return f"{value:.3g}"


def test_every_capture_has_expectations():
    assert sorted(p.name for p in files("nccl-tests")) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_capture_key_numbers(name):
    coll, ranks, hosts, size, busbw, algbw, avg, oob, version = EXPECTED[name]
    run = nt.parse(text("nccl-tests", name))
    assert (run.collective, run.nranks, len(run.hosts)) == (coll, ranks, hosts)
    row = run.largest()
    assert row is not None and row.size == size and row is run.rows[-1]
    got = (row.out_of_place.busbw, row.in_place.busbw)
    assert got == pytest.approx(busbw, abs=1e-9) and tuple(map(sig3, got)) == tuple(map(sig3, busbw))
    assert (row.out_of_place.algbw, row.in_place.algbw) == pytest.approx(algbw, abs=1e-9)
    assert run.avg_busbw == (pytest.approx(avg, abs=1e-9) if avg is not None else None)  # never invented
    assert run.out_of_bounds == oob and run.nccl_version == version
    assert (run.failure is not None) == (name in INCOMPLETE)


def test_h100_two_nodes_ranks_hosts_and_gpus():
    run = nt.parse(text("nccl-tests", H100))
    assert run.hosts == ("ztan-mig-235z", "ztan-mig-gq73") and run.gpu_models == ("NVIDIA H100 80GB HBM3",)
    assert run.ranks[10].host == "ztan-mig-gq73" and run.ranks[10].bus_id == "0000:0b:00" and run.ranks[10].device == 2
    assert (run.format, run.n_gpus, run.max_bytes, run.validation) == ("wrong", 1, 8589934592, 1)
    assert len(run.rows) == 31 and all(p.wrong == 0 for r in run.rows for _, p in r.placements())
    assert run.rows[0].line == 26 and run.rows[0].root == -1 and run.rows[0].redop == "sum"


def test_old_format_error_column_and_validation_off():
    run = nt.parse(text("nccl-tests", "allreduce-dgxa100-2node-oldformat-error-col.txt"))
    assert run.format == "error" and run.rows[0].out_of_place.error == 2e-07 and run.rows[0].out_of_place.wrong is None
    assert nt.inferred_ranks(run) == 16   # 2 x 8 GPUs, from busbw = algbw x 2(n-1)/n
    off = nt.parse(text("nccl-tests", "allgather-8xa100-oldformat-validation0-superbench.txt"))
    assert off.validation == 0 and not any(p.checked for r in off.rows for _, p in r.placements())
    assert off.rows[0].redop is None and off.rows[0].size == 0   # no redop column at all


def test_blank_redop_and_na_in_place():
    a2a = nt.parse(text("nccl-tests", "alltoall-8xa100-oldformat-validation0-superbench.txt"))
    assert a2a.rows[-1].redop is None and a2a.collective_from == "unknown"   # the text never says alltoall
    gb300 = nt.parse(text("nccl-tests", "alltoall-4xgb300-single-node-new-format-na.txt"))
    assert gb300.collective_from == "banner" and gb300.rows[-1].in_place.wrong is None
    assert gb300.rows[-1].out_of_place.wrong == 0 and any("Truncated" in n for n in gb300.notes)


def test_nccl_info_lines_interleaved_and_elision():
    run = nt.parse(text("nccl-tests", "allreduce-p3dn-2node-efa-nccl-debug-info.txt"))
    assert run.nccl_info_lines == 45 and len(run.rows) == 28 and run.failure is None
    assert any("some output truncated" in n for n in run.notes)


def test_headline_and_per_size_numbers():
    run = nt.parse(text("nccl-tests", H100))
    head = nt.headline(run)
    assert head == {"size": 8589934592.0, "busbw": 338.82, "algbw": 180.71, "time_us": 47535.0, "avg_busbw": 70.742,
                    "wrong": 0.0, "out_of_bounds": 0.0}
    rows = nt.per_size(run)
    assert len(rows) == 62 and rows[-1] == {"size": 8589934592, "placement": "in_place", "time_us": 47743.0,
                                            "algbw": 179.92, "busbw": 337.35, "wrong": 0.0, "error": None}
    assert math.isnan(nt.headline(nt.parse(text("nccl-tests", "alltoall-8xa100-oldformat-validation0-superbench.txt")))
                      ["wrong"])


# -- formats without a capture, built from the captures above ------------------------------------

def _h100_lines() -> list[str]:
    return text("nccl-tests", H100).splitlines()[2:]


def test_srun_label_prefixes_and_mpirun_tags():
    lines = _h100_lines()
    labelled = [f" 0: {line}" for line in lines]
    labelled.insert(30, " 9: ztan-mig-gq73:6734:6734 [1] NCCL INFO comm 0x55d0 rank 9 nranks 16 - Init COMPLETE")
    run = nt.parse("\n".join(labelled))
    assert (run.nranks, len(run.rows), run.rows[-1].out_of_place.busbw, run.avg_busbw) == (16, 31, 338.82, 70.742)
    tagged = nt.parse("\n".join(f"[1,0]<stdout>:{line}" for line in lines))
    assert (tagged.nranks, len(tagged.rows), tagged.failure) == (16, 31, None)


NCCL1 = """\
# Using devices
#   Rank  0 uses device  0 [0x04] Tesla P100-SXM2-16GB
#   Rank  1 uses device  1 [0x05] Tesla P100-SXM2-16GB

#                                 out-of-place                    in-place
#      bytes             N    type      op     time  algbw  busbw      res     time  algbw  busbw      res
     1048576        262144   float     sum    0.120   8.73  16.37    5e-07    0.119   8.79  16.48    5e-07
  4294967296    1073741824   float     sum   42.715 100.55 188.53    5e-07   42.677 100.64 188.70    5e-07

 Out of bounds values : 0 OK
 Avg bus bandwidth    : 102.52
"""


def test_nccl1_res_table_in_milliseconds():
    """NVIDIA/nccl 1.x test/single/all_reduce_test.cu printf formats (time %7.3f ms, res %7.0le), numbers from
    the DGX A100 capture; the footer and nThread lines of that era have no '#'."""
    run = nt.parse(NCCL1)
    assert (run.tool, run.format, run.nranks, run.hosts) == ("nccl1", "res", 2, ())
    assert run.rows[-1].out_of_place.time_us == pytest.approx(42715.0) and run.rows[-1].in_place.error == 5e-07
    assert (run.out_of_bounds, run.avg_busbw, run.failure, run.collective) == (0, 102.52, None, "all_reduce")
    early = nt.parse("nThread 1 nGpus 2 minBytes 1048576 maxBytes 4294967296 step: 2(factor) warmup iters: 5 "
                     "iters: 20 validation: 1 \n" + NCCL1.replace("uses device", "on dgx1 device"))
    assert (early.tool, early.n_gpus, early.hosts, early.validation) == ("nccl-tests", 2, ("dgx1",), 1)


def test_rccl_in_place_only_with_per_iteration_and_timestamps():
    """rccl-tests src/common.cu prints in-place-only tables and PCI ids with a function; nccl-tests util.cu
    adds i_min..i_cv% per placement (-I 1) and a `%Y-%m-%d %H:%M:%S` timestamp column."""
    rccl = nt.parse("""\
# nThread 1 nGpus 1 minBytes 8589934592 maxBytes 8589934592 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
#
rccl-tests: Version develop:7a1b2c3
# Using devices
#   Rank  0 Pid  41230 on  mi300-01 device  0 [0000:05:00.0] AMD Instinct MI300X
#   Rank  1 Pid  41231 on  mi300-01 device  1 [0000:29:00.0] AMD Instinct MI300X
#
#                                                             in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)
  8589934592    2147483648     float     sum      -1    47535  180.71  180.71      0
# Errors with asterisks indicate errors that have exceeded the maximum threshold.
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 180.71
#
""")
    assert (rccl.tool, rccl.nranks, rccl.rows[0].out_of_place, rccl.rows[0].in_place.busbw) == ("rccl-tests", 2, None,
                                                                                               180.71)
    assert rccl.ranks[1].bus_id == "0000:29:00.0" and rccl.gpu_models == ("AMD Instinct MI300X",)
    wide = nt.parse("""\
#       size         count      type   redop    root     time   algbw   busbw #wrong    i_min    i_max    i_p99    i_cv%     time   algbw   busbw #wrong    i_min    i_max    i_p99    i_cv%           timestamp
  8589934592    2147483648     float     sum      -1    47535  180.71  338.82      0    47011    48210    48100     0.61    47743  179.92  337.35      0    47105    48390    48300     0.70 2025-10-20 14:02:11
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 338.085
""")
    row = wide.rows[0]
    assert (row.out_of_place.busbw, row.in_place.busbw, row.in_place.wrong, wide.failure) == (338.82, 337.35, 0, None)


def _json_doc() -> dict:
    """nccl-tests -J output (util.cu, JSON_FILE_VERSION 3) holding the last two rows of the H100 capture."""
    def half(t: float, alg: float, bus: float) -> dict:
        return {"time": t, "alg_bw": alg, "bus_bw": bus, "nwrong": 0.0}
    return {"version": 3, "start_time": "2025-10-20 14:00:00", "args": ["/opt/nccl-tests/build/all_reduce_perf", "-J",
            "out.json"], "env": [], "nccl_version": 22807,
            "config": {"nthreads": 1, "ngpus": 1, "minimum_bytes": 4294967296, "maximum_bytes": 8589934592,
                       "step_factor": 2, "validation": 1},
            "devices": [{"rank": r, "group": 0, "pid": 6899 + r, "hostname": "ztan-mig-235z", "device": r,
                         "device_hex": "0000:04:00", "device_info": "NVIDIA H100 80GB HBM3"} for r in range(2)],
            "results": [{"size": 4294967296, "count": 1073741824, "type": "float", "redop": "sum", "root": "    -1",
                         "out_of_place": half(24361, 176.31, 330.58), "in_place": half(24365, 176.27, 330.51),
                         "actual_iterations": 20, "experiment_name": ""},
                        {"size": 8589934592, "count": 2147483648, "type": "float", "redop": "sum", "root": "    -1",
                         "out_of_place": half(47535, 180.71, 338.82), "in_place": half(47743, 179.92, 337.35),
                         "actual_iterations": 20, "experiment_name": ""}],
            "out_of_bounds": {"count": 0, "okay": True},
            "average_bus_bandwidth": {"bandwidth": 334.315, "okay": "unchecked"}, "errors": [],
            "end_time": "2025-10-20 14:01:00"}


def test_json_output_and_a_json_cut_off():
    body = json.dumps(_json_doc(), indent=2)
    run = nt.parse(body)
    assert (run.format, run.collective, run.nranks, run.nccl_version) == ("json", "all_reduce", 2, "2.28.7")
    assert (run.rows[-1].out_of_place.busbw, run.avg_busbw, run.avg_busbw_check, run.failure) == (338.82, 334.315,
                                                                                                   None, None)
    cut = nt.parse(body[:body.index('"out_of_bounds"') - 10])
    assert cut.failure_kind == "incomplete" and "stops at char" in cut.failure
    with pytest.raises(NotToolOutput):
        nt.parse('{"some": "other json"}')


# -- crashed and cut-off runs ---------------------------------------------------------------------

NCCL_FAILURE = ("ztan-mig-gq73: Test NCCL failure common.cu:1058 'unhandled cuda error (run with NCCL_DEBUG=INFO for "
                "details) / Cuda failure 'an illegal memory access was encountered''")
MPI_BANNER = ["--------------------------------------------------------------------------",
              "MPI_ABORT was invoked on rank 9 in communicator MPI_COMM_WORLD",
              "with errorcode 1."]


def test_nccl_failure_mid_table_is_named_before_the_mpi_banner():
    lines = _h100_lines()
    crashed = lines[:30] + [NCCL_FAILURE, " .. ztan-mig-gq73 pid 6734: Test failure common.cu:1180", *MPI_BANNER]
    run = nt.parse("\n".join(crashed))
    assert run.failure_kind == "crashed" and run.failure == f"line 31: {NCCL_FAILURE}" and run.failure_line == 31
    assert len(run.rows) == 7 and run.out_of_bounds is None and run.avg_busbw is None


def test_cuda_failure_before_the_table_and_an_mpi_abort_alone():
    lines = _h100_lines()
    run = nt.parse("\n".join(lines[:19] + ["ztan-mig-235z: Test CUDA failure common.cu:892 'out of memory'"]))
    assert run.rows == () and "Test CUDA failure" in run.failure and run.failure_line == 20
    banner = nt.parse("\n".join(lines[:19] + MPI_BANNER))
    assert banner.failure == "line 21: MPI_ABORT was invoked on rank 9 in communicator MPI_COMM_WORLD"


def test_table_cut_off_mid_row_or_before_the_footer():
    lines = _h100_lines()
    mid = nt.parse("\n".join(lines[:40] + [lines[40][:50]]))
    assert mid.failure_kind == "incomplete" and "cut short" in mid.failure and mid.failure_line == 41
    footerless = nt.parse("\n".join(lines[:41]))
    assert "stops at 1048576 B without its 'Out of bounds values' footer" in footerless.failure
    headonly = nt.parse("\n".join(lines[:23]))
    assert "has no rows" in headonly.failure


@pytest.mark.parametrize("value", ["N/A", "abc", "", "nan", "-1", "1.2.3"])
def test_an_avg_bus_bandwidth_that_does_not_read_fails(value):
    lines = _h100_lines()
    assert lines[-1].startswith("# Avg bus bandwidth    : 70.742")
    lines[-1] = f"# Avg bus bandwidth    : {value}"
    run = nt.parse("\n".join(lines))
    assert run.failure_kind == "incomplete" and run.failure is not None and "Avg bus bandwidth" in run.failure
    assert run.failure_line == 56 and run.avg_busbw is None


def test_an_out_of_bounds_footer_without_its_avg_line_is_cut_off():
    lines = _h100_lines()
    run = nt.parse("\n".join(lines[:-1]))
    assert run.failure_kind == "incomplete" and run.failure is not None and run.failure_line == 55
    assert "no 'Avg bus bandwidth' line after it" in run.failure and "cut off" in run.failure


def test_wrong_counts_in_g_format_are_numbers():
    lines = _h100_lines()
    row = lines[-3]   # 8589934592 row: #wrong printed with %6g, so a big count reads 1.67772e+07
    lines[-3] = row[:row.rindex("0")] + "1.67772e+07"
    lines[-2] = "# Out of bounds values : 1 FAILED"
    run = nt.parse("\n".join(lines))
    assert run.rows[-1].in_place.wrong == 16777200.0 and run.out_of_bounds == 1
    assert run.failure_kind == "failed" and run.failure_line == len(lines) - 1  # the FAILED footer line


@pytest.mark.parametrize("folder, name", [
    ("nvbandwidth", "h2d-memcpy-ce-8gpu-readme.txt"),
    ("ib_write_bw", "roce-cx5-100g-deepops.txt"),
    ("nvidia-smi-topo", "puget-wrx90-2gpu-phb-2nic.txt"),
])
def test_other_tools_output_is_refused(folder, name):
    with pytest.raises(NotToolOutput, match="expected nccl-tests"):
        nt.parse(text(folder, name))


def test_an_nccl_debug_log_alone_and_two_runs_in_one_file_are_refused():
    debug_only = [l for l in text("nccl-tests", "allreduce-p3dn-2node-efa-nccl-debug-info.txt").splitlines()[2:]
                  if "NCCL INFO" in l]
    with pytest.raises(NotToolOutput):
        nt.parse("\n".join(debug_only))
    lines = _h100_lines()
    with pytest.raises(NotToolOutput, match="second result table"):
        nt.parse("\n".join(lines + lines[18:]))
