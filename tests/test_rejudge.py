"""Re-judging the kinds a CPU run cannot measure, from the answers a result line keeps: an nccl-tests item
judged from a real nccl-tests capture, and a p2p item from the ranks' per-pair answers (the GPU boundary:
the answers are written here, the judge and the record are clustercheck's own). A record whose numbers do
not follow from those answers fails, naming its line."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from clustercheck.run.judge import judge, rules_for
from clustercheck.judging.thresholds import load_profile
from clustercheck.kinds.base import Answers
from clustercheck.record.entries import result_entry
from clustercheck.record.io import load
from clustercheck.evidence.rejudge import rejudge
from clustercheck.suite.load import load_suite
from evidence import TOOLS
from nccl_standin import asked, one_node

CAPTURE = TOOLS / "nccl-tests" / "allreduce-h100-2node-16rank-mpirun.txt"

SUITE = """\
checks:
  - id: nccl
    measure: nccl_tests
  - id: p2p
    measure: p2p
    scope: gpu-pair
"""
PROFILE = """\
platform: h100-test
description: re-judging test profile
detect: {gpu_count: 2}
checks:
  nccl:
    busbw: {limit: ">= 100", unit: GB/s, source: "a test floor"}
  p2p:
    unidirectional: {limit: ">= 300", unit: GB/s, source: "a test floor"}
    bidirectional: {limit: ">= 600", unit: GB/s, source: "a test floor"}
    p2p_min_ratio: {limit: ">= 0.9", unit: ratio, source: "a test floor"}
"""


def nccl_answers() -> list[dict[str, Any]]:
    # the tool's output, without the source line, as node7's run of what it asked (tests/nccl_standin.py)
    stdout = one_node("\n".join(CAPTURE.read_text().split("\n")[2:]))
    return [{"host": "node7", "binary": "all_reduce_perf", "argv": asked(stdout), "outcome": "ran", "returncode": 0,
             "timed_out": False, "timeout": 54.0, "seconds": 1.0, "stdout": stdout,
             "stdout_bytes": len(stdout.encode()), "truncated": False, "stderr_tail": ""}, {}]


def p2p_answers() -> list[dict[str, Any]]:
    """Two GPUs, as measure.copies.p2p answers: each rank its outgoing pair, one-way and both ways at once."""
    def pair(a: int, b: int, one_way: float, share: float) -> dict[str, Any]:
        spread = {"median": one_way, "min": one_way * 0.99, "max": one_way * 1.01}
        return {f"GPU{a}->GPU{b}": {"unidirectional": spread, "peer_access": True},
                f"GPU{a}->GPU{b}:bidir": {"share": {"median": share, "min": share, "max": share}}}
    return [{"subjects": pair(0, 1, 370.0, 350.0)}, {"subjects": pair(1, 0, 360.0, 345.0)}]


def write_run(run: Path) -> Path:
    """A run directory as a run leaves it: inputs kept, a header naming their sha256, a result line per item
    made by the real judge and the real record entry."""
    (run / "inputs" / "suites").mkdir(parents=True)
    (run / "inputs" / "thresholds").mkdir()
    suite_file, profile_file = run / "inputs/suites/s.yaml", run / "inputs/thresholds/h100-test.yaml"
    suite_file.write_text(SUITE)
    profile_file.write_text(PROFILE)
    suite, profile = load_suite(suite_file, "suites/s.yaml"), load_profile(profile_file, "thresholds/h100-test.yaml")
    header = {"type": "run", "schema": 1, "started": "2026-01-01T00:00:00+00:00", "platform": "h100-test",
              "thresholds": {"file": "thresholds/h100-test.yaml", "sha256": _sha(profile_file)},
              "suites": [{"file": "suites/s.yaml", "sha256": _sha(suite_file)}], "nodes": ["node7"],
              "backend": "nccl", "ranks": 2}
    lines = [header]
    for check, answers in zip(suite.checks, (nccl_answers(), p2p_answers())):
        outcome = judge(Answers(check, answers, [{"host": "node7"}] * 2, "nccl"), rules_for(check, profile), {})
        entry = result_entry(check, "node7", ["node7"], nodeid=check.id, name=f"{check.id}[node7]",
                             outcome="passed" if all(v.passed for v in outcome.verdicts) else "failed",
                             message="", duration=1.0, measured=outcome, figure="none")
        lines.append(json.loads(json.dumps(entry, default=str)))
    (run / "run.jsonl").write_text("".join(json.dumps(x, sort_keys=True) + "\n" for x in lines))
    return run / "run.jsonl"


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_nccl_tests_and_p2p_items_re_judge_from_their_kept_answers(tmp_path: Path) -> None:
    record = write_run(tmp_path)
    results = load(record).results
    assert all("answers" in r for r in results)  # their rows do not hold what the judge read
    assert results[0]["answers"][0]["stdout"].startswith("# nThread")
    got = rejudge(tmp_path, load(record))
    assert got.problems == [] and got.results == 2
    assert got.verdicts == len(results[0]["verdicts"]) + len(results[1]["verdicts"])
    assert got.metrics >= 6


def test_a_p2p_bidirectional_sum_that_does_not_follow_fails(tmp_path: Path) -> None:
    record = write_run(tmp_path)
    lines = record.read_text().splitlines()
    p2p = json.loads(lines[2])
    bidir = next(v for v in p2p["verdicts"] if v["metric"] == "bidirectional")
    bidir["measured"] *= 2
    lines[2] = json.dumps(p2p, sort_keys=True)
    record.write_text("\n".join(lines) + "\n")
    problems = rejudge(tmp_path, load(record)).problems
    assert len(problems) == 1 and problems[0].startswith("run.jsonl:3: s::p2p[node7]: verdict bidirectional [GPU0<->GPU1]")


def test_an_nccl_tests_busbw_that_does_not_follow_from_the_tool_output_fails(tmp_path: Path) -> None:
    record = write_run(tmp_path)
    lines = record.read_text().splitlines()
    nccl = json.loads(lines[1])
    nccl["metrics"]["busbw"]["value"] *= 10
    lines[1] = json.dumps(nccl, sort_keys=True)
    record.write_text("\n".join(lines) + "\n")
    (problem,) = rejudge(tmp_path, load(record)).problems
    assert problem.startswith("run.jsonl:2: s::nccl[node7]: metric busbw: recorded ")


def test_a_profile_edited_after_the_run_cannot_judge_it(tmp_path: Path) -> None:
    record = write_run(tmp_path)
    profile = tmp_path / "inputs/thresholds/h100-test.yaml"
    profile.write_text(PROFILE.replace(">= 100", ">= 1"))  # a lower floor, after the fact
    problems = rejudge(tmp_path, load(record)).problems
    assert problems[0].startswith("inputs/: no copy of the threshold profile thresholds/h100-test.yaml with the "
                                  "record's sha256")
