"""report.html of `clustercheck run --compare BASELINE`: a section of its own with the verdict against the
baseline (REGRESSION, NOT JUDGED, INCOMPLETE) and a row per metric judged against it (subject, metric,
baseline, now, change, why), regressions first, escaped. The records are real runs on this machine's gloo
ranks: a baseline edited to measure 1000x the bandwidth, so that the run against it regresses."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from helpers import CPU_THRESHOLDS, clustercheck_here, render_all

SUITE = "checks:\n  - id: ok\n    measure: all_reduce\n    params: {sizes: [1KiB, 64KiB], iters: 20, warmup: 1}\n"


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the baseline's run directory, the run --compare'd against it, which regressed)."""
    cwd = tmp_path_factory.mktemp("project")
    (cwd / "thresholds").mkdir()
    (cwd / "thresholds" / "cpu.yaml").write_text(CPU_THRESHOLDS)
    (cwd / "suites").mkdir()
    (cwd / "suites" / "s.yaml").write_text(SUITE)
    args = ("run", "suites/s.yaml", "--thresholds", "thresholds", "--out", "out", "-q")
    res = clustercheck_here(*args, cwd=cwd)
    assert res.returncode == 0, res.stdout + res.stderr
    baseline = (cwd / "out" / "latest").resolve()
    lines = [json.loads(x) for x in (baseline / "run.jsonl").read_text().splitlines()]
    for x in lines:
        for v in x.get("verdicts") or []:
            if v["metric"] == "busbw":
                v["measured"] *= 1000  # faster than anything this machine does: the run against it regresses
    (baseline / "run.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    res = clustercheck_here(*args, "--compare", str(baseline), cwd=cwd)
    assert res.returncode == 1 and "busbw vs baseline" in res.stdout, res.stdout + res.stderr
    return baseline, (cwd / "out" / "latest").resolve()


def _section(html: str) -> str:
    return html[html.index('<h2 id="compare">'):html.index('<h2 id="nodes">')]


def _rows(section: str) -> list[list[str]]:
    return [re.findall(r"<td[^>]*>(.*?)</td>", row) for row in re.findall(r'<tr class="compare-row">.*?</tr>', section)]


def test_a_regression_is_the_compare_verdict_and_its_row_says_baseline_now_and_change(runs: tuple[Path, Path]) -> None:
    _, run = runs
    (v,) = [v for line in (run / "run.jsonl").read_text().splitlines() for v in json.loads(line).get("verdicts") or ()
            if v["metric"] == "busbw vs baseline"]
    before, _, now = str(v["detail"]).split(" (")[0].partition(" -> ")  # `189.7 -> 0.1498 GB/s`, as the terminal
    section = _section((run / "report.html").read_text())  # as the run wrote it
    verdict = re.search(r'<p id="compare-verdict" class="failed"><b>REGRESSION</b>[^<]*</p>', section)
    assert verdict is not None and "1 metric(s) compared: 1 regression(s)" in verdict.group(0), section
    ((item, subject, metric, base, current, change, word, why),) = _rows(section)
    assert (item, subject, metric, word) == ("ok[" + json.loads((run / "run.jsonl").read_text().splitlines()[0])
                                             ["nodes"][0] + "]", "-", "busbw", "REGRESSION")
    assert (base, current) == (f"{before} GB/s", now) and change.startswith("-") and change.endswith("%")
    assert why.startswith("higher is better, at most 5% worse allowed")


def test_the_baseline_s_own_report_has_no_compare_section(runs: tuple[Path, Path]) -> None:
    baseline, _ = runs
    assert '<h2 id="compare">' not in (baseline / "report.html").read_text()


def _edited(run: Path, tmp_path: Path, edit: Any) -> str:
    """report.html of a copy of `run`'s record with its lines changed by `edit`."""
    lines = [json.loads(x) for x in (run / "run.jsonl").read_text().splitlines()]
    edit(lines)
    record = tmp_path / "run.jsonl"
    record.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return render_all(record, tmp_path)["html"].read_text()


def test_regressions_come_first_then_what_was_not_judged_escaped(runs: tuple[Path, Path], tmp_path: Path) -> None:
    _, run = runs
    hostile = "<script>alert(1)</script>"

    def edit(lines: list[dict[str, Any]]) -> None:
        result = next(x for x in lines if x["type"] == "result")
        (reg,) = [v for v in result["verdicts"] if v["metric"] == "busbw vs baseline"]
        better = {**reg, "passed": True, "measured": 3.0, "margin": 0.08, "subject": "GPU1",
                  "detail": "1 -> 1.03 GB/s (+3.0%; higher is better, at most 5% worse allowed)"}
        unjudged = {**reg, "metric": "vs baseline", "measured": "not judged", "unit": "", "op": "", "passed": False,
                    "margin": None, "subject": None, "detail": f"busbw[{hostile}]: not in this run (judged in the baseline)"}
        result["verdicts"] = [better, *result["verdicts"], unjudged]
        result["notes"] = ["vm: not compared with the baseline: time: latency-bound size (-1.0%), judged by its limit only"]
        end = next(x for x in lines if x["type"] == "end")
        end["compare"]["not_judged"] = [f"platforms differ from the baseline: {hostile} -> cpu"]

    html = _edited(run, tmp_path, edit)
    section = _section(html)
    assert [row[6] for row in _rows(section)] == ["REGRESSION", "NOT JUDGED", "pass"]
    assert '<b>REGRESSION</b> &middot; 2 metric(s) compared: 1 regression(s), 1 not judged, 1 not compared' in section
    assert _rows(section)[1][2:] == ["busbw[&lt;script&gt;alert(1)&lt;/script&gt;]", "-", "-", "not judged",
                                     "NOT JUDGED", "not in this run (judged in the baseline)"]
    assert "not judged against the --compare baseline out/" in section
    assert "platforms differ from the baseline: &lt;script&gt;alert(1)&lt;/script&gt; -&gt; cpu" in section
    assert "time: latency-bound size (-1.0%), judged by its limit only" in section
    assert "<script" not in html


def test_a_baseline_that_did_not_finish_is_incomplete_in_the_section(runs: tuple[Path, Path], tmp_path: Path) -> None:
    _, run = runs

    def edit(lines: list[dict[str, Any]]) -> None:
        next(x for x in lines if x["type"] == "end")["compare"]["incomplete"] = "stopped: SIGTERM"

    section = _section(_edited(run, tmp_path, edit))
    assert re.search(r'<p id="compare-verdict" class="error"><b>INCOMPLETE</b>', section), section
    assert re.search(r"the --compare baseline out/\S+ is INCOMPLETE: stopped: SIGTERM", section), section
