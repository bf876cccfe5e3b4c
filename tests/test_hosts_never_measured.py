"""A node never measured is never a pass or a plain skip (run/runner.py), tested for real through the hosts
launcher (each host a node agent on this machine, reached through a stand-in for ssh, as in
tests/test_hosts_agents.py): a check that needs two nodes where the second never joined is an error naming
it, not "needs 2 nodes"; an agent found silent as a later check's ranks start puts its node on the
exclusion list as unreachable."""

from __future__ import annotations

import json
import os
import signal
import xml.etree.ElementTree as ET
import sys
from pathlib import Path

import pytest

from clustercheck.exitcodes import Exit
from clustercheck.run import scopes

sys.path.insert(0, str(Path(__file__).resolve().parent))
from joining import LIMITS, all_reduce_suite, alive, results, wait_for  # noqa: E402
from test_hosts_agents import agent_pid, run  # noqa: E402

pytestmark = pytest.mark.pool  # whole runs with real rank pools

ACROSS = all_reduce_suite("node-ar:node", "across:cluster:min_nodes=2")


def project(tmp: Path, suite: str) -> None:
    (tmp / "th").mkdir()
    (tmp / "th" / "cpu.yaml").write_text(LIMITS)
    (tmp / "s.yaml").write_text(suite)


def test_a_two_node_check_whose_second_node_never_joined_is_an_error_naming_it(tmp_path: Path) -> None:
    """h2's agent cannot start (its ssh stand-in exits 255): `across` (min_nodes: 2) would have run on
    the planned two nodes, so it is an error naming h2, never "needs 2 nodes" skipped.
    Failed before the fix: it was skipped with "this run has 1"."""
    project(tmp_path, ACROSS)
    ctl = run(tmp_path, env={"CC_DOWN": "h2"})
    out, _ = ctl.communicate(timeout=300)
    data = results(tmp_path)
    assert ctl.returncode == Exit.INCOMPLETE and data["verdict"] == "INCOMPLETE", out[-3000:]
    outcome = {r["check"]: r for r in data["results"] if r["check"] != "node-ar"}
    assert outcome["across"]["outcome"] == "error", outcome["across"]
    assert outcome["across"]["message"].endswith("not run: across needs 2 nodes; 1 node(s) never joined: h2")
    assert {r["outcome"] for r in data["results"] if r["check"] == "node-ar"} == {"passed"}
    # what h2 cost, in results.json's account of what was not measured: its node item (planned, no result) and
    # `across` (a result: an error naming h2 as `absent`). Failed before: `across` was in no list of `incomplete`
    assert outcome["across"]["absent"] == ["h2"]
    assert data["incomplete"]["items"] == ["s::node-ar[h2]"]
    assert data["incomplete"]["never_joined"] == {"h2": ["s::node-ar[h2]", "s::across"]}
    assert "  h2 never joined; not measured: node-ar[h2], across" in out
    assert "Traceback" not in out


PAIRS = all_reduce_suite("node-ar:node", "links:pair")


def test_each_pair_with_a_node_that_never_joined_is_planned_and_named_not_run(tmp_path: Path) -> None:
    """h2 of h1..h3 never joins: the pair check measures h1,h3, and its two links with h2 (named as a run of
    all three names them: the hosts' order, so `links[h2,h3]`, never `links[h3,h2]`) are planned, not run,
    and named in results.json (`incomplete.items`, `never_joined`), junit.xml, ctrf.json and the terminal.
    Failed before the fix: only node-ar[h2] was planned; no report named a link with h2 as not measured."""
    project(tmp_path, PAIRS)
    (tmp_path / "th" / "cpu.yaml").write_text(LIMITS + "  links:\n    busbw: {limit: '>= 0.000001', unit: GB/s, "
                                              "source: any working link}\n")
    ctl = run(tmp_path, env={"CC_DOWN": "h2"}, hosts="h[1-3]")
    out, _ = ctl.communicate(timeout=300)
    data = results(tmp_path)
    assert ctl.returncode == Exit.INCOMPLETE and data["verdict"] == "INCOMPLETE", out[-3000:]
    full = [w for items in scopes.rounds("pair", ["h1", "h2", "h3"]) for w in items]
    lost = [f"links[{w}]" for w in full if "h2" in w.split(",")]
    assert sorted(lost) == ["links[h1,h2]", "links[h2,h3]"]
    assert {r["name"]: r["outcome"] for r in data["results"]} == {
        "node-ar[h1]": "passed", "node-ar[h3]": "passed", "links[h1,h3]": "passed"}, out[-3000:]
    run_dir = tmp_path / "out" / "latest"
    plan = next(json.loads(line) for line in (run_dir / "run.jsonl").read_text().splitlines() if '"plan"' in line)
    assert {p["name"] for p in plan["items"]} == {"node-ar[h1]", "node-ar[h3]", "links[h1,h3]", "node-ar[h2]", *lost}
    assert {p["name"]: p["nodes"] for p in plan["items"] if p["name"] in lost} == {
        n: n[6:-1].split(",") for n in lost}
    ids = {f"s::{n}" for n in ["node-ar[h2]", *lost]}
    assert set(data["incomplete"]["items"]) == ids and set(data["incomplete"]["never_joined"]["h2"]) == ids
    why = "h2 never joined (h2: its agent exited with 255 before joining"
    cases = {c.get("name"): c for c in ET.parse(run_dir / "junit.xml").getroot().iter("testcase")}
    for name in lost:
        assert cases[name].find("error").get("message").startswith(f"not run: {why}"), name
    ctrf = {t["name"]: t for t in json.loads((run_dir / "ctrf.json").read_text())["results"]["tests"]}
    assert all(ctrf[f"s::{n}"]["status"] == "failed" and why in ctrf[f"s::{n}"]["message"] for n in lost)
    named = next(line for line in out.splitlines() if line.startswith("  h2 never joined; not measured: "))
    assert all(n in named for n in ["node-ar[h2]", *lost]), named
    html = (run_dir / "report.html").read_text()
    said = next(line for line in html.splitlines() if "<b>h2</b> never joined; not measured: " in line)
    assert all(f"s::{n}" in said for n in ["node-ar[h2]", *lost]), said
    assert "Traceback" not in out


