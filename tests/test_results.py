"""clustercheck.judging.measurement and the kinds' reductions: per-rank rows -> nccl-tests style measurement, verdicts with unit conversion,
and the append-only JSONL run record that survives a killed writer."""

from __future__ import annotations

import json
import re
import math
import statistics
from pathlib import Path

import pytest

from clustercheck.errors import HarnessError

from clustercheck.record.io import RunWriter
from clustercheck.record.io import read_record
from clustercheck.record.schema import counts
from clustercheck.judging.verdicts import fmt_margin
from clustercheck.units import fmt
from clustercheck.judging.measurement import Measurement, evaluate
from clustercheck.kinds.collectives import reduce_collective
from clustercheck.judging.limits import Limit

HOSTS = ["node-a", "node-a", "node-b", "node-b"]


def rank(rows: list[tuple[int, float, int]], dtype: str = "float32") -> dict:
    """One rank's result as the worker returns it: (size, seconds, wrong) per swept size."""
    return {"dtype": dtype, "rows": [{"size": s, "count": s // 4, "bytes": s, "placement": "in", "seconds": t,
                                      "iter_seconds": [], "wrong": w} for s, t, w in rows]}


# Four ranks, two sizes. At 1 MB rank 3 is slowest; at 4 MB rank 1 is.
PER_RANK = [
    rank([(1_000_000, 1e-3, 0), (4_000_000, 2e-3, 0)]),
    rank([(1_000_000, 1e-3, 1), (4_000_000, 5e-3, 0)]),
    rank([(1_000_000, 2e-3, 0), (4_000_000, 3e-3, 2)]),
    rank([(1_000_000, 4e-3, 0), (4_000_000, 2e-3, 0)]),
]


def limit(metric: str, op: str, value: float, unit: str) -> Limit:
    return Limit("chk", metric, op, value, unit, f"{op} {value}", "test source", "t.yaml:3")


# -- reduce_collective ---------------------------------------------------------------------------

def test_row_time_is_the_mean_across_ranks():
    m = reduce_collective("all_reduce", PER_RANK, HOSTS, 4_000_000)
    assert [r["time_us"] for r in m.rows] == [pytest.approx(2000.0), pytest.approx(3000.0)]
    assert m.rows[1]["rank_time_us"] == [pytest.approx(x) for x in (2000.0, 5000.0, 3000.0, 2000.0)]


def test_bandwidths_come_from_the_mean_time_and_the_rank_count():
    m = reduce_collective("all_reduce", PER_RANK, HOSTS, 4_000_000)
    small, large = m.rows
    assert small["algbw"] == pytest.approx(1_000_000 / 2e-3 / 1e9)          # 0.5 GB/s
    assert small["busbw"] == pytest.approx(0.5 * 2 * 3 / 4)                  # x 2(n-1)/n, n = 4
    assert large["algbw"] == pytest.approx(4_000_000 / 3e-3 / 1e9)
    assert large["busbw"] == pytest.approx(large["algbw"] * 1.5)


def test_a_placement_that_measured_nothing_is_the_headline_never_hidden_behind_the_other():
    """An in-place time of 0 s, NaN or below zero measured nothing: before, busbw read the out-place's figure
    (max() kept the first row against a NaN; the mean of 1.5 ms read as a bandwidth). No time is a broken timer,
    the harness's (0217a8d): an error naming the rank and the row, never a bandwidth or a verdict."""
    def rank(out_s: float, in_s: float) -> dict:
        rows = [{"size": 1 << 20, "count": 1 << 18, "bytes": 1 << 20, "placement": p, "seconds": t, "wrong": 0,
                 "iter_seconds": []} for p, t in (("out", out_s), ("in", in_s))]
        return {"dtype": "float32", "rows": rows}

    for in_s, bad in ((0.0, 0), (math.nan, 0), (-1e-3, 1)):
        ranks = [rank(1e-3, in_s if bad == 0 else 4e-3), rank(1e-3, in_s)]
        with pytest.raises(HarnessError, match=rf"rank {bad} \(h{bad}\) answered .* s for 1MiB in: no time"):
            reduce_collective("all_gather", ranks, ["h0", "h1"], 1 << 20)


def test_wrong_is_summed_over_ranks_per_row_and_over_rows_in_the_metric():
    m = reduce_collective("all_reduce", PER_RANK, HOSTS, 4_000_000)
    assert [r["wrong"] for r in m.rows] == [1, 2]
    assert m.metrics["wrong"] == 3.0


