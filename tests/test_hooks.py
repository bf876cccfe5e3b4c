"""clustercheck's hooks (clustercheck/hookspecs.py) and the first-party plugin that uses them
(plugins/clustercheck_prometheus), through real runs with pytester."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from helpers import prom_samples, small_check, write_suite

RUN = ("--thresholds", "thresholds", "--cc-out", "out", "-p", "no:cacheprovider")

RECORDER = """
import json, pathlib

def pytest_clustercheck_result(entry, config):
    with open("hook-results.jsonl", "a") as fh:
        fh.write(json.dumps(entry) + "\\n")

def pytest_clustercheck_run_finished(run_dir, results, exclusion, config):
    pathlib.Path("hook-finished.json").write_text(json.dumps(
        {"run_dir": str(run_dir), "results": results, "exclusion": exclusion}))
"""


def record(p: Path) -> list[dict]:
    lines = (p / "out" / "latest" / "run.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def test_hooks_see_every_result_as_recorded_and_the_end_of_the_run(project: pytest.Pytester) -> None:
    project.makeconftest(RECORDER)
    write_suite(project, "checks:\n" + small_check("ok") + small_check("too-fast"))
    res = project.runpytest("suites/s.yaml", *RUN)
    res.assert_outcomes(passed=1, failed=1)
    recorded = [x for x in record(project.path) if x["type"] == "result"]
    heard = [json.loads(line) for line in (project.path / "hook-results.jsonl").read_text().splitlines()]
    assert heard == recorded  # the same dicts, in the same order, one call per item
    finished = json.loads((project.path / "hook-finished.json").read_text())
    assert Path(finished["run_dir"]).resolve() == (project.path / "out" / "latest").resolve()
    assert [(r["check"], r["outcome"]) for r in finished["results"]] == [("ok", "passed"), ("too-fast", "failed")]
    assert "rows" not in finished["results"][0] and "busbw" in finished["results"][0]["metrics"]
    node = recorded[1]["node"]
    assert list(finished["exclusion"]["reasons"]) == [node] and finished["exclusion"]["hostlist"] == node


def test_an_invalid_suite_calls_no_end_hook(project: pytest.Pytester) -> None:
    project.makeconftest(RECORDER)
    write_suite(project, "checks:\n  - id: ok\n    measure: no-such-measure\n")
    res = project.runpytest("suites/s.yaml", *RUN)
    assert res.ret != 0
    assert not (project.path / "hook-finished.json").exists() and not (project.path / "hook-results.jsonl").exists()


def test_prometheus_textfile_has_each_outcome_metric_and_excluded_node(project: pytest.Pytester) -> None:
    write_suite(project, "checks:\n" + small_check("ok") + small_check("too-fast"))
    prom = project.path / "textfile" / "clustercheck.prom"
    prom.parent.mkdir()
    res = project.runpytest("suites/s.yaml", *RUN, "-p", "clustercheck_prometheus",
                                       f"--prometheus-textfile={prom}")
    res.assert_outcomes(passed=1, failed=1)
    samples = [s for family in text_string_to_metric_families(prom.read_text()) for s in family.samples]
    by_name: dict[str, list] = {}
    for s in samples:
        by_name.setdefault(s.name, []).append(s)
    results = {r["check"]: r for r in record(project.path) if r["type"] == "result"}
    node = results["ok"]["node"]
    assert {(s.labels["check"], s.labels["outcome"], s.value) for s in by_name["clustercheck_outcome"]} == {
        ("ok", "passed", 1.0), ("too-fast", "failed", 1.0)}
    busbw = {s.labels["check"]: s.value for s in by_name["clustercheck_measured"] if s.labels["metric"] == "busbw"}
    assert busbw == {c: r["metrics"]["busbw"]["value"] for c, r in results.items()}
    assert all(s.labels["nodes"] == node for s in by_name["clustercheck_measured"])
    assert [(s.labels, s.value) for s in by_name["clustercheck_excluded"]] == [({"node": node}, 1.0)]
    assert by_name["clustercheck_last_run_timestamp_seconds"][0].value > 1.7e9
    assert not list(prom.parent.glob("*.tmp*"))  # written to a temporary name, then renamed into place


def test_prometheus_textfile_in_a_missing_directory_is_a_usage_error(project: pytest.Pytester) -> None:
    write_suite(project, "checks:\n" + small_check("ok"))
    res = project.runpytest("suites/s.yaml", *RUN, "-p", "clustercheck_prometheus",
                                       "--prometheus-textfile=nowhere/cc.prom")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines(["*--prometheus-textfile nowhere/cc.prom: directory nowhere does not exist*"])


def test_prometheus_registry_counts_unmeasured_items_per_node() -> None:
    from prometheus_client import generate_latest

    from clustercheck_prometheus import registry

    results = [{"suite_file": "s.yaml", "check": "a", "name": "a[h1,h3]", "nodes": ["h1", "h3"], "outcome": "error",
                "metrics": {}},
               {"suite_file": "s.yaml", "check": "a", "name": "a[h2,h3]", "nodes": ["h2", "h3"], "outcome": "error",
                "metrics": {}}]
    text = generate_latest(registry(results, {"reasons": {}, "unmeasured": {"h1": ["a[h1,h3]"],
                                                                             "h3": ["a[h1,h3]", "a[h2,h3]"]}}))
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for f in text_string_to_metric_families(text.decode()) for s in f.samples}
    assert samples[("clustercheck_unmeasured", (("node", "h1"),))] == 1
    assert samples[("clustercheck_unmeasured", (("node", "h3"),))] == 2
    assert samples[("clustercheck_outcome", (("check", "a"), ("item", "a[h2,h3]"), ("nodes", "h2,h3"),
                                             ("outcome", "error"), ("suite", "s")))] == 1


def test_prometheus_textfile_of_a_repeated_run_has_each_item_once_as_its_worst_repetition(
        project: pytest.Pytester) -> None:
    """--repeat 2 with the first repetition corrupted: one outcome for the item, failed, with the failed
    repetition's values (it had both `failed` and `passed` at 1, and the passing repetition's busbw)."""
    write_suite(project, "checks:\n" + small_check("ok"))
    prom = project.path / "cc.prom"
    res = project.runpytest("suites/s.yaml", *RUN, "--repeat", "2", "--cc-inject-fault", "ok:corrupt#1",
                            "-p", "clustercheck_prometheus", f"--prometheus-textfile={prom}")
    assert res.ret == 1
    reps = {r["repeat"]: r for r in record(project.path) if r["type"] == "result"}
    assert [reps[k]["outcome"] for k in (1, 2)] == ["failed", "passed"]
    by_name = prom_samples(prom)
    assert [(s.labels["check"], s.labels["outcome"], s.value) for s in by_name["clustercheck_outcome"]] == [
        ("ok", "failed", 1.0)]
    busbw = [s.value for s in by_name["clustercheck_measured"] if s.labels["metric"] == "busbw"]
    assert busbw == [reps[1]["metrics"]["busbw"]["value"]]
    assert by_name["clustercheck_incomplete"][0].value == 0


STALE_PASS = """\
clustercheck_outcome{check="ok",item="ok[vm]",nodes="vm",outcome="passed"} 1.0
clustercheck_incomplete 0.0
clustercheck_last_run_timestamp_seconds 1.7e+09
"""

INTERRUPT_AT_COLLECTION = """
def pytest_collection_modifyitems(items):
    raise KeyboardInterrupt
