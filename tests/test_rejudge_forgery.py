"""Forgeries of a real CPU run that the holder of the signing key could sign again, and that `verify`'s
re-judging must refuse (docs/evidence.md): a failed item rewritten as passed, skipped or error; an item's
measure or scope changed so that it is "judged as recorded"; a carriage return that moved the line count;
a failed check deleted from the plan and the results. One real run per module (gloo ranks), forged in
copies; each forgery is re-judged in this process, and the first signed and verified end to end."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import pytest

from helpers import clustercheck_here, cpu_profile

from clustercheck.evidence.plan_check import selection
from clustercheck.evidence.rejudge import Rejudged, rejudge
from clustercheck.record.io import load

SUITE = """\
suite: forge
checks:
  - id: sweep
    measure: all_reduce
    params: {sizes: [1KiB, 64KiB], iters: 3, warmup: 1}
  - id: small
    measure: all_reduce
    params: {sizes: [1KiB], iters: 3, warmup: 1}
  - id: across
    measure: all_reduce
    scope: cluster
    min_nodes: 2
    params: {sizes: [1KiB], iters: 3, warmup: 1}
"""
PROFILE = cpu_profile("""\
  sweep:
    busbw: {limit: ">= 1000", unit: GB/s, source: "no loopback reaches it: this check fails"}
  small:
    busbw: {limit: ">= 0.000001", unit: GB/s, source: "any working loopback"}
  across:
    busbw: {limit: ">= 0.000001", unit: GB/s, source: "any working loopback"}
""", "forgery test profile")


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real run that FAILS on `sweep`, passes `small` and skips `across` (one node)."""
    root = tmp_path_factory.mktemp("forge")
    (root / "forge.yaml").write_text(SUITE)
    (root / "profiles").mkdir()
    (root / "profiles" / "cpu.yaml").write_text(PROFILE)
    proc = clustercheck_here("run", "forge.yaml", "--thresholds", "profiles", "--out", "out", cwd=root)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    return (root / "out" / "latest").resolve()


def forged(run: Path, tmp_path: Path, change: Callable[[list[dict[str, Any]]], None], name: str = "forged") -> Path:
    target = tmp_path / name
    shutil.copytree(run, target)
    lines = [json.loads(line) for line in (target / "run.jsonl").read_text().splitlines()]
    change(lines)
    (target / "run.jsonl").write_text("".join(json.dumps(e, sort_keys=True) + "\n" for e in lines))
    return target


def rejudged(run_dir: Path) -> Rejudged:
    return rejudge(run_dir, load(run_dir / "run.jsonl"))


def result(lines: list[dict[str, Any]], check: str) -> dict[str, Any]:
    return next(e for e in lines if e.get("type") == "result" and e["check"] == check)


def test_the_genuine_run_re_judges_clean_skip_included(run: Path) -> None:
    rec = load(run / "run.jsonl")
    assert {r["check"]: r["outcome"] for r in rec.results} == {"sweep": "failed", "small": "passed",
                                                               "across": "skipped"}
    got = rejudged(run)
    assert got.problems == [] and got.results == 2, got.problems


@pytest.mark.parametrize("outcome", ["passed", "skipped"])
def test_a_failed_item_rewritten_without_its_verdicts_fails(run: Path, tmp_path: Path, outcome: str) -> None:
    def hide(lines: list[dict[str, Any]]) -> None:
        r = result(lines, "sweep")
        r.update(outcome=outcome, message="")
        for key in ("verdicts", "metrics", "rows"):
            r.pop(key)

    problems = rejudged(forged(run, tmp_path, hide)).problems
    assert problems and all("forge::sweep[" in p for p in problems), problems
    if outcome == "skipped":
        assert any("outcome skipped without a message" in p for p in problems), problems
    else:
        assert any("cannot be re-judged" in p for p in problems), problems


def test_a_failed_item_that_kept_its_rows_is_told_its_missing_verdict(run: Path, tmp_path: Path) -> None:
    def hide(lines: list[dict[str, Any]]) -> None:
        r = result(lines, "sweep")
        r.update(outcome="passed", message="")
        r.pop("verdicts")

    problems = rejudged(forged(run, tmp_path, hide)).problems
    assert any("verdict busbw (FAIL" in p and "missing from the record" in p for p in problems), problems