def test_metrics_are_those_of_the_judged_size():
    m = reduce_collective("all_reduce", PER_RANK, HOSTS, 1_000_000)
    assert m.judged_at == 1_000_000
    assert m.metrics["time_us"] == pytest.approx(2000.0)
    assert m.metrics["algbw"] == pytest.approx(0.5)
    assert m.metrics["busbw"] == pytest.approx(0.75)


def test_metrics_at_the_largest_size():
    m = reduce_collective("all_reduce", PER_RANK, HOSTS, 4_000_000)
    assert m.judged_at == 4_000_000
    assert m.metrics["busbw"] == pytest.approx(4_000_000 / 3e-3 / 1e9 * 1.5)


def test_avg_busbw_is_the_mean_over_all_sizes():
    m = reduce_collective("all_reduce", PER_RANK, HOSTS, 1_000_000)
    assert m.metrics["avg_busbw"] == pytest.approx((m.rows[0]["busbw"] + m.rows[1]["busbw"]) / 2)


def test_worst_is_the_slowest_rank_at_the_judged_size_with_its_host():
    assert reduce_collective("all_reduce", PER_RANK, HOSTS, 4_000_000).worst == "rank 1 (node-a)"
    assert reduce_collective("all_reduce", PER_RANK, HOSTS, 1_000_000).worst == "rank 3 (node-b)"


def test_rows_keep_size_count_dtype_and_slowest_rank():
    m = reduce_collective("all_reduce", PER_RANK, HOSTS, 4_000_000)
    assert [(r["size"], r["count"], r["dtype"], r["slowest_rank"]) for r in m.rows] == [
        (1_000_000, 250_000, "float32", 3), (4_000_000, 1_000_000, "float32", 1)]


def test_measurement_units():
    m = reduce_collective("all_reduce", PER_RANK, HOSTS, 4_000_000)
    assert m.units == {"busbw": "GB/s", "algbw": "GB/s", "time_us": "us", "avg_busbw": "GB/s", "wrong": "count",
                       "iter_cv": "ratio"}
    assert set(m.metrics) == set(m.units)


def test_two_ranks_use_factor_one():
    m = reduce_collective("all_reduce", PER_RANK[:2], HOSTS[:2], 1_000_000)
    assert m.metrics["busbw"] == pytest.approx(m.metrics["algbw"])


# -- evaluate ----------------------------------------------------------------------------------

MEASURED = Measurement(metrics={"busbw": 400.0, "time_us": 1500.0, "wrong": 0.0},
                       units={"busbw": "GB/s", "time_us": "us", "wrong": "count"}, worst="rank 5 (node-b)")


def test_evaluate_converts_to_the_limit_unit():
    (v,) = evaluate(MEASURED, {"busbw": limit("busbw", ">=", 3000.0, "Gb/s")})
    assert (v.measured, v.unit) == (pytest.approx(3200.0), "Gb/s")
    assert v.passed
    assert v.margin == pytest.approx(200 / 3000)


def test_evaluate_converts_time_units():
    (v,) = evaluate(MEASURED, {"time_us": limit("time_us", "<=", 1.0, "ms")})
    assert v.measured == pytest.approx(1.5)
    assert not v.passed
    assert v.margin == pytest.approx(-0.5)


def test_evaluate_one_verdict_per_limit_in_order():
    verdicts = evaluate(MEASURED, {"busbw": limit("busbw", ">=", 450.0, "GB/s"),
                                   "wrong": limit("wrong", "==", 0.0, "count")})
    assert [(v.metric, v.passed) for v in verdicts] == [("busbw", False), ("wrong", True)]
    assert verdicts[0].margin == pytest.approx(-50 / 450)
    assert verdicts[1].margin == 0.0


def test_failed_verdict_line_names_the_worst_rank():
    (v,) = evaluate(MEASURED, {"busbw": limit("busbw", ">=", 450.0, "GB/s")})
    assert v.line() == "busbw 400 GB/s misses the limit >= 450 GB/s (margin -11.1%); worst rank 5 (node-b)"


def test_passed_verdict_line_has_no_worst_rank():
    (v,) = evaluate(MEASURED, {"busbw": limit("busbw", ">=", 300.0, "GB/s")})
    assert v.line() == "busbw 400 GB/s meets the limit >= 300 GB/s (margin +33.3%)"