def test_a_run_planned_with_one_node_still_skips_a_two_node_check(tmp_path: Path) -> None:
    """No node is absent: the run has the one node it was given, so `across` is skipped as before."""
    project(tmp_path, ACROSS)
    ctl = run(tmp_path, "-k", "across", hosts="h1")
    out, _ = ctl.communicate(timeout=300)
    data = results(tmp_path)
    across = [r for r in data["results"] if r["check"] == "across"]
    assert [r["outcome"] for r in across] == ["skipped"], out[-3000:]
    assert across[0]["message"].endswith("needs 2 nodes or more (min_nodes: it judges the network between nodes); "
                                          "this run has 1")


LATER_POOL = all_reduce_suite("cluster-ar:cluster", "node-ar:node", "own-env:node:env=NCCL_DEBUG_SUBSYS=INIT")


def test_an_agent_silent_when_a_later_pool_starts_is_excluded_as_unreachable(tmp_path: Path) -> None:
    """h2's agent is stopped (SIGSTOP: alive, silent) once `cluster-ar` has a result, while node-ar waits 2 s
    in the same pool (a test-only delay; its ranks do not need the agent). `own-env` needs a pool of its
    own, whose ranks h2's agent never starts: found silent for 10 s as they start. h2 is then lost: the pool
    starts again on h1 alone, whose item passes; h2's item is an error naming it unreachable, lost as
    own-env's ranks started, and h2 alone is excluded. Failed before the fix: the pool start's failure
    reached every item as a plain error, and nothing was excluded; then h1's item was an error too."""
    project(tmp_path, LATER_POOL)
    ctl = run(tmp_path, "--cc-inject-fault=node-ar:delay", env={"TMPDIR": str(tmp_path)})
    pid = None
    try:
        wait_for(tmp_path / "out" / "latest" / "run.jsonl", '"type": "result"', 180)
        pid = agent_pid("h2", ctl.pid)
        os.kill(pid, signal.SIGSTOP)
        # once the run's record is complete, the stopped agent is killed: else the controller's goodbye waits
        # 5 s for it to leave, then kills it itself (it keeps the agents' output then, here in tmp_path)
        wait_for(tmp_path / "out" / "latest" / "run.jsonl", '"type": "end"', 180)
        os.kill(pid, signal.SIGKILL)
        out, _ = ctl.communicate(timeout=300)
    finally:
        ctl.kill()
        if pid is not None and alive(pid):
            os.kill(pid, signal.SIGKILL)
    data = results(tmp_path)
    outcome = {r["name"]: r for r in data["results"]}
    assert outcome["cluster-ar"]["outcome"] == "passed", out[-3000:]
    silent = outcome["own-env[h2]"]
    assert silent["outcome"] == "error" and "silent for 10 s" in silent["message"], silent["message"]
    assert silent["message"].startswith("not measured: h2 was lost during own-env (its node's agent (h2), silent")
    assert silent["unreachable"] == ["h2"]
    assert outcome["own-env[h1]"]["outcome"] == "passed", outcome["own-env[h1]"]["message"]
    assert (tmp_path / "out" / "latest" / "exclude.txt").read_text().split() == ["h2"]
    assert data["verdict"] == "ERROR" and ctl.returncode == Exit.ERROR
    assert "Traceback" not in out