@pytest.mark.parametrize("outcome", ["error", "skipped", "passed"])
def test_a_failed_verdict_under_another_outcome_fails(run: Path, tmp_path: Path, outcome: str) -> None:
    problems = rejudged(forged(run, tmp_path, lambda lines: result(lines, "sweep").update(outcome=outcome))).problems
    assert any(f"outcome {outcome}, but its verdicts say failed (busbw)" in p for p in problems), problems


def test_a_passed_item_called_failed_without_a_failed_verdict_fails(run: Path, tmp_path: Path) -> None:
    problems = rejudged(forged(run, tmp_path, lambda lines: result(lines, "small").update(outcome="failed"))).problems
    assert any("forge::small[" in p and "outcome failed, but its verdicts say passed" in p for p in problems), problems


def test_a_measured_item_rewritten_as_a_plausible_skip_fails(run: Path, tmp_path: Path) -> None:
    """The failed `sweep`, its verdicts and measurements removed, skipped with the reason a one-node run gives
    a cluster check: on this run's layout all_reduce at node scope applies, and its kind skips nothing on
    what the ranks find, so the skip is not one the run made."""
    def hide(lines: list[dict[str, Any]]) -> None:
        r = result(lines, "sweep")
        r.update(outcome="skipped", message=result(lines, "across")["message"])
        for key in ("verdicts", "metrics", "rows"):
            r.pop(key)

    problems = rejudged(forged(run, tmp_path, hide)).problems
    assert len(problems) == 1 and "forge::sweep[" in problems[0], problems
    assert "applies on this run's layout (1 node(s) of 2 rank(s) over gloo)" in problems[0], problems


def test_a_layout_skip_must_give_the_layouts_reason(run: Path, tmp_path: Path) -> None:
    problems = rejudged(forged(run, tmp_path, lambda lines: result(lines, "across").update(
        message="all_reduce over a single rank moves no data between devices"))).problems
    assert len(problems) == 1 and "is skipped saying 'across needs 2 nodes or more" in problems[0], problems


def test_a_skip_where_an_absent_node_makes_it_an_error_fails(run: Path, tmp_path: Path) -> None:
    """A node that never joined would have made `across` two nodes: the run errors it (run/applies.py), so a
    skip saying the run was one node is not what it wrote."""
    problems = rejudged(forged(run, tmp_path, lambda lines: lines[0].update(absent={"h2": "never joined"}))).problems
    assert any("forge::across" in p and "the run makes it an error (not run: across needs 2 nodes; 1 node(s) "
               "never joined: h2)" in p for p in problems), problems


@pytest.mark.parametrize("field,value", [("measure", "layout"), ("scope", "localize")])
def test_a_measure_or_scope_changed_on_the_line_is_not_judged_as_recorded(run: Path, tmp_path: Path, field: str,
                                                                          value: str) -> None:
    def judge_as_recorded(lines: list[dict[str, Any]]) -> None:
        r = result(lines, "sweep")
        r[field] = value
        r["outcome"], r["message"] = "passed", ""
        for v in r["verdicts"]:  # busbw only: a `wrong == 0` that passed at 2000 the reader refuses itself
            if v["metric"] == "busbw":
                v.update(measured=2000.0, passed=True, margin=1.0)

    got = rejudged(forged(run, tmp_path, judge_as_recorded))
    assert any("forge::sweep[" in p and f"{field} {value}" in p and "check 'sweep'" in p and "not what was run" in p
               for p in got.problems), got.problems
    assert not any("judged as recorded" in n for n in got.notes), got.notes


def test_a_carriage_return_in_a_line_leaves_no_result_unjudged(run: Path, tmp_path: Path) -> None:
    """A CR is JSON whitespace; a reader splitting at it saw one line more, and the last result went unjudged."""
    def forge(lines: list[dict[str, Any]]) -> None:
        r = result(lines, "sweep")
        r.update(outcome="passed", message="")
        for v in r["verdicts"]:  # busbw only: a `wrong == 0` that passed at 2000 the reader refuses itself
            if v["metric"] == "busbw":
                v.update(measured=2000.0, passed=True, margin=1.0)
        r["metrics"]["busbw"]["value"] = 2000.0
        results = [e for e in lines if e.get("type") == "result"]
        rest = [e for e in lines if e.get("type") != "result"]
        at = next(i for i, e in enumerate(rest) if e["type"] in ("exclude", "end"))
        lines[:] = rest[:at] + [e for e in results if e is not r] + [r] + rest[at:]  # the forged one last

    target = forged(run, tmp_path, forge)
    text = (target / "run.jsonl").read_text()
    first = text.index('{"check"')
    (target / "run.jsonl").write_bytes((text[:first] + '{\r' + text[first + 1:]).encode())
    rec = load(target / "run.jsonl")
    got = rejudge(target, rec)
    last = rec.lines.results[-1]
    assert any(p.startswith(f"run.jsonl:{last}: forge::sweep[") and "metric busbw: recorded 2000" in p
               for p in got.problems), got.problems


