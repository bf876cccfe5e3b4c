"""Every collective on real gloo ranks: nccl-tests size rules, #wrong 0 on fresh data, and a corrupted
element (test-only fault) counted as wrong."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clustercheck.formulas import PLACEMENTS, layout
from helpers import write_suite

COLLECTIVES = list(PLACEMENTS)


def suite(dtype: str = "float32") -> str:
    return "checks:\n" + "".join(
        f"  - id: {c}\n    measure: {c}\n    params: {{sizes: [1KiB, 100000, 1MiB], iters: 3, warmup: 1, "
        f"check_iters: 2, dtype: {dtype}}}\n" for c in COLLECTIVES)


def thresholds() -> str:
    return "platform: cpu\ndetect: {gpu_count: 0}\nchecks:\n" + "".join(
        f"  {c}: {{busbw: {{limit: '>= 0.000001', unit: GB/s}}}}\n" for c in COLLECTIVES)


def results(p: pytest.Pytester) -> list[dict]:
    return json.loads((p.path / "out" / "latest" / "results.json").read_text())["results"]


@pytest.fixture
def cproject(project: pytest.Pytester) -> pytest.Pytester:
    (project.path / "thresholds" / "cpu.yaml").write_text(thresholds())
    return project


@pytest.mark.parametrize(("ranks", "dtype"), [(2, "float32"), (4, "float32"), (2, "bfloat16"), (3, "float16")])
def test_every_collective_is_exact(cproject: pytest.Pytester, ranks: int, dtype: str) -> None:
    write_suite(cproject, suite(dtype))
    res = cproject.runpytest("suites/s.yaml", "--thresholds", "thresholds", "--cc-out", "out",
                                        "--ranks", str(ranks))
    res.assert_outcomes(passed=len(COLLECTIVES))
    elt = {"float32": 4, "bfloat16": 2, "float16": 2}[dtype]
    for r in results(cproject):
        coll = r["check"]
        assert r["metrics"]["wrong"]["value"] == 0
        placements = sorted({row["placement"] for row in r["rows"]})
        assert placements == sorted(PLACEMENTS[coll])
        for row in r["rows"]:
            assert row["wrong"] == 0 and row["dtype"] == dtype
            want = layout(coll, row["size"], elt, ranks)  # the printed size is already rounded
            assert row["count"] == want.param_count and row["bytes"] == want.algbw_bytes
            assert len(row["iter_us"]) == 3 and row["iter_us_min"] <= row["iter_us_median"] <= row["iter_us_max"]


def test_requested_sizes_follow_nccl_tests_rounding(cproject: pytest.Pytester) -> None:
    write_suite(cproject, suite())
    cproject.runpytest("suites/s.yaml", "--thresholds", "thresholds", "--cc-out", "out", "--ranks", "3")
    by_check = {r["check"]: r for r in results(cproject)}
    # 100000 B of fp32 over 3 ranks: 25000 elements, 8333 per rank, rounded down to 16 B -> 8332
    ag = [row for row in by_check["all_gather"]["rows"] if row["size"] == 8332 * 4 * 3]
    assert ag and ag[0]["count"] == 8332 and ag[0]["bytes"] == 8332 * 4 * 3
    rs = [row for row in by_check["reduce_scatter"]["rows"] if row["count"] == 8332]
    assert rs and rs[0]["size"] == 8332 * 4 * 3
    ar = [row for row in by_check["all_reduce"]["rows"] if row["count"] == 25000]
    assert ar and ar[0]["size"] == ar[0]["bytes"] == 100000


def test_corrupted_element_is_wrong_and_fails_for_every_collective(cproject: pytest.Pytester) -> None:
    write_suite(cproject, suite())
    faults = [a for c in COLLECTIVES for a in ("--cc-inject-fault", f"{c}:corrupt@0")]  # rank 0: reduce's root
    res = cproject.runpytest("suites/s.yaml", "--thresholds", "thresholds", "--cc-out", "out", *faults)
    res.assert_outcomes(failed=len(COLLECTIVES))
    for r in results(cproject):
        wrong = r["metrics"]["wrong"]["value"]
        # one element per size and placement and check iteration
        assert wrong == 3 * len(PLACEMENTS[r["check"]]) * 2, (r["check"], wrong)
        assert "wrong" in r["message"] and r["outcome"] == "failed"


def test_a_size_that_moves_nothing_is_an_error_naming_the_suite_line(cproject: pytest.Pytester) -> None:
    write_suite(cproject, "checks:\n  - id: all_gather\n    measure: all_gather\n    params: {sizes: [8]}\n")
    res = cproject.runpytest("suites/s.yaml", "--thresholds", "thresholds", "--cc-out", "out")
    res.assert_outcomes(errors=1)
    res.stdout.fnmatch_lines(["*suites/s.yaml:2: all_gather of 8 B over 2 ranks moves nothing*"])
