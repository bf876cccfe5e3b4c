"""Reports are never replaced with less: `clustercheck report` on a record it cannot read leaves the reports
already there byte for byte, and says so in one line; a bad `--out` and a plugin's missing dependency are
one-line errors before anything is measured."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import pytest

from helpers import clustercheck_here, small_check, write_suite

pytestmark = pytest.mark.pool  # starts real rank pools or whole runs: `pytest -m 'not pool'` leaves it out

RUN = ("--thresholds", "thresholds", "-p", "no:cacheprovider")
REPORTS = ("results.json", "sla.json", "junit.xml", "report.html")


@pytest.fixture(scope="module")
def good_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real run's directory (cpu-smoke-like: one small all_reduce) to spoil records beside."""
    root = tmp_path_factory.mktemp("run")
    (root / "thresholds").mkdir()
    (root / "thresholds" / "cpu.yaml").write_text(
        "platform: cpu\ndetect: {gpu_count: 0}\nchecks:\n  ok: {busbw: {limit: '>= 0.000001', unit: GB/s}}\n")
    (root / "suites").mkdir()
    (root / "suites" / "s.yaml").write_text("checks:\n" + small_check("ok"))
    proc = clustercheck_here("run", "suites/s.yaml", "--thresholds", "thresholds", "--out", "out", cwd=root)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return (root / "out" / "latest").resolve()


