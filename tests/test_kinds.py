"""Measure kinds own their behaviour: a kind added outside clustercheck (a tiny rank-side function plus one
`Kind` entry, here in a conftest.py) runs end to end through the real pool and reaches every report,
without any change to the session, plugin or report code."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

from clustercheck.kinds import KINDS, figure_of

RUN = ("--thresholds", "thresholds", "--cc-out", "out", "-p", "no:cacheprovider")

RANK_SIDE = '''\
def measure(ctx, params):
    """Every rank reports one value of its own, as a copy measurement would."""
    value = params["base"] + ctx.rank
    return {"subjects": {f"rank{ctx.rank}": {"answer": {"median": value, "min": value, "max": value}}}}
'''

CONFTEST = '''\
from clustercheck.kinds import register
from clustercheck.kinds.subjects import per_subject
from clustercheck.schema import between


def _parse(f):
    params = {"base": f.get("base", int, 40, check=between(0, 1000))}
    f.done()
    return params


register(name="tiny", scopes=("node",), metrics={"answer": "count"}, parse=_parse,
         description="each rank answers base + its rank", runner="tinykind:measure",
         judge=per_subject({"answer": "count"}))
'''

PROFILE = '''\
platform: cpu
description: test profile
detect:
  gpu_count: 0
checks:
  tiny-ok:
    answer: {limit: ">= 40", unit: count, source: "every rank answers at least 40"}
  tiny-low:
    answer: {limit: ">= 41", unit: count, source: "rank 0 answers 40: fails on purpose"}
'''

SUITE = '''\
checks:
  - id: tiny-ok
    measure: tiny
  - id: tiny-low
    measure: tiny
    params: {base: 40}
'''


def test_a_new_kind_runs_through_the_pool_and_reaches_every_report(pytester: pytest.Pytester,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    (pytester.path / "tinykind.py").write_text(RANK_SIDE)
    (pytester.path / "conftest.py").write_text(CONFTEST)
    (pytester.path / "thresholds").mkdir()
    (pytester.path / "thresholds" / "cpu.yaml").write_text(PROFILE)
    (pytester.path / "suites").mkdir()
    (pytester.path / "suites" / "s.yaml").write_text(SUITE)
    monkeypatch.setenv("PYTHONPATH", str(pytester.path))  # the ranks import tinykind as the controller does
    res = pytester.runpytest_subprocess("suites/s.yaml", *RUN)
    assert res.ret == 1, res.stdout.str()
    res.stdout.fnmatch_lines(["*rank0 answer 40 count misses the limit >= 41 count*", "*1 failed, 1 passed*"])
    run = (pytester.path / "out" / "latest").resolve()
    data = json.loads((run / "results.json").read_text())
    ok, low = data["results"]
    assert (ok["outcome"], low["outcome"]) == ("passed", "failed")
    assert ok["metrics"]["answer"] == {"value": 40.0, "unit": "count"}  # the worst subject is the headline
    assert [(v["subject"], v["measured"], v["passed"]) for v in low["verdicts"]] == [("rank0", 40.0, False),
                                                                                   ("rank1", 41.0, True)]
    assert ok["figure"] == "bars" and ok["pool"]["number"] == 1 and low["pool"]["number"] == 1  # one pool
    props = {p.get("name"): p.get("value") for p in ET.parse(run / "junit.xml").getroot().iter("property")}
    assert props["answer.unit"] == "count"
    html = (run / "report.html").read_text()
    assert "tiny-low" in html and "rank0 answer" in html and "<svg" in html
    assert "tiny" not in KINDS  # registered in the run's own process only


def test_figures_come_from_the_kind_even_for_records_that_predate_the_field() -> None:
    assert figure_of({"measure": "p2p"}) == "matrix" and figure_of({"measure": "all_reduce"}) == "sweep"
    assert figure_of({"measure": "gemm", "figure": "none"}) == "none"
    assert figure_of({"measure": "no-such-kind"}) == "bars"
