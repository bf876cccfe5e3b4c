"""Third-party plugins that misbehave in clustercheck's hooks (clustercheck/hookspecs.py): one plugin's
exception neither stops the run nor the plugins after it, is said in one line, and the run's code is at
least a harness error's; real runs with pytester, the plugins as conftest or `-p` modules."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers import small_check, write_suite

RUN = ("--thresholds", "thresholds", "--cc-out", "out", "-p", "no:cacheprovider")

RAISES_IN_RESULT = """
def pytest_clustercheck_result(entry, config):
    raise RuntimeError("boom in result hook")
"""

HEARS_RESULTS = """
import json

def pytest_clustercheck_result(entry):
    with open("heard.jsonl", "a") as fh:
        fh.write(json.dumps(entry["name"]) + "\\n")
"""


def results(p: Path) -> list[dict]:
    lines = (p / "out" / "latest" / "run.jsonl").read_text().splitlines()
    return [x for x in map(json.loads, lines) if x["type"] == "result"]


def with_plugins(p: pytest.Pytester, **plugins: str) -> list[str]:
    """`-p NAME` for each plugin module written in the project; a check `also` that passes as `ok` does."""
    for name, text in plugins.items():
        (p.path / f"{name}.py").write_text(text)
    p.syspathinsert()
    with (p.path / "thresholds" / "cpu.yaml").open("a") as fh:
        fh.write("  also:\n    busbw: {limit: \">= 0.000001\", unit: GB/s, source: \"any working loopback\"}\n")
    return [arg for name in plugins for arg in ("-p", name)]


@pytest.mark.parametrize(("second", "code"), [("also", 3), ("too-fast", 1)])
def test_a_result_hook_that_raises_stops_neither_the_run_nor_other_plugins(
        project: pytest.Pytester, second: str, code: int) -> None:
    """It stopped the run after the first item: a 99-line INTERNALERROR, no summary, exit 2 INCOMPLETE."""
    plugins = with_plugins(project, hears_results=HEARS_RESULTS, raises_in_result=RAISES_IN_RESULT)
    write_suite(project, "checks:\n" + small_check("ok") + small_check(second))
    res = project.runpytest("suites/s.yaml", *RUN, *plugins)
    out = res.stdout.str() + res.stderr.str()
    assert "INTERNALERROR" not in out and "never ran" not in out, out
    recorded = results(project.path)
    assert [r["check"] for r in recorded] == ["ok", second]
    assert (project.path / "heard.jsonl").read_text().split() == [json.dumps(r["name"]) for r in recorded]
    said = [x for x in res.stderr.lines if "raised" in x]
    assert said == [f"clustercheck: ERROR: plugin raises_in_result's pytest_clustercheck_result raised "
                    f"({project.path / 'raises_in_result.py'}:3: RuntimeError: boom in result hook)"], said
    res.stdout.fnmatch_lines(["*= clustercheck =*"])
    assert res.ret == code  # a FAIL stays 1: the worse of the verdict's code and a harness error's


RAISES_AT_END = """
def pytest_clustercheck_run_finished(run_dir, results):
    raise RuntimeError("boom in finished hook")
"""


def test_an_end_hook_that_raises_stops_no_other_plugins_end_hook(project: pytest.Pytester) -> None:
    """It stopped the implementations after it: the Prometheus file lost the run (only `clustercheck_incomplete
    1`), and the line named pytest_sessionfinish, not the hook that raised."""
    from prometheus_client.parser import text_string_to_metric_families

    plugins = with_plugins(project, raises_at_end=RAISES_AT_END)
    write_suite(project, "checks:\n" + small_check("ok"))
    prom = project.path / "cc.prom"
    # the plugin named last is called first (pluggy's order): prometheus comes after the one that raised
    res = project.runpytest("suites/s.yaml", *RUN, "-p", "clustercheck_prometheus", f"--prometheus-textfile={prom}",
                            *plugins)
    said = [x for x in res.stderr.lines if "raised" in x]
    assert said == ["clustercheck: ERROR: plugin raises_at_end's pytest_clustercheck_run_finished raised "
                    f"({project.path / 'raises_at_end.py'}:3: RuntimeError: boom in finished hook)"], said
    samples = {(s.name, s.labels.get("check"), s.labels.get("outcome")): s.value
               for f in text_string_to_metric_families(prom.read_text()) for s in f.samples}
    assert samples[("clustercheck_outcome", "ok", "passed")] == 1 and samples[("clustercheck_incomplete", None, None)] == 0
    res.stdout.fnmatch_lines(["*= clustercheck =*"])
    assert res.ret == 3


BLOCKS_THE_REPORTS = """
import json, pathlib