"""


@pytest.mark.parametrize("how", ["interrupted", "invalid-suite"])
def test_prometheus_textfile_of_a_run_that_never_reached_its_end_says_incomplete(project: pytest.Pytester,
                                                                                 how: str) -> None:
    """SIGTERM before any check ran (here raised from the collection hook, where the signal handler would
    raise it), or a suite refused: clustercheck's end hook is never called, and the file is still replaced,
    INCOMPLETE, with none of the previous run's passes left in it."""
    if how == "interrupted":
        project.makeconftest(INTERRUPT_AT_COLLECTION)
        write_suite(project, "checks:\n" + small_check("ok"))
    else:
        write_suite(project, "checks:\n  - id: ok\n    measure: no-such-measure\n")
    prom = project.path / "cc.prom"
    prom.write_text(STALE_PASS)
    before = time.time()
    res = project.runpytest("suites/s.yaml", *RUN, "-p", "clustercheck_prometheus", f"--prometheus-textfile={prom}",
                            no_reraise_ctrlc=True)
    assert res.ret == (2 if how == "interrupted" else 4)
    by_name = prom_samples(prom)
    assert by_name["clustercheck_incomplete"][0].value == 1
    assert by_name["clustercheck_last_run_timestamp_seconds"][0].value >= before
    assert "clustercheck_outcome" not in by_name and "clustercheck_measured" not in by_name
    assert not list(project.path.glob("cc.prom.*"))


def test_an_unwritable_prometheus_textfile_is_one_line_and_a_harness_error(project: pytest.Pytester) -> None:
    """A passing run whose text file cannot be written (/proc takes no new file; a full disk or a read-only
    file system alike): one line on stderr, no traceback, the summary and the reports still there, and exit 3,
    not 0: a monitoring file left stale is no pass."""
    write_suite(project, "checks:\n" + small_check("ok"))
    res = project.runpytest("suites/s.yaml", *RUN, "-p", "clustercheck_prometheus",
                            "--prometheus-textfile=/proc/cc.prom")
    assert res.ret == 3
    assert [x for x in res.stderr.lines if "prometheus" in x] == [
        "clustercheck: prometheus: cannot write /proc/cc.prom: No such file or directory"]
    assert "Traceback" not in res.stdout.str() + res.stderr.str() and "INTERNALERROR" not in res.stdout.str()
    res.stdout.fnmatch_lines(["*= clustercheck =*"])
    assert "prometheus " not in res.stdout.str()  # the terminal's list of files names no file that is not there
    assert json.loads((project.path / "out" / "latest" / "results.json").read_text())["verdict"] == "PASS"