def test_verdict_as_dict_carries_the_limit_provenance():
    (v,) = evaluate(MEASURED, {"busbw": limit("busbw", ">=", 300.0, "GB/s")})
    d = v.as_dict()
    assert d["op"] == ">=" and d["limit"] == 300.0 and d["origin"] == "t.yaml:3"
    assert d["source"] == "test source" and d["expression"] == ">= 300.0"
    assert "limit" in d and not isinstance(d["limit"], dict)
    json.dumps(d)


def test_fmt_and_fmt_margin():
    assert (fmt(400.0), fmt(328.5), fmt(float("nan"))) == ("400", "328.5", "nan")
    assert fmt_margin(-0.1111, 450.0) == "-11.1%"
    assert fmt_margin(-3.0, 0.0) == "-3"


# -- RunWriter and read_record -------------------------------------------------------------------

HEADER = {"type": "run", "schema": 1, "platform": "cpu"}
RESULTS = [{"type": "result", "name": n, "check": n, "suite_file": "s.yaml", "outcome": o}
           for n, o in (("a", "passed"), ("b", "failed"))]
END = {"type": "end", "counts": {"passed": 1, "failed": 1}}


def write_record(path: Path, entries: list[dict]) -> None:
    record = RunWriter(path)
    for entry in entries:
        record.append(entry)
    record.close()


def test_each_append_is_one_json_line(tmp_path):
    path = tmp_path / "run" / "run.jsonl"
    write_record(path, [HEADER, *RESULTS, END])
    lines = path.read_text(encoding="utf-8").splitlines()
    assert [json.loads(line) for line in lines] == [HEADER, *RESULTS, END]
    assert path.read_text(encoding="utf-8").endswith("\n")


def test_each_entry_is_on_disk_before_close(tmp_path):
    path = tmp_path / "run.jsonl"
    record = RunWriter(path)
    record.append(HEADER)
    record.append(RESULTS[0])
    assert len(path.read_text(encoding="utf-8").splitlines()) == 2  # read while the writer is still open
    record.close()


def test_values_json_cannot_encode_are_written_as_text(tmp_path):
    path = tmp_path / "run.jsonl"
    write_record(path, [{"type": "run", "schema": 1, "cwd": Path("/somewhere")}])
    assert read_record(path)[0]["cwd"] == "/somewhere"


def test_read_record_splits_header_results_and_end(tmp_path):
    path = tmp_path / "run.jsonl"
    write_record(path, [HEADER, *RESULTS, END])
    header, results, end = read_record(path)
    assert (header, results, end) == (HEADER, RESULTS, END)


def test_reopening_a_record_appends(tmp_path):
    path = tmp_path / "run.jsonl"
    write_record(path, [HEADER, RESULTS[0]])
    write_record(path, [RESULTS[1]])
    assert read_record(path)[1] == RESULTS


