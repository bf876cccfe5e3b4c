"""`clustercheck verify` against a key holder who forges the shape of a run rather than its numbers: one
node's item deleted from the plan and the results, a failed item rewritten as a harness error, and header
fields (platform, nodes, repetitions) that contradict the kept profile, the ranks' pools and the run's own
command line. Each forgery edits a real signed run, re-signs it with the right key (what `clustercheck sign`
does) and must come out NOT VERIFIED (exit 6) naming the record line. One real run: two nodes through the
hosts launcher (each host an agent on this machine), --repeat 2, a check that fails on both nodes."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any, Callable

import pytest

from helpers import clustercheck_here
from test_attestation import openssl_key

pytestmark = pytest.mark.pool

SUITE = """checks:
  - id: node-ar
    measure: all_reduce
    scope: node
    params: {sizes: [64KiB], iters: 2, warmup: 1, check_iters: 1}
  - id: node-slow
    measure: all_reduce
    scope: node
    params: {sizes: [64KiB], iters: 2, warmup: 1, check_iters: 1}
  - id: across
    measure: all_reduce
    scope: cluster
    params: {sizes: [64KiB], iters: 2, warmup: 1, check_iters: 1}
"""
PROFILE = """platform: cpu
detect: {gpu_count: 0}
defaults:
  all_reduce:
    busbw: {limit: '>= 0.000001', unit: GB/s, source: any working loopback}
checks:
  node-slow:
    busbw: {limit: '>= 100000', unit: GB/s, source: no loopback reaches it}
  across:
    busbw: {limit: '>= 0.000001', unit: GB/s, source: any working loopback between the agents}
"""


@pytest.fixture(scope="module")
def signed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("forged-plan")
    (root / "s.yaml").write_text(SUITE)
    (root / "th").mkdir()
    (root / "th" / "cpu.yaml").write_text(PROFILE)
    key, pub = openssl_key(root, "seller")
    proc = clustercheck_here("run", "s.yaml", "--thresholds", "th", "--out", "out", "--launcher", "hosts",
                             "--hosts", "h[1-2]", "--host-command", "env CC_HOST={host} {python}", "--ranks", "2",
                             "--repeat", "2", "--sign", str(key), cwd=root)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]  # node-slow fails on both nodes
    return {"run": (root / "out" / "latest").resolve(), "key": key, "pub": pub}


def forged(signed: dict[str, Path], tmp_path: Path, change: Callable[[list[dict[str, Any]]], None]) -> Path:
    """A copy of the run with `change` made to its record lines, the end counts written from its results as
    a run writes them, the reports rendered again and the whole signed again with the seller's key."""
    from clustercheck.evidence.signing import sign_run
    from clustercheck.record.keys import load_private
    from clustercheck.record.schema import counts
    from clustercheck.report import read

    run = tmp_path / "run"
    shutil.copytree(signed["run"], run)
    entries = [json.loads(line) for line in (run / "run.jsonl").read_text().splitlines()]
    change(entries)
    entries[-1]["counts"] = counts([e for e in entries if e.get("type") == "result"])
    (run / "run.jsonl").write_text("".join(json.dumps(e, sort_keys=True) + "\n" for e in entries))
    sign_run(run, read(run / "run.jsonl"), load_private(signed["key"]))
    return run


def verify(run: Path, pub: Path) -> subprocess.CompletedProcess[str]:
    return clustercheck_here("verify", str(run), "--key", str(pub), cwd=run.parent)


def problems(proc: subprocess.CompletedProcess[str]) -> list[str]:
    return [line.removeprefix("FAIL  ") for line in proc.stdout.splitlines() if line.startswith("FAIL  ")]


def not_verified(proc: subprocess.CompletedProcess[str]) -> list[str]:
    assert proc.returncode == 6 and "NOT VERIFIED" in proc.stdout.splitlines()[-1], proc.stdout + proc.stderr
    return problems(proc)


def plan_of(entries: list[dict[str, Any]]) -> dict[str, Any]:
    return next(e for e in entries if e.get("type") == "plan")


def test_the_genuine_run_verifies_as_its_failure(signed: dict[str, Path]) -> None:
    proc = verify(signed["run"], signed["pub"])
    assert proc.returncode == 1 and "run verdict FAIL" in proc.stdout.splitlines()[-1], proc.stdout
    assert problems(proc) == []


def test_one_node_s_item_deleted_from_plan_and_results_is_not_verified(signed: dict[str, Path],
                                                                       tmp_path: Path) -> None:
    """node-slow[h2] (failed in both repetitions) taken out of the plan and the results: the plan was
    checked by (suite, check) alone, so h1's item kept the check covered and the run verified with h2 as
    good as untested (the audit's `dropnode`, on a 2-node join run, verified PASS)."""
    def drop(entries: list[dict[str, Any]]) -> None:
        plan_of(entries)["items"] = [i for i in plan_of(entries)["items"] if i["name"] != "node-slow[h2]"]
        entries[:] = [e for e in entries if e.get("name") != "node-slow[h2]"]

    found = not_verified(verify(forged(signed, tmp_path, drop), signed["pub"]))
    assert any(p.startswith("run.jsonl:2: check 'node-slow' (s.yaml:") and "is scope node, which plans "
               "node-slow[h2] (node h2) on this run's nodes, but the record plans no such item" in p
               for p in found), found


