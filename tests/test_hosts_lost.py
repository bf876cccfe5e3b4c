"""A node lost mid-run (its agent killed or silent) is left out of what follows, and the run goes on on the
nodes still answering (run/runner.py `Runner.lose`, the join launcher's `leave_out`): every later item of the
lost node, and every pair with it, is an error naming it ("not measured: h3 was lost during <check> (...)")
with the node `unreachable` (on the exclusion list); the other nodes are measured and judged. Tested for real
through the hosts launcher (each host a node agent on this machine, as in tests/test_hosts_agents.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from clustercheck.exitcodes import Exit

sys.path.insert(0, str(Path(__file__).resolve().parent))
from helpers import one_kernel_log  # noqa: E402
from joining import LIMITS, all_reduce_suite, kill_mid_run, results  # noqa: E402
from test_attestation import openssl_key  # noqa: E402
from test_hosts_agents import agent_pid, run  # noqa: E402

pytestmark = pytest.mark.pool  # whole runs with real rank pools

LATER = all_reduce_suite("node-ar:node", "node-later:node", "links:pair", "across:cluster")
LINKS = "  links:\n    busbw: {limit: '>= 0.000001', unit: GB/s, source: any working link}\n" \
        "  across:\n    busbw: {limit: '>= 0.000001', unit: GB/s, source: any working link}\n"


def project(tmp: Path, suite: str) -> None:
    (tmp / "th").mkdir()
    (tmp / "th" / "cpu.yaml").write_text(LIMITS + LINKS)
    (tmp / "s.yaml").write_text(suite)


def test_a_node_lost_in_one_check_costs_the_later_checks_only_its_own_items(tmp_path: Path) -> None:
    """h3's agent is killed (SIGKILL) once node-ar's pool is up (every rank then waits 2 s, a test-only
    delay). node-ar[h3] errors naming h3 unreachable (as before); node-later then runs on h1 and h2 and
    passes there, the pair check measures h1,h2 and errors each pair with h3, and the cluster check measures
    h1 and h2 and says it measured 2 of the 3 nodes (with --counters: its counter windows are h1's and h2's,
    h3 having none after it was lost). Every item of h3 names it lost during node-ar; h3 alone
    is excluded and the run is ERROR. Failed before the fix: every item after node-ar was an error, h1's and
    h2's included."""
    project(tmp_path, LATER)
    key, pub = openssl_key(tmp_path, "seller")
    with one_kernel_log():  # --counters: no other test's Xid in its windows
        ctl = run(tmp_path, "--cc-inject-fault=node-ar:delay", "--sign", str(key), "--counters", hosts="h[1-3]")
        out = kill_mid_run(ctl, tmp_path / "out" / "latest" / "run.jsonl", lambda: agent_pid("h3", ctl.pid),
                           after='"type": "pool"')
    data = results(tmp_path)
    outcome = {r["name"]: r for r in data["results"]}
    assert outcome["node-ar[h3]"]["outcome"] == "error" and outcome["node-ar[h3]"]["unreachable"] == ["h3"], out[-3000:]
    for name in ("node-ar[h1]", "node-ar[h2]", "node-later[h1]", "node-later[h2]", "links[h1,h2]"):
        assert outcome[name]["outcome"] == "passed", (name, outcome[name]["message"])
    for name in ("node-later[h3]", "links[h1,h3]", "links[h2,h3]"):
        lost = outcome[name]
        assert lost["outcome"] == "error" and lost["unreachable"] == ["h3"], (name, lost)
        assert lost["message"].startswith("not measured: h3 was lost during node-ar (")
        assert "exited with -9" in lost["message"]
    across = outcome["across"]
    assert across["outcome"] == "passed", across["message"]
    assert any("measured 2 of the run's 3 nodes (h1, h2)" in n and "h3 was lost during node-ar" in n
               for n in across.get("notes") or []), across
    assert across["nodes"] == ["h1", "h2"]
    assert (tmp_path / "out" / "latest" / "exclude.txt").read_text().split() == ["h3"]
    assert list(data["lost"]) == ["h3"] and sorted(data["lost"]["h3"]) == [  # results.json: what h3 cost
        "s::links[h1,h3]", "s::links[h2,h3]", "s::node-ar[h3]", "s::node-later[h3]"], data["lost"]
    # nothing measured h3 (it was lost in the first check): untested, never cleared by `across`'s pass
    assert data["untested"] == ["h3"] and data["verdict"] == "ERROR" and ctl.returncode == Exit.ERROR
    html = (tmp_path / "out" / "latest" / "report.html").read_text()
    assert "lost mid-run, so this item measured 2 of the run&#39;s 3 nodes (h1, h2)" in html  # the note
    # `verify` judges every item again from the record, the one measured on the nodes left included
    verified = subprocess.run([sys.executable, "-m", "clustercheck", "verify", "--key", str(pub),
                               str(tmp_path / "out" / "latest")], capture_output=True, text=True)
    assert verified.returncode == Exit.ERROR and "verified: " in verified.stdout, verified.stdout + verified.stderr
    assert "reports: results.json, sla.json, junit.xml, ctrf.json, report.html are what run.jsonl renders to" \
        in verified.stdout  # the exit status is the run's verdict, ERROR
    assert "Traceback" not in out