def test_read_record_ignores_a_torn_last_line(tmp_path):
    path = tmp_path / "run.jsonl"
    write_record(path, [HEADER, RESULTS[0]])
    torn = json.dumps(RESULTS[1], sort_keys=True)
    with path.open("a", encoding="utf-8") as fh:  # the writer was killed half-way through this line
        fh.write(torn[: len(torn) // 2])
    header, results, end = read_record(path)
    assert header == HEADER
    assert results == [RESULTS[0]]
    assert end is None


def test_a_bad_line_before_the_last_is_refused_naming_it(tmp_path):
    """Only a torn *last* line is a kill; a broken line before it would hide a result."""
    from clustercheck.record.io import RecordError

    path = tmp_path / "run.jsonl"
    write_record(path, [HEADER, RESULTS[0]])
    with path.open("a", encoding="utf-8") as fh:
        fh.write('{"type": "result", "na\n' + json.dumps(RESULTS[1]) + "\n")
    with pytest.raises(RecordError, match="line 3: not JSON"):
        read_record(path)
    other = tmp_path / "other.jsonl"
    write_record(other, [HEADER, {**RESULTS[1], "outcome": "fine"}])
    with pytest.raises(RecordError, match="line 2: result.outcome 'fine' is not one of passed, failed, error, skip"):
        read_record(other)


def test_nothing_after_the_end_line_and_no_second_header_plan_or_exclude(tmp_path):
    """The last of each line won: a second end line after a killed run's read it as finished, a torn line
    after the end line (a writer writes nothing there, so no kill tore it) hid a failed result, and a
    second exclude line emptied the untested nodes."""
    from clustercheck.record.io import RecordError

    end = {"type": "end", "counts": {"passed": 2}, "interrupted": False}
    plan, exclude = {"type": "plan", "items": []}, {"type": "exclude", "untested": []}
    cases = [([HEADER, *RESULTS, end, end], "line 5: a line after the end line (line 4)"),
             ([HEADER, RESULTS[0], end, RESULTS[1]], "line 4: a line after the end line (line 3)"),
             ([HEADER, *RESULTS, HEADER], "line 4: a second run line (the first is line 1)"),
             ([HEADER, plan, RESULTS[0], plan], "line 4: a second plan line (the first is line 2)"),
             ([HEADER, *RESULTS, exclude, exclude, end], "line 5: a second exclude line (the first is line 4)")]
    for n, (lines, said) in enumerate(cases):
        path = tmp_path / f"run{n}.jsonl"  # RunWriter appends
        write_record(path, lines)
        with pytest.raises(RecordError, match=f"^{re.escape(said)}"):
            read_record(path)
    path = tmp_path / "torn.jsonl"
    write_record(path, [HEADER, *RESULTS, end])
    with path.open("a", encoding="utf-8") as fh:
        fh.write('{"type": "result", "outcome": "failed", "message": "busbw 0.01')
    with pytest.raises(RecordError, match=r"^line 5: a torn line after the end line \(line 4\)"):
        read_record(path)
    path = tmp_path / "blank.jsonl"
    write_record(path, [HEADER, *RESULTS, end])
    with path.open("a", encoding="utf-8") as fh:
        fh.write("\n\n")  # blank lines are nothing
    assert read_record(path)[2] == end


def test_an_exclude_line_that_says_less_clears_no_node_the_results_left_unmeasured(tmp_path):
    from clustercheck.record.io import load
    from clustercheck.report.status import run_status

    header = {**HEADER, "nodes": ["n1", "n2"]}
    measured = {**RESULTS[0], "outcome": "passed", "nodes": ["n1"]}
    skipped = {**RESULTS[0], "name": "ok[n2]", "outcome": "skipped", "nodes": ["n2"]}
    end = {"type": "end", "counts": {"passed": 1, "skipped": 1}, "interrupted": False}
    path = tmp_path / "run.jsonl"
    write_record(path, [header, measured, skipped, {"type": "exclude", "untested": []}, end])
    status = run_status(load(path))
    assert status["untested"] == ["n2"] and status["verdict"] == "ERROR"


def _limit_verdict(measured: float, passed: bool) -> dict:
    return {"metric": "busbw", "measured": measured, "unit": "GB/s", "op": ">=", "limit": 0.05, "passed": passed,
            "margin": measured / 0.05 - 1, "expression": ">= 0.05", "origin": "cpu.yaml:13", "source": "test"}


def test_a_measurement_that_measured_nothing_reads_as_recorded(tmp_path):
    """The writer records NaN where a measurement measured nothing (a collective timed at 0 s: busbw NaN) and
    judging fails it; such a record is a failed run, read as it is, never refused as a bad record."""
    path = tmp_path / "run.jsonl"
    failed = {**RESULTS[1], "duration": 1.5, "metrics": {"busbw": {"value": math.nan, "unit": "GB/s"}},
              "rows": [{"size": 1024, "busbw": math.nan}], "verdicts": [_limit_verdict(math.nan, False)]}
    write_record(path, [HEADER, failed, END])
    assert "NaN" in path.read_text()
    (read,) = read_record(path)[1]
    assert math.isnan(read["metrics"]["busbw"]["value"]) and read["verdicts"][0]["passed"] is False


@pytest.mark.parametrize("line, said", [
    ('{"type": "result", "name": "a", "check": "a", "suite_file": "s.yaml", "outcome": "passed", "duration": NaN}',
     "line 2: result.duration: NaN is not a number of seconds"),
    ('{"type": "result", "name": "a", "check": "a", "suite_file": "s.yaml", "outcome": "passed", "duration": Infinity}',
     "line 2: result.duration: Infinity is not a number of seconds"),
    (json.dumps({**RESULTS[0], "verdicts": [_limit_verdict(math.nan, True)]}),
     "line 2: result.verdicts[0]: passed with measured NaN, which judging never passes"),
    (json.dumps({**RESULTS[0], "verdicts": [{**_limit_verdict(1.0, True), "limit": math.inf}]}),
     "line 2: result.verdicts[0].limit: 'inf' is not a finite number"),
    (json.dumps({**RESULTS[0], "verdicts": [{"measured": 1.0, "passed": True}]}), "line 2: result.verdicts[0]: no 'metric'"),
    (json.dumps({**RESULTS[0], "verdicts": [{k: v for k, v in _limit_verdict(1.0, True).items() if k != "unit"}]}),
     "line 2: result.verdicts[0]: a limit's verdict without 'unit'"),
    (json.dumps({**RESULTS[0], "metrics": {"iter_cv": "x"}}), "line 2: result.metrics.iter_cv: unexpected str"),
    (json.dumps({**END, "counts": {"passed": math.nan}}), "line 2: end.counts.passed: NaN is not a count"),
    ('{"type": "end", "counts": {}, "type": "run"}', "line 2: key 'type' given twice in one object"),
    ('{"type": "result", "rows": [{"size": 1, "size": 2}]}', "line 2: key 'size' given twice in one object"),
])
def test_a_line_no_run_writes_is_refused_naming_line_and_key(tmp_path, line, said):
    """NaN or infinity where a reader needs a number (a duration, a limit, a count), a verdict that passed on
    NaN, a key given twice (JSON readers differ on which counts): each refused naming its line and key."""
    from clustercheck.record.io import RecordError

    path = tmp_path / "run.jsonl"
    write_record(path, [HEADER])
    with path.open("a", encoding="utf-8") as fh:
        fh.write(line + "\n")
    with pytest.raises(RecordError) as refused:
        read_record(path)
    assert str(refused.value).startswith(said), str(refused.value)


def test_a_line_that_is_not_text_is_named_by_its_byte(tmp_path):
    from clustercheck.record.io import NotText

    path = tmp_path / "run.jsonl"
    write_record(path, [HEADER])
    with path.open("ab") as fh:
        fh.write(b'{"type": "end"}\n\x89PNG\xff garbage\n')
    with pytest.raises(NotText, match=r"^line 3 is not text: byte 0x89 at column 1 is not UTF-8$"):
        read_record(path)
    torn = tmp_path / "torn.jsonl"  # a kill cut the last line inside a character: torn, not binary
    write_record(torn, [HEADER])
    with torn.open("ab") as fh:
        fh.write('{"type": "result", "message": "\u00e9'.encode()[:-1])
    assert read_record(torn) == (HEADER, [], None)


def test_run_without_end_line_reads_as_unfinished(tmp_path):
    path = tmp_path / "run.jsonl"
    write_record(path, [HEADER, *RESULTS])
    assert read_record(path) == (HEADER, RESULTS, None)


def test_counts_per_outcome():
    results = [{"outcome": o} for o in ("passed", "passed", "failed", "error")]
    assert counts(results) == {"passed": 2, "failed": 1, "error": 1, "skipped": 0}


def test_iteration_stats_take_the_slowest_rank_per_iteration():
    from clustercheck.kinds.collectives import iteration_stats

    stats = iteration_stats([[1e-6, 5e-6, 3e-6], [2e-6, 1e-6, 3e-6]])
    assert stats["iter_us"] == pytest.approx([2.0, 5.0, 3.0])
    assert (stats["iter_us_min"], stats["iter_us_median"], stats["iter_us_max"]) == pytest.approx((2.0, 3.0, 5.0))
    assert stats["iter_cv"] == pytest.approx(statistics.pstdev([2, 5, 3]) / statistics.fmean([2, 5, 3]))
    assert iteration_stats([[], []]) == {}


def test_two_placements_are_judged_by_the_worse_one():
    per_rank = [{"dtype": "float32", "rows": [
        {"size": 1024, "count": 128, "bytes": 1024, "placement": p, "seconds": t, "iter_seconds": [], "wrong": 0}
        for p, t in (("out", 1e-6), ("in", 2e-6))]} for _ in range(2)]
    m = reduce_collective("all_gather", per_rank, ["a", "b"], 1024)
    assert [r["placement"] for r in m.rows] == ["out", "in"]
    assert m.metrics["busbw"] == pytest.approx(1024 / 2e-6 / 1e9 * 0.5)
    assert m.metrics["time_us"] == pytest.approx(2.0)