def pytest_clustercheck_result():  # a directory where results.json goes: the reports cannot be written
    (pathlib.Path("out/latest/results.json") / "in-the-way").mkdir(parents=True, exist_ok=True)

def pytest_clustercheck_run_finished(incomplete):
    pathlib.Path("heard-incomplete.json").write_text(json.dumps(incomplete))
"""


def test_the_end_hook_hears_a_run_whose_reports_could_not_be_written_as_incomplete(project: pytest.Pytester) -> None:
    """Exit 2 and the terminal said INCOMPLETE, but the end hook got incomplete=None: Prometheus wrote
    `clustercheck_incomplete 0` with every item passed."""
    plugins = with_plugins(project, blocks_the_reports=BLOCKS_THE_REPORTS)
    write_suite(project, "checks:\n" + small_check("ok"))
    res = project.runpytest("suites/s.yaml", *RUN, *plugins)
    assert res.ret == 2
    heard = json.loads((project.path / "heard-incomplete.json").read_text())
    assert heard and heard.startswith("the reports could not be written (") and "results.json" in heard, heard
    res.stdout.fnmatch_lines([f"*INCOMPLETE: {heard}*"])


@pytest.mark.parametrize("order", ["tryfirst", "trylast"])
def test_a_sessionfinish_that_raises_leaves_the_clustercheck_summary(project: pytest.Pytester, order: str) -> None:
    """RecordCloser caught it outside the terminal reporter's wrapper: the verdict table, exclude:, FAILURES,
    the list of reports and the counts were lost; the one ERROR line and the code stayed."""
    plugins = with_plugins(project, raises_at_end=f"import pytest\n\n\n@pytest.hookimpl({order}=True)\n"
                                                  "def pytest_sessionfinish():\n    raise RuntimeError('boom')\n")
    write_suite(project, "checks:\n" + small_check("ok") + small_check("too-fast"))
    res = project.runpytest("suites/s.yaml", *RUN, *plugins)
    res.stdout.fnmatch_lines(["*= FAILURES =*", "*too-fast*", "*= clustercheck =*", "check * verdict",
                              "ok[[]*pass", "too-fast[[]*FAIL", "exclude: *", "  results.json *",
                              "*1 failed, 1 passed*"])
    said = [x for x in res.stderr.lines if "raised" in x]
    assert said == ["clustercheck: ERROR: a plugin's pytest_sessionfinish raised "
                    f"({project.path / 'raises_at_end.py'}:6: RuntimeError: boom); the run's record and reports "
                    "stand"], said
    assert "INTERNALERROR" not in res.stdout.str() + res.stderr.str()
    assert res.ret == 1  # FAIL: the worse of the verdict's code and a harness error's


def test_an_unwritable_prometheus_textfile_of_a_run_that_never_reached_its_end_exits_3(
        project: pytest.Pytester) -> None:
    """`-k nomatch`: the end hook is never called, and the fallback file was written in pytest_unconfigure,
    after the code was set: it could not be written and the run still exited 5, not 3 as README says."""
    write_suite(project, "checks:\n" + small_check("ok"))
    res = project.runpytest("suites/s.yaml", *RUN, "-k", "nomatch", "-p", "clustercheck_prometheus",
                            "--prometheus-textfile=/proc/cc.prom")
    assert [x for x in res.stderr.lines if "prometheus" in x] == [
        "clustercheck: prometheus: cannot write /proc/cc.prom: No such file or directory"]
    assert res.ret == 3


def test_prometheus_keeps_apart_two_suites_checks_of_one_id(project: pytest.Pytester) -> None:
    """s.yaml and t.yaml each with a check `ok`, one passing and one skipped (min_nodes 2 on one node): the
    samples had no suite label, so both outcomes stood on one label set (check="ok", item="ok[vm]") and
    neither said which suite's was which."""
    from prometheus_client.parser import text_string_to_metric_families

    write_suite(project, "checks:\n" + small_check("ok"))
    write_suite(project, "checks:\n" + small_check("ok", min_nodes="2"), name="t.yaml")
    prom = project.path / "cc.prom"
    res = project.runpytest("suites/s.yaml", "suites/t.yaml", *RUN, "-p", "clustercheck_prometheus",
                            f"--prometheus-textfile={prom}")
    res.assert_outcomes(passed=1, skipped=1)
    outcomes = {(s.labels.get("suite"), s.labels["check"], s.labels["outcome"]): s.value
                for f in text_string_to_metric_families(prom.read_text()) for s in f.samples
                if s.name == "clustercheck_outcome"}
    assert outcomes == {("s", "ok", "passed"): 1, ("t", "ok", "skipped"): 1}


