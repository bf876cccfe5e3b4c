"""`run --compare` against a baseline that is no reference for a pass exits and reports as `clustercheck
compare` on the same two records: an item that passed in the baseline and is not measured now, a baseline of
another platform, one with no item in common -> ERROR (3); a baseline that did not finish -> INCOMPLETE (2).
It exited 0 and every report said PASS, with one yellow terminal line. The fact is in the record (the end
line's `compare`), so that `clustercheck report` says the same later. Real cpu runs, each baseline a copy of
a real record edited into the case."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any, Callable

import pytest

from test_compare_baseline import RUN, cc, edited, item, real_run


def extra_item(lines: list[dict[str, Any]]) -> None:
    """A node item that passed in the baseline and that this run has not (a check since dropped)."""
    extra = copy.deepcopy(item(lines, "ok"))
    extra["check"], extra["name"] = "extra", extra["name"].replace("ok", "extra", 1)
    lines.insert(lines.index(item(lines, "ok")) + 1, extra)


def extra_suite(lines: list[dict[str, Any]]) -> None:
    """A node item that passed in the baseline, of a suite this run did not run (a suite since dropped)."""
    extra = copy.deepcopy(item(lines, "ok"))
    extra["suite_file"] = str(Path(extra["suite_file"]).with_name("dropped.yaml"))
    lines.insert(lines.index(item(lines, "ok")) + 1, extra)


def other_platform(lines: list[dict[str, Any]]) -> None:
    lines[0]["platform"] = "h100-sxm-8x"


def no_item_in_common(lines: list[dict[str, Any]]) -> None:
    for r in [x for x in lines if x.get("type") == "result"] + next(x for x in lines if x["type"] == "plan")["items"]:
        if True:
            r["name"] = r["name"].replace("ok", "old", 1)
            r["check"] = r["check"].replace("ok", "old", 1)
            r["outcome"] = "skipped"  # nothing passed there to be missing now: only nothing in common is said


def killed(lines: list[dict[str, Any]]) -> None:
    del lines[-1]  # no end line: the baseline never finished


@pytest.mark.parametrize("edit, code, verdict, said", [
    (extra_item, 3, "ERROR", "1 item(s) passed in the baseline and are not in this run (not measured now): s::extra["),
    (extra_suite, 3, "ERROR", "1 item(s) passed in the baseline and are not in this run (not measured now): dropped::ok["),
    (other_platform, 3, "ERROR", "platforms differ from the baseline: h100-sxm-8x -> cpu"),
    (no_item_in_common, 3, "ERROR", "no item of this run is in the baseline"),
    (killed, 2, "INCOMPLETE", "is INCOMPLETE: the run was killed before it ended"),
], ids=["extra_item", "extra_suite", "other_platform", "no_item_in_common", "incomplete"])
def test_run_compare_exits_and_reports_as_compare(project: pytest.Pytester, edit: Callable[[list[dict[str, Any]]], None],
                                                  code: int, verdict: str, said: str) -> None:
    run = real_run(project)
    # its numbers a thousandth too (`slow`): two real runs on a loaded machine differ by more than the tolerance, and
    # a regression (exit 1) would outrank what these cases are about
    baseline = edited(run, project.path / "b", lambda lines: (slow(lines), edit(lines)))
    out = project.runpytest(*RUN, "--compare", str(baseline))
    assert out.ret == code, out.stdout.str()
    latest = (project.path / "out" / "latest").resolve()
    results = json.loads((latest / "results.json").read_text())
    assert results["verdict"] == verdict
    told = [*results["compare"]["not_judged"], (results.get("incomplete") or {}).get("reason") or ""]
    assert any(said in line for line in told), told
    # the fact is in the record: `report` renders the same verdict later; compare never passes it either (its
    # own code may be 1 where these two real runs' numbers differ by more than the tolerance)
    assert cc("report", str(latest), cwd=project.path).returncode == code
    assert cc("compare", str(baseline), str(latest), cwd=project.path).returncode != 0
    if verdict == "ERROR":  # a CI page that counts failed tests does not read green
        ctrf = json.loads((latest / "ctrf.json").read_text())
        assert [t["status"] for t in ctrf["results"]["tests"] if t["name"] == "compare"] == ["failed"]
        assert 'testcase name="compare"' in (latest / "junit.xml").read_text()


def slow(lines: list[dict[str, Any]]) -> None:
    """The same run, its busbw a thousandth: this run is no regression of it, whatever the noise of two real runs
    on a loaded machine (one measured 7x slower than the run before it)."""
    for r in (x for x in lines if x.get("type") == "result"):
        for v in r["verdicts"]:
            if v["metric"] == "busbw":
                v["measured"] /= 1000
        r["metrics"]["busbw"]["value"] /= 1000


def test_a_like_for_like_baseline_still_passes(project: pytest.Pytester) -> None:
    run = real_run(project)
    baseline = edited(run, project.path / "b", slow)
    out = project.runpytest(*RUN, "--compare", str(baseline))
    assert out.ret == 0, out.stdout.str()
    results = json.loads((project.path / "out" / "latest" / "results.json").read_text())
    assert results["verdict"] == "PASS" and results["compare"]["not_judged"] == []