@pytest.mark.parametrize("spoil, says", [
    (b"", "not a run record clustercheck can render"),
    (b"\x00\xff\xfe binary \x89PNG\r\n\x1a\n" * 50, "cannot read the run record"),
    (b'{"type": "run", "schema": 1}\n{"type": "result", "outcome": 5, "name": null}\n', "not a run record"),
    (b'{"type": "result", "name": "x"}\n', "not a run record clustercheck can render"),
])
def test_report_on_a_record_it_cannot_read_leaves_the_reports_byte_identical(good_run: Path, tmp_path: Path,
                                                                             spoil: bytes, says: str) -> None:
    run = tmp_path / "run"
    run.mkdir()
    for name in REPORTS:
        (run / name).write_bytes((good_run / name).read_bytes())
    (run / "run.jsonl").write_bytes(spoil)
    before = {name: (run / name).read_bytes() for name in REPORTS}
    proc = subprocess.run([sys.executable, "-m", "clustercheck", "report", str(run)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert says in proc.stderr and "reports left as they were" in proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert {name: (run / name).read_bytes() for name in REPORTS} == before
    assert sorted(p.name for p in run.iterdir()) == sorted([*REPORTS, "run.jsonl"])  # no temporary left


def _spoiled(good_run: Path, tmp_path: Path, spoil: Callable[[list[dict]], Any]) -> subprocess.CompletedProcess[str]:
    """`clustercheck report` on a copy of the good run whose record `spoil` edited (a list of its entries)."""
    import json

    run = tmp_path / "run"
    run.mkdir()
    entries = [json.loads(line) for line in (good_run / "run.jsonl").read_text().splitlines()]
    spoil(entries)
    (run / "run.jsonl").write_text("".join(json.dumps(e) + "\n" for e in entries))
    return subprocess.run([sys.executable, "-m", "clustercheck", "report", str(run)], capture_output=True, text=True,
                          timeout=120)


def _result(entries: list[dict]) -> dict:
    return next(e for e in entries if e.get("type") == "result")


def _line_of_result(entries: list[dict]) -> int:
    return next(i for i, e in enumerate(entries, 1) if e.get("type") == "result")


@pytest.mark.parametrize("spoil, says", [
    (lambda es: _result(es).pop("duration"), "line {result}: no 'duration' where the reports read one"),
    (lambda es: _result(es)["verdicts"][0].pop("expression"), "line {result}: no 'expression' where the reports read one"),
    (lambda es: es[0]["thresholds"].pop("file"), "line 1: run.thresholds.file: missing"),
    (lambda es: _result(es).update(finished=5), "line {result}: result.finished: unexpected int"),
    (lambda es: _result(es)["verdicts"][0].update(measured=float("nan")),
     "line {result}: result.verdicts[0]: passed with measured NaN, which judging never passes"),
])
def test_a_record_the_reports_cannot_render_is_named_by_line_and_key(good_run: Path, tmp_path: Path,
                                                                     spoil: Callable[[list[dict]], Any], says: str) -> None:
    """Not `(KeyError: 'file')` or `(ValueError: cannot convert float NaN to integer)`: the line, and the
    key the reports read there."""
    import json

    result = _line_of_result([json.loads(x) for x in (good_run / "run.jsonl").read_text().splitlines()])
    proc = _spoiled(good_run, tmp_path, spoil)
    assert proc.returncode == 4, proc.stdout + proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert f"not a run record clustercheck can render ({says.format(result=result)}" in line, line
    assert "Error" not in line, line


def test_a_measurement_that_measured_nothing_renders_as_the_failure_it_is(good_run: Path, tmp_path: Path) -> None:
    """NaN is how the record keeps a measurement that measured nothing; judged, it fails. Its record renders,
    exit 1, never refused as a bad record."""
    def failed(entries: list[dict]) -> None:
        r = _result(entries)
        r["outcome"], r["verdicts"][0]["passed"], r["verdicts"][0]["measured"] = "failed", False, float("nan")
        r["verdicts"][0]["margin"] = float("nan")
        r["metrics"][r["verdicts"][0]["metric"]]["value"] = float("nan")

    proc = _spoiled(good_run, tmp_path, failed)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr


def test_report_re_renders_a_good_record_identically(good_run: Path, tmp_path: Path) -> None:
    run = tmp_path / "copy"
    run.mkdir()
    for name in (*REPORTS, "run.jsonl"):
        (run / name).write_bytes((good_run / name).read_bytes())
    proc = subprocess.run([sys.executable, "-m", "clustercheck", "report", str(run)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    for name in ("results.json", "junit.xml", "sla.json"):
        assert (run / name).read_bytes() == (good_run / name).read_bytes(), name


@pytest.mark.parametrize("out", ["a-file", "/proc/clustercheck", "/etc/passwd"])
def test_out_that_cannot_hold_a_run_is_one_line_before_measuring(project: pytest.Pytester, out: str) -> None:
    (project.path / "a-file").write_text("not a directory\n")
    write_suite(project, "checks:\n" + small_check("ok"))
    res = project.runpytest("suites/s.yaml", *RUN, "--cc-out", out)
    assert res.ret == 4, res.stdout.str() + res.stderr.str()
    res.stderr.fnmatch_lines([f"*--out {out}: cannot create the run directory*"])
    assert "INTERNALERROR" not in res.stdout.str() + res.stderr.str()


def test_out_that_cannot_hold_a_run_is_one_line_before_the_nodes_are_asked(project: pytest.Pytester) -> None:
    """Several nodes: the pool that reads the nodes' facts starts under --out, before the run directory."""
    (project.path / "a-file").write_text("not a directory\n")
    write_suite(project, "checks:\n" + small_check("ok"))
    res = project.runpytest("suites/s.yaml", *RUN, "--cc-out", "a-file", "--launcher", "hosts", "--hosts",
                                       "h[1-2]", "--host-command", "env CC_HOST={host} {python}")
    assert res.ret == 4, res.stdout.str() + res.stderr.str()
    res.stderr.fnmatch_lines(["*--out a-file: cannot create the run directory*"])
    assert "INTERNALERROR" not in res.stdout.str() + res.stderr.str()


def test_a_plugin_whose_dependency_is_missing_fails_before_measuring(project: pytest.Pytester, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    shadow = tmp_path / "shadow" / "prometheus_client"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('prometheus_client is not installed')\n")
    monkeypatch.setenv("PYTHONPATH", str(shadow.parent))
    write_suite(project, "checks:\n" + small_check("ok"))
    res = project.runpytest_subprocess("suites/s.yaml", *RUN, "--cc-out", "out", "-p", "clustercheck_prometheus",
                                       f"--prometheus-textfile={tmp_path / 'cc.prom'}")
    assert res.ret == 4
    res.stderr.fnmatch_lines(["*-p clustercheck_prometheus needs prometheus-client: pip install*"])
    assert not (project.path / "out").exists()  # nothing measured
    assert "Traceback" not in res.stderr.str()
