"""The Prometheus plugin (plugins/clustercheck_prometheus) says what every report says: a run of a selection is a
selection (`clustercheck_selection`). Real runs with pytester."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from helpers import small_check, write_suite

RUN = ("--thresholds", "thresholds", "--cc-out", "out", "-p", "no:cacheprovider", "-p", "clustercheck_prometheus")


def samples(prom: Path) -> dict[str, list]:
    by_name: dict[str, list] = {}
    for family in text_string_to_metric_families(prom.read_text()):
        for s in family.samples:
            by_name.setdefault(s.name, []).append(s)
    return by_name


def test_a_selection_says_so_in_the_textfile(project: pytest.Pytester) -> None:
    """`-k ok` of a two-check suite PASSes, as every report says, as a selection: 1 of 2 planned items. The file is
    replaced whole, so a dashboard must read that the other item was not measured, never a whole-suite PASS."""
    write_suite(project, "checks:\n" + small_check("ok") + small_check("too-fast"))
    prom = project.path / "cc.prom"
    res = project.runpytest("suites/s.yaml", *RUN, f"--prometheus-textfile={prom}", "-k", "ok and not too")
    assert res.ret == 0, res.stdout.str()
    by_name = samples(prom)
    assert [(s.labels, s.value) for s in by_name["clustercheck_verdict"]] == [({"verdict": "PASS"}, 1.0)]
    assert [(s.labels, s.value) for s in by_name["clustercheck_selection"]] == [
        ({"selected": "1", "collected": "2"}, 1.0)]


def test_a_whole_suite_has_no_selection_sample(project: pytest.Pytester) -> None:
    write_suite(project, "checks:\n" + small_check("ok"))
    prom = project.path / "cc.prom"
    res = project.runpytest("suites/s.yaml", *RUN, f"--prometheus-textfile={prom}")
    assert res.ret == 0, res.stdout.str()
    by_name = samples(prom)
    assert "clustercheck_selection" not in by_name
    assert [s.labels["verdict"] for s in by_name["clustercheck_verdict"]] == ["PASS"]
