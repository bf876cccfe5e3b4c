"""A node lost during a `scope: localize` check (its agent killed while the planner's rounds run) is left out
of it: the rounds run again on the nodes left, which get their verdicts, and the lost node's item is an error
naming it lost during that check (run/runner.py `Runner.localize`). Real runs through the hosts launcher."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from clustercheck.exitcodes import Exit

sys.path.insert(0, str(Path(__file__).resolve().parent))
from joining import LIMITS, all_reduce_suite, kill_mid_run, results  # noqa: E402
from test_hosts_agents import agent_pid, run  # noqa: E402

pytestmark = pytest.mark.pool  # whole runs with real rank pools

FLOORS = "".join(f"  {name}:\n    busbw: {{limit: '>= 0.000001', unit: GB/s, source: any working link}}\n"
                 for name in ("fabric", "later"))


def test_a_node_lost_in_a_localize_check_leaves_it_and_the_others_get_their_verdicts(tmp_path: Path) -> None:
    """Four hosts; h3's agent is killed once fabric's pool is up (every rank waits 2 s first, a test-only
    delay). fabric[h1], [h2], [h4] and the cluster item are judged on the three nodes left; fabric[h3] is an
    error naming h3 unreachable and lost during fabric, and so is later[h3]. Failed before the fix: every
    fabric item errored (a pool with h3 in it could not start) and later[h3] said h3 was lost during later."""
    (tmp_path / "th").mkdir()
    (tmp_path / "th" / "cpu.yaml").write_text(LIMITS + FLOORS)
    (tmp_path / "s.yaml").write_text(all_reduce_suite("fabric:localize", "later:node"))
    ctl = run(tmp_path, "--cc-inject-fault=fabric:delay", hosts="h[1-4]")
    out = kill_mid_run(ctl, tmp_path / "out" / "latest" / "run.jsonl", lambda: agent_pid("h3", ctl.pid),
                       after='"type": "pool"')
    data = results(tmp_path)
    outcome = {r["name"]: r for r in data["results"]}
    for name in ("fabric[h1]", "fabric[h2]", "fabric[h4]", "fabric", "later[h1]", "later[h2]", "later[h4]"):
        assert outcome[name]["outcome"] == "passed", (name, outcome[name]["message"], out[-3000:])
    for name in ("fabric[h3]", "later[h3]"):
        lost = outcome[name]
        assert lost["outcome"] == "error" and lost["unreachable"] == ["h3"], (name, lost)
        assert lost["message"].startswith("not measured: h3 was lost during fabric ("), (name, lost["message"])
    assert any("measured 3 of the run's 4 nodes (h1, h2, h4)" in n for n in outcome["fabric"].get("notes") or [])
    assert sorted(data["lost"]["h3"]) == ["s::fabric[h3]", "s::later[h3]"], data["lost"]
    assert (tmp_path / "out" / "latest" / "exclude.txt").read_text().split() == ["h3"]
    assert data["verdict"] == "ERROR" and ctl.returncode == Exit.ERROR
    assert "Traceback" not in out


def test_a_two_node_localize_that_loses_a_node_names_it_and_judges_no_one(tmp_path: Path) -> None:
    """Two hosts; h2's agent is killed once fabric's pool is up. One node is left, too few to localize: the
    check judges nobody, fabric[h2] is an error naming h2 unreachable and lost during fabric, and fabric[h1]
    and the cluster item are errors saying why (one node left), never a pass. Failed before the fix: the
    rounds ran again on h1 alone and the planner's `localizing needs at least 2 nodes` was every item's
    error, fabric[h2]'s with no node unreachable."""
    (tmp_path / "th").mkdir()
    (tmp_path / "th" / "cpu.yaml").write_text(LIMITS + FLOORS)
    (tmp_path / "s.yaml").write_text(all_reduce_suite("fabric:localize"))
    ctl = run(tmp_path, "--cc-inject-fault=fabric:delay", hosts="h[1-2]")
    out = kill_mid_run(ctl, tmp_path / "out" / "latest" / "run.jsonl", lambda: agent_pid("h2", ctl.pid),
                       after='"type": "pool"')
    data = results(tmp_path)
    outcome = {r["name"]: r for r in data["results"]}
    lost = outcome["fabric[h2]"]
    assert lost["outcome"] == "error" and lost["unreachable"] == ["h2"], lost
    assert lost["message"].startswith("not measured: h2 was lost during fabric ("), lost["message"]
    for name in ("fabric[h1]", "fabric"):
        said = outcome[name]
        assert said["outcome"] == "error" and not said.get("unreachable"), (name, said)
        assert "1 node is left (h1) after h2 was lost: localizing needs at least 2" in said["message"], said
    assert (tmp_path / "out" / "latest" / "exclude.txt").read_text().split() == ["h2"]
    assert data["verdict"] == "ERROR" and ctl.returncode == Exit.ERROR
    assert "Traceback" not in out