def test_a_failed_item_rewritten_as_a_harness_error_is_not_verified(signed: dict[str, Path], tmp_path: Path) -> None:
    """node-slow[h1]'s first repetition made an error ("rank 1: tool crashed") without its failed verdicts,
    its rows, metrics and worst rank kept: an error item was never judged again, so the run verified as
    ERROR (exit 3, a harness fault) while the record still held the failing measurement."""
    def as_error(entries: list[dict[str, Any]]) -> None:
        r = next(e for e in entries if e.get("name") == "node-slow[h1]")
        r.update(outcome="error", message="rank 1: tool crashed", verdicts=[])

    found = not_verified(verify(forged(signed, tmp_path, as_error), signed["pub"]))
    assert any("s::node-slow[h1]: outcome error, but it holds a measurement (rows, metrics, worst, judged_at) whose "
               "verdicts, judged again, fail (busbw FAIL (" in p and p.endswith("a failed item rewritten as a harness "
                                                                                  "error") for p in found), found


def test_an_error_item_that_holds_no_measurement_still_verifies(signed: dict[str, Path], tmp_path: Path) -> None:
    """What a run writes for an item it could not measure (a hang, a tool that crashed): outcome, message,
    no rows, metrics or verdicts. Judged nothing, it is not judged again, and the run verifies (as FAIL:
    node-slow failed elsewhere, and a failure outranks an error). tests/test_hosts_lost.py verifies a real
    run's errors for a node lost mid-run."""
    def honest_error(entries: list[dict[str, Any]]) -> None:
        r = next(e for e in entries if e.get("name") == "node-slow[h1]")
        for key in ("rows", "metrics", "worst", "judged_at", "verdicts", "pool", "comm", "notes"):
            r.pop(key, None)
        r.update(outcome="error", message="rank 1: tool crashed")

    proc = verify(forged(signed, tmp_path, honest_error), signed["pub"])
    assert proc.returncode == 1 and "run verdict FAIL" in proc.stdout.splitlines()[-1], proc.stdout
    assert problems(proc) == []


def test_a_platform_the_profile_is_not_is_not_verified(signed: dict[str, Path], tmp_path: Path) -> None:
    """The header's platform edited to h100 over a run judged by the kept cpu.yaml: verified before."""
    def h100(entries: list[dict[str, Any]]) -> None:
        entries[0]["platform"] = "h100"

    found = not_verified(verify(forged(signed, tmp_path, h100), signed["pub"]))
    assert "run.jsonl:1: platform 'h100', but the threshold profile it was judged by (th/cpu.yaml) is platform " \
           "'cpu': a run records the platform of its profile" in found, found


def test_a_node_removed_from_the_header_its_ranks_left_in_the_pools_is_not_verified(signed: dict[str, Path],
                                                                                    tmp_path: Path) -> None:
    """h2 taken out of nodes, ranks, the plan and the results (the cluster item said to be h1's alone), as
    the audit's `rmnode` did to a 2-node join run that then verified PASS on one node: the ranks' pools
    still ran on h2, and the run's command line still says --hosts h[1-2]."""
    def without_h2(entries: list[dict[str, Any]]) -> None:
        entries[0].update(nodes=["h1"], ranks=2)
        entries[0].get("node_facts", {}).pop("h2", None)
        plan = plan_of(entries)
        plan["items"] = [i for i in plan["items"] if i["node"] != "h2"]
        for e in [*plan["items"], *entries]:
            if e.get("check") == "across":
                e["nodes"] = ["h1"]
        entries[:] = [e for e in entries if not (e.get("type") == "result" and e.get("node") == "h2")]

    found = not_verified(verify(forged(signed, tmp_path, without_h2), signed["pub"]))
    assert any(p.startswith("run.jsonl:1: nodes h1, but the ranks' pool of line ") and p.endswith(
        " ran on h2: a node the header leaves out") for p in found), found
    assert "run.jsonl:1: nodes h1 (never joined included), but its argv says --hosts h[1-2] (2 host(s)): a run " \
           "records each host it was given" in found, found


def test_a_repetition_removed_with_its_count_is_not_verified(signed: dict[str, Path], tmp_path: Path) -> None:
    """The second repetition's results deleted and repeat.count and the end line's repetitions set to 1:
    the record read whole (one repetition of one asked for) though the run's argv says --repeat 2."""
    def one_repetition(entries: list[dict[str, Any]]) -> None:
        entries[0]["repeat"] = {"count": 1}
        entries[-1]["repetitions"] = 1
        entries[:] = [e for e in entries if e.get("repeat") != 2]

    found = not_verified(verify(forged(signed, tmp_path, one_repetition), signed["pub"]))
    assert "run.jsonl:1: repeat count 1, but its argv says --repeat 2: a run records the repetitions it was asked " \
           "for" in found, found


@pytest.mark.parametrize("argv, repeat, nodes, hosts", [
    (["clustercheck", "run", "s.yaml", "--repeat=3", "-k", "not --repeat 2", "--nodes", "2"], 3, 2, None),
    (["/venv/bin/clustercheck", "run", "s.yaml", "-p", "x", "--launcher", "hosts", "--hosts", "h[1-4]"], None, None,
     "h[1-4]"),
    (["/venv/bin/pytest", "suites/s.yaml", "--repeat", "2", "--cc-out=o", "-k", "x", "--nodes=5"], 2, 5, None),
    (["clustercheck", "run", "--", "s.yaml"], None, None, None),
])
def test_the_command_line_is_read_as_the_run_reads_it(argv: list[str], repeat: int | None, nodes: int | None,
                                                      hosts: str | None) -> None:
    """`--repeat=3` and `--repeat 3` alike, a `-k` whose value names an option, and pytest's own form of
    the run's options (`pytest suites/s.yaml --repeat 2`); one that the run's parser refuses is no run's."""
    from clustercheck.evidence.header_check import command_line

    got = command_line(argv)
    assert (got.repeat, got.nodes, got.hosts) == (repeat, nodes, hosts)
    with pytest.raises(ValueError, match="argument --repeat: invalid int value: 'two'"):
        command_line([*argv[:2], "--repeat", "two"])
