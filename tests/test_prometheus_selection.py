"""The Prometheus plugin (plugins/clustercheck_prometheus) says what every report says: a run of a selection is a
selection (`clustercheck_selection`), and a run that never reached clustercheck's end hook gets the verdict its
exit code says (nothing selected: SKIPPED, exit 5; refused: BAD_INPUT, exit 4), not INCOMPLETE whatever
happened. Real runs with pytester."""

from __future__ import annotations

import pytest

from helpers import prom_samples, small_check, write_suite

RUN = ("--thresholds", "thresholds", "--cc-out", "out", "-p", "no:cacheprovider", "-p", "clustercheck_prometheus")


def test_a_selection_says_so_in_the_textfile(project: pytest.Pytester) -> None:
    """`-k ok` of a two-check suite PASSes, as every report says, as a selection: 1 of 2 planned items. The file is
    replaced whole, so a dashboard must read that the other item was not measured, never a whole-suite PASS."""
    write_suite(project, "checks:\n" + small_check("ok") + small_check("too-fast"))
    prom = project.path / "cc.prom"
    res = project.runpytest("suites/s.yaml", *RUN, f"--prometheus-textfile={prom}", "-k", "ok and not too")
    assert res.ret == 0, res.stdout.str()
    by_name = prom_samples(prom)
    assert [(s.labels, s.value) for s in by_name["clustercheck_verdict"]] == [({"verdict": "PASS"}, 1.0)]
    assert [(s.labels, s.value) for s in by_name["clustercheck_selection"]] == [
        ({"selected": "1", "collected": "2"}, 1.0)]


def test_a_whole_suite_has_no_selection_sample(project: pytest.Pytester) -> None:
    write_suite(project, "checks:\n" + small_check("ok"))
    prom = project.path / "cc.prom"
    res = project.runpytest("suites/s.yaml", *RUN, f"--prometheus-textfile={prom}")
    assert res.ret == 0, res.stdout.str()
    by_name = prom_samples(prom)
    assert "clustercheck_selection" not in by_name
    assert [s.labels["verdict"] for s in by_name["clustercheck_verdict"]] == ["PASS"]


def test_nothing_selected_is_skipped_not_incomplete(project: pytest.Pytester) -> None:
    """`-k nomatch` exits 5 (nothing to judge): the file says SKIPPED, as the exit code does, and that the run
    finished (nothing was measured, nothing is cleared), never INCOMPLETE."""
    write_suite(project, "checks:\n" + small_check("ok"))
    prom = project.path / "cc.prom"
    res = project.runpytest("suites/s.yaml", *RUN, f"--prometheus-textfile={prom}", "-k", "nomatch")
    assert res.ret == 5, res.stdout.str()
    by_name = prom_samples(prom)
    assert [(s.labels, s.value) for s in by_name["clustercheck_verdict"]] == [({"verdict": "SKIPPED"}, 1.0)]
    assert by_name["clustercheck_incomplete"][0].value == 0
    assert "clustercheck_outcome" not in by_name


def test_a_refused_suite_is_bad_input_not_incomplete(project: pytest.Pytester) -> None:
    """A suite refused (exit 4): nothing ran; the file says BAD_INPUT, as the exit code does, and that the run
    did not finish (nothing is cleared)."""
    write_suite(project, "checks:\n  - id: ok\n    measure: no-such-measure\n")
    prom = project.path / "cc.prom"
    res = project.runpytest("suites/s.yaml", *RUN, f"--prometheus-textfile={prom}")
    assert res.ret == 4, res.stdout.str()
    by_name = prom_samples(prom)
    assert [(s.labels, s.value) for s in by_name["clustercheck_verdict"]] == [({"verdict": "BAD_INPUT"}, 1.0)]
    assert by_name["clustercheck_incomplete"][0].value == 1


def test_a_refused_option_is_bad_input(project: pytest.Pytester) -> None:
    """--setup-only is refused while pytest configures (exit 4, before any session started): the previous run's
    PASS is not left standing, and the file says BAD_INPUT, never INCOMPLETE."""
    write_suite(project, "checks:\n" + small_check("ok"))
    prom = project.path / "cc.prom"
    prom.write_text('clustercheck_verdict{verdict="PASS"} 1.0\n')
    res = project.runpytest("suites/s.yaml", *RUN, f"--prometheus-textfile={prom}", "--setup-only")
    assert res.ret == 4, res.stdout.str()
    by_name = prom_samples(prom)
    assert [(s.labels, s.value) for s in by_name["clustercheck_verdict"]] == [({"verdict": "BAD_INPUT"}, 1.0)]
    assert by_name["clustercheck_incomplete"][0].value == 1