def test_a_failed_check_deleted_from_plan_and_results_fails(run: Path, tmp_path: Path) -> None:
    def delete(lines: list[dict[str, Any]]) -> None:
        plan = next(e for e in lines if e["type"] == "plan")
        plan["items"] = [i for i in plan["items"] if i["check"] != "sweep"]
        lines.remove(result(lines, "sweep"))

    problems = rejudged(forged(run, tmp_path, delete)).problems
    assert any("check 'sweep' (forge.yaml:" in p and "plans no item of it" in p for p in problems), problems


def test_a_run_that_selected_items_says_so_instead(run: Path, tmp_path: Path) -> None:
    def selected(lines: list[dict[str, Any]]) -> None:
        lines[0]["argv"] = [*lines[0]["argv"], "-k", "small or across"]
        plan = next(e for e in lines if e["type"] == "plan")
        plan["items"] = [i for i in plan["items"] if i["check"] != "sweep"]
        lines.remove(result(lines, "sweep"))

    got = rejudged(forged(run, tmp_path, selected))
    assert got.problems == [], got.problems
    assert any("the plan cannot be checked against the suites: -k small or across" in n for n in got.notes), got.notes


def test_plan_items_and_result_nodes_must_be_the_runs(run: Path, tmp_path: Path) -> None:
    def strangers(lines: list[dict[str, Any]]) -> None:
        plan = next(e for e in lines if e["type"] == "plan")
        plan["items"].append({**plan["items"][0], "check": "ghost", "name": "ghost[x]", "nodeid": "forge.yaml::ghost"})
        result(lines, "small")["nodes"] = ["elsewhere"]

    problems = rejudged(forged(run, tmp_path, strangers)).problems
    assert any("planned item ghost[x]: check 'ghost' of forge.yaml is not in the run's suite files" in p
               for p in problems), problems
    assert any("forge::small[" in p and "node(s) elsewhere not among the run's nodes" in p for p in problems), problems


def test_selection_reads_the_ways_pytest_selects() -> None:
    assert selection(["clustercheck", "run", "s.yaml", "-q", "--sign", "<private key>"]) is None
    assert selection(["clustercheck", "run", "s.yaml", "-k", "sweep"]) == "-k sweep"
    assert selection(["clustercheck", "run", "s.yaml", "-msmoke"]) == "-msmoke"
    assert selection(["clustercheck", "run", "s.yaml", "--deselect=s.yaml::a"]) == "--deselect=s.yaml::a"
    assert selection(["clustercheck", "run", "s.yaml::sweep[vm]"]) == "s.yaml::sweep[vm]"


def test_a_forged_pass_signed_again_does_not_verify(run: Path, tmp_path: Path) -> None:
    """End to end, as the auditor did it: re-signed with the right key, `verify` exits 6, NOT VERIFIED."""
    key = tmp_path / "k.pem"
    subprocess.run(["openssl", "genpkey", "-algorithm", "ed25519", "-out", str(key)], check=True, capture_output=True)
    key.chmod(0o600)
    pub = tmp_path / "k.pub"
    subprocess.run(["openssl", "pkey", "-in", str(key), "-pubout", "-out", str(pub)], check=True, capture_output=True)

    def hide(lines: list[dict[str, Any]]) -> None:
        r = result(lines, "sweep")
        r.update(outcome="passed", message="")
        for name in ("verdicts", "metrics", "rows"):
            r.pop(name)

    target = forged(run, tmp_path, hide)

    def cc(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "clustercheck", *args], capture_output=True, text=True,
                              cwd=tmp_path, timeout=300, env=dict(os.environ))

    signed = cc("sign", str(target), "--key", str(key))
    assert signed.returncode == 0 and "run verdict PASS" in signed.stdout, signed.stdout + signed.stderr
    proc = cc("verify", str(target), "--key", str(pub))
    assert proc.returncode == 6 and "NOT VERIFIED" in proc.stdout, proc.stdout