@pytest.mark.parametrize(("plugin", "said"), [
    ("def pytest_clustercheck_result(entry, config, extra):\n    pass\n",
     "clustercheck: error: a plugin (-p NAME, a conftest.py) does not fit its hooks: Plugin 'bad_plugin' for hook "
     "'pytest_clustercheck_result'; hookimpl definition: pytest_clustercheck_result(entry, config, extra); "
     "Argument(s) {'extra'} are declared in the hookimpl but can not be found in the hookspec"),
    ("raise ImportError('no such dependency xyz')\n",
     "clustercheck: error: -p bad_plugin: the plugin raised while it was imported ({path}:1: ImportError: no such "
     "dependency xyz)"),
    ("raise RuntimeError('plugin module broke')\n",
     "clustercheck: error: -p bad_plugin: the plugin raised while it was imported ({path}:1: RuntimeError: plugin "
     "module broke)")])
def test_a_plugin_that_cannot_load_is_bad_input_in_one_line(tmp_path: Path, plugin: str, said: str) -> None:
    """A hook with an argument its hookspec has not was a 58-line traceback, 'internal error ... a bug in
    clustercheck', exit 3; a plugin whose import raised, a 4-line block and exit 3: both are the user's input."""
    import subprocess
    import sys

    from helpers import CPU_THRESHOLDS

    (tmp_path / "th").mkdir()
    (tmp_path / "th" / "cpu.yaml").write_text(CPU_THRESHOLDS)
    (tmp_path / "s.yaml").write_text("checks:\n" + small_check("ok"))
    (tmp_path / "bad_plugin.py").write_text(plugin)
    out = subprocess.run([sys.executable, "-m", "clustercheck", "run", "s.yaml", "--thresholds", "th", "--out", "out",
                          "-p", "bad_plugin"], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert out.stderr.splitlines() == [said.replace("{path}", str(tmp_path / "bad_plugin.py"))], out.stderr
    assert out.returncode == 4
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("args", "verdict"), [((), "FAIL"), (("-k", "nomatch"), "SKIPPED")])
def test_prometheus_exports_the_runs_verdict(project: pytest.Pytester, args: tuple[str, ...], verdict: str) -> None:
    """The file had no run verdict: a dashboard had to fold the items' outcomes itself (and a run that never
    reached its end said only clustercheck_incomplete 1); `-k nomatch` exits 5, nothing to judge: SKIPPED."""
    write_suite(project, "checks:\n" + small_check("ok") + small_check("too-fast"))
    prom = project.path / "cc.prom"
    project.runpytest("suites/s.yaml", *RUN, *args, "-p", "clustercheck_prometheus", f"--prometheus-textfile={prom}")
    from prometheus_client.parser import text_string_to_metric_families

    said = [(s.labels, s.value) for f in text_string_to_metric_families(prom.read_text()) for s in f.samples
            if s.name == "clustercheck_verdict"]
    assert said == [({"verdict": verdict}, 1.0)]
    if not args:
        assert json.loads((project.path / "out" / "latest" / "results.json").read_text())["verdict"] == verdict