TOO_FEW = all_reduce_suite("node-ar:node", "links:pair", "across:cluster:min_nodes=2")


def test_a_check_the_nodes_left_are_too_few_for_is_an_error_naming_the_lost_node(tmp_path: Path) -> None:
    """h2 of two nodes is lost in node-ar: the pair check and `across` (min_nodes: 2) would have run on the
    run's two nodes, so each is an error naming h2 lost (unreachable), never skipped as "needs 2 nodes";
    node-ar[h1] keeps its verdict. Failed before the fix: both were errors of a pool that could not start
    (naming h2 for their every item alike: "starting the ranks")."""
    project(tmp_path, TOO_FEW)
    ctl = run(tmp_path, "--cc-inject-fault=node-ar:delay")
    out = kill_mid_run(ctl, tmp_path / "out" / "latest" / "run.jsonl", lambda: agent_pid("h2", ctl.pid),
                       after='"type": "pool"')
    data = results(tmp_path)
    outcome = {r["name"]: r for r in data["results"]}
    assert outcome["node-ar[h1]"]["outcome"] == "passed", outcome["node-ar[h1]"]["message"] or out[-3000:]
    for name, why in (("links[h1,h2]", "scope pair needs two nodes or more"), ("across", "across needs 2 nodes")):
        item = outcome[name]
        assert item["outcome"] == "error" and item["unreachable"] == ["h2"], (name, item)
        assert item["message"].startswith(f"not run: {name.partition('[')[0]} cannot run on the 1 node(s) left (")
        assert why in item["message"] and "h2 was lost during node-ar (" in item["message"], item["message"]
    assert (tmp_path / "out" / "latest" / "exclude.txt").read_text().split() == ["h2"]
    assert data["verdict"] == "ERROR" and ctl.returncode == Exit.ERROR
    assert "Traceback" not in out


PAIRS = all_reduce_suite("links:pair")


def test_a_node_lost_in_a_pair_checks_first_round_leaves_its_later_pairs_errors_and_the_others_measured(
        tmp_path: Path) -> None:
    """Three hosts make three rounds of one pair each: h2,h3, then h1,h3, then h1,h2. h3's agent is killed
    while the first round's ranks wait (a test-only delay): links[h2,h3] errors naming h3 unreachable, the
    second round's links[h1,h3] is not measured ("h3 was lost during links"), and the third runs on a fresh
    pool on h1 and h2 and passes. Failed before the fix: the later rounds could start no pool, and both
    were errors, links[h1,h2] included."""
    project(tmp_path, PAIRS)
    ctl = run(tmp_path, "--cc-inject-fault=links:delay", hosts="h[1-3]")
    out = kill_mid_run(ctl, tmp_path / "out" / "latest" / "run.jsonl", lambda: agent_pid("h3", ctl.pid),
                       after='"type": "pool"')
    data = results(tmp_path)
    outcome = {r["name"]: r for r in data["results"]}
    assert outcome["links[h1,h2]"]["outcome"] == "passed", outcome["links[h1,h2]"]["message"] or out[-3000:]
    first = outcome["links[h2,h3]"]
    assert first["outcome"] == "error" and first["unreachable"] == ["h3"], first
    assert "was lost with its node's agent (h3), which exited with -9" in first["message"]
    later = outcome["links[h1,h3]"]
    assert later["outcome"] == "error" and later["unreachable"] == ["h3"], later
    assert later["message"].startswith("not measured: h3 was lost during links (its node's agent (h3)")
    assert (tmp_path / "out" / "latest" / "exclude.txt").read_text().split() == ["h3"]
    assert data["verdict"] == "ERROR" and ctl.returncode == Exit.ERROR
    assert "Traceback" not in out
