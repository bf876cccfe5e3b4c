"""clustercheck.toolout.nccl_tests_json: the -J output read as strictly as the text. The config's sweep
(minimum_bytes, step_factor / step_bytes) reaches the rows and largest-size checks; a size or count below
0, a result with neither placement, a missing average_bus_bandwidth or an out_of_bounds that is not okay
fail the run; a largest row without a placement leaves the busbw `not judged`, never absent."""

from __future__ import annotations

import json

import pytest

from clustercheck.probes import nccl_tests as probe
from clustercheck.toolout import nccl_tests as nt
from test_toolout_nccl_tests import _json_doc

FLOOR = {"busbw_min": 300}


def _verdicts(doc: dict) -> dict[str, list]:
    out: dict[str, list] = {}
    for v in probe.judge(nt.parse(json.dumps(doc)), FLOOR):
        out.setdefault(v.what, []).append(v)
    return out


def test_the_config_sweep_reaches_the_rows_and_largest_size_checks():
    run = nt.parse(json.dumps(_json_doc()))
    assert (run.min_bytes, run.step, run.sizes_promised()) == (4294967296, (2, "factor"), 2)
    missing = _json_doc()
    del missing["results"][1]
    v = _verdicts(missing)
    assert not v["table rows"][0].passed and not v["busbw"][0].judged
    twice = _json_doc()
    twice["results"][0] = dict(twice["results"][1])
    assert "listed twice" in _verdicts(twice)["table rows"][0].detail
    reversed_ = _json_doc()
    reversed_["results"].reverse()
    assert "out of order" in _verdicts(reversed_)["table rows"][0].detail


@pytest.mark.parametrize("key", ["size", "count"])
def test_a_size_or_count_below_0_fails_the_run(key):
    doc = _json_doc()
    doc["results"][0][key] = -doc["results"][0][key]
    run = nt.parse(json.dumps(doc))
    assert run.failure and run.failure.startswith("result 1: size") and "below 0" in run.failure


def test_a_result_with_neither_placement_fails_and_the_busbw_is_not_judged():
    doc = _json_doc()
    doc["results"][1]["out_of_place"] = doc["results"][1]["in_place"] = None
    run = nt.parse(json.dumps(doc))
    assert run.failure and "nothing was measured" in run.failure
    v = _verdicts(doc)
    assert not v["run"][0].passed and not any(x.passed for x in v.get("busbw", []))
    from clustercheck.probes.nccl_tests import _busbw_verdict
    import dataclasses
    from clustercheck.toolout.nccl_run import Row
    last = run.rows[-1]
    bare = dataclasses.replace(run, rows=run.rows + (Row(8589934592, 2147483648, "float", "sum", -1, None, None, 3),))
    verdict = _busbw_verdict(bare, "all_reduce_perf", FLOOR)
    assert verdict is not None and not verdict.judged and not verdict.passed and last.size == 4294967296


def test_a_missing_average_or_a_failed_out_of_bounds_fails_the_run():
    doc = _json_doc()
    del doc["average_bus_bandwidth"]
    run = nt.parse(json.dumps(doc))
    assert run.failure_kind == "incomplete" and "no average_bus_bandwidth" in run.failure
    doc = _json_doc()
    doc["out_of_bounds"]["okay"] = False
    run = nt.parse(json.dumps(doc))
    assert run.failure and "failed out-of-bounds" in run.failure
    assert not _verdicts(doc)["run"][0].passed
