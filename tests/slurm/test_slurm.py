"""clustercheck on a real Slurm cluster (3 nodes x 2 ranks, all on this machine): cluster, node and
pair scopes, the exclusion list, draining and resuming; and the hosts launcher."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from cluster_fixture import slurm  # noqa: F401  (a fixture; tests/conftest.py keeps the name conftest)

pytestmark = [pytest.mark.pool, pytest.mark.slurm]

SUITE = """checks:
  - id: ar-cluster
    measure: all_reduce
    scope: cluster
    params: {sizes: [1KiB, 64KiB], iters: 3, warmup: 1}
  - id: ar-node
    measure: all_reduce
    scope: node
    params: {sizes: [1KiB, 64KiB], iters: 3, warmup: 1}
  - id: ar-pair
    measure: all_reduce
    scope: pair
    params: {sizes: [1KiB, 64KiB], iters: 3, warmup: 1}
  - id: nccl-env
    measure: probe
    params: {probe: env}
"""
LIMITS = """platform: cpu
detect: {gpu_count: 0}
checks:
  ar-cluster: {busbw: {limit: '>= 0.000001', unit: GB/s}}
  ar-node: {busbw: {limit: '>= 0.000001', unit: GB/s}}
  ar-pair: {busbw: {limit: '>= 0.000001', unit: GB/s}}
"""


@pytest.fixture
def work(tmp_path: Path) -> Path:
    (tmp_path / "th").mkdir()
    (tmp_path / "th" / "cpu.yaml").write_text(LIMITS)
    (tmp_path / "s.yaml").write_text(SUITE)
    return tmp_path


def run(env: dict[str, str], cwd: Path, *args: str, nodes: int = 3) -> subprocess.CompletedProcess[str]:
    cmd = ["salloc", f"-N{nodes}", sys.executable, "-m", "clustercheck", "run", "s.yaml", "--thresholds", "th",
           "--out", "out", "--launcher", "slurm", *args]
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def results(cwd: Path) -> dict:
    return json.loads((cwd / "out" / "latest" / "results.json").read_text())


def node_env(env: dict[str, str], node: str, text: str) -> Path:
    path = Path(env["CC_SLURM_HOME"]) / "node-env" / node
    path.write_text(text)
    return path


def drained(env: dict[str, str]) -> dict[str, str]:
    """Nodes set to drain, with the reason: drained ("drain") or still draining ("drng": the allocation salloc
    just left may still be completing when the run has drained its node)."""
    out = subprocess.run(["sinfo", "-h", "-N", "-o", "%N|%t|%E"], env=env, capture_output=True, text=True).stdout
    return {n: reason for n, state, reason in (line.split("|") for line in out.splitlines())
            if state.startswith(("drain", "drng"))}


def test_cluster_node_and_pair_scopes_have_their_own_testcases(slurm: dict, work: Path) -> None:
    res = run(slurm, work)
    assert res.returncode == 0, res.stdout + res.stderr
    names = [c.get("name") for c in ET.parse(work / "out" / "latest" / "junit.xml").getroot().iter("testcase")]
    assert names == ["ar-cluster", "ar-node[ccnode1]", "ar-node[ccnode2]", "ar-node[ccnode3]",
                     "ar-pair[ccnode2,ccnode3]", "ar-pair[ccnode1,ccnode3]", "ar-pair[ccnode1,ccnode2]",
                     "nccl-env[ccnode1]", "nccl-env[ccnode2]", "nccl-env[ccnode3]"]
    data = results(work)
    assert data["run"]["launcher"] == "slurm" and data["run"]["ranks"] == 6 and data["run"]["nodes"] == [
        "ccnode1", "ccnode2", "ccnode3"]
    by_name = {r["name"]: r for r in data["results"]}
    cluster_ranks = {r["host"] for r in by_name["ar-cluster"]["pool"]["ranks"]}
    assert cluster_ranks == {"ccnode1", "ccnode2", "ccnode3"}
    assert all(r["metrics"]["wrong"]["value"] == 0 for r in data["results"] if r["measure"] == "all_reduce")
    assert by_name["ar-pair[ccnode1,ccnode2]"]["pool"]["rounds"] == 3
    assert (work / "out" / "latest" / "exclude.txt").read_text() == ""


def test_node_scope_runs_the_nodes_at_the_same_time(slurm: dict, work: Path) -> None:
    """Each node's measurement waits 2 s without using CPU (a test-only delay), so this 2-core machine's
    CPU does not decide the answer: three nodes at once take about as long as one."""
    (work / "s.yaml").write_text("checks:\n  - id: nccl-env\n    measure: probe\n    params: {probe: env}\n")
    seconds = {}
    for nodes in (1, 3):
        res = run(slurm, work, "--cc-inject-fault", "nccl-env:delay", nodes=nodes)
        assert res.returncode == 0, res.stdout + res.stderr
        seconds[nodes] = results(work)["results"][0]["pool"]["measure_seconds"]
    assert 2.0 <= seconds[1] and seconds[3] < 1.5 * seconds[1], seconds


def test_failing_node_is_excluded_drained_and_resumed(slurm: dict, work: Path) -> None:
    bad = node_env(slurm, "ccnode2", "NCCL_P2P_DISABLE=1\n")  # a node-specific misconfiguration
    try:
        res = run(slurm, work, "--drain-dry-run")
        assert res.returncode == 1
        assert (work / "out" / "latest" / "exclude.txt").read_text() == "ccnode2\n"
        command = ["scontrol", "update", "NodeName=ccnode2", "State=DRAIN",
                   "Reason=clustercheck: nccl-env NCCL_P2P_DISABLE NCCL environment 1"]
        assert f"drain would run: {shlex.join(command)}" in res.stdout
        assert drained(slurm) == {}
        res = run(slurm, work, "--drain")
        assert f"drain done: {shlex.join(command)}" in res.stdout
        assert drained(slurm) == {"ccnode2": "clustercheck: nccl-env NCCL_P2P_DISABLE NCCL environment 1"}
    except BaseException:  # a drained node would leave every later test waiting on salloc
        subprocess.run(["scontrol", "update", "NodeName=ccnode2", "State=RESUME"], env=slurm)
        raise
    finally:
        bad.unlink()
    subprocess.run(["scontrol", "update", "NodeName=ccnode3", "State=DRAIN", "Reason=bad fan"], env=slurm, check=True)
    try:
        out = subprocess.run([sys.executable, "-m", "clustercheck", "resume"], env=slurm, capture_output=True,
                             text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        assert "resumed ccnode2" in out.stdout and "left alone ccnode3: drained for 'bad fan'" in out.stdout
        assert drained(slurm) == {"ccnode3": "bad fan"}
    finally:
        subprocess.run(["scontrol", "update", "NodeName=ccnode2,ccnode3", "State=RESUME"], env=slurm)


def test_killed_rank_errors_its_node_only_names_it_and_excludes_no_node(slurm: dict, work: Path) -> None:
    res = run(slurm, work, "-k", "ar-node", "--cc-inject-fault", "ar-node:crash@4")  # rank 4 is on ccnode3
    assert res.returncode == 3  # a harness error and no failure (clustercheck.exitcodes)
    found = {r["name"]: r for r in results(work)["results"]}
    assert {n: r["outcome"] for n, r in found.items()} == {
        "ar-node[ccnode1]": "passed", "ar-node[ccnode2]": "passed", "ar-node[ccnode3]": "error"}
    # the killed rank is named first (its agent reported how it ended), not its peer rank 5, which only saw
    # the connection drop and then lost a peer; ccnode1 and ccnode2 answered and keep their verdicts
    message = found["ar-node[ccnode3]"]["message"]
    assert message.startswith("rank 4 (ccnode3) was killed by SIGKILL during all_reduce; rank 5 (ccnode3) then "
                              "lost a peer: "), message
    assert (work / "out" / "latest" / "exclude.txt").read_text() == ""
    assert "exclude: none" in res.stdout


def test_the_switch_tree_comes_from_the_running_slurm(slurm: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    """cluster.sh's topology.conf (ccnode1-2 under ccleaf1, ccnode3 under ccleaf2, both under ccspine),
    read back through `scontrol show topology` as --topology slurm does."""
    from clustercheck.localize.topology import slurm_topology

    monkeypatch.setenv("SLURM_CONF", slurm["SLURM_CONF"])
    topo = slurm_topology()
    assert dict(topo.leaf_of) == {"ccnode1": "ccleaf1", "ccnode2": "ccleaf1", "ccnode3": "ccleaf2"}, \
        "a test cluster started before cluster.sh set TopologyPlugin: restart it"
    assert dict(topo.parent_of) == {"ccleaf1": "ccspine", "ccleaf2": "ccspine"}


def test_scope_localize_under_slurm_reads_the_tree_from_scontrol(slurm: dict, work: Path) -> None:
    (work / "s.yaml").write_text("""checks:
  - id: fabric
    measure: all_reduce
    scope: localize
    params: {sizes: [64KiB], iters: 2, warmup: 1, check_iters: 1, placements: [in]}
""")
    (work / "th" / "cpu.yaml").write_text(LIMITS.replace("ar-cluster:", "fabric:"))
    res = run(slurm, work, "--topology", "slurm")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    found = {r["name"]: r for r in results(work)["results"]}
    assert {n: r["outcome"] for n, r in found.items()} == {
        "fabric": "passed", "fabric[ccnode1]": "passed", "fabric[ccnode2]": "passed", "fabric[ccnode3]": "passed"}
    assert "scontrol show topology (2 leaf switch(es))" in json.dumps(found["fabric"])


def test_hosts_launcher_runs_the_suite_with_a_template_and_no_ssh(work: Path) -> None:
    cmd = [sys.executable, "-m", "clustercheck", "run", "s.yaml", "--thresholds", "th", "--out", "out",
           "--launcher", "hosts", "--hosts", "h[1-3]", "--host-command", "env CC_HOST={host} {python}"]
    res = subprocess.run(cmd, cwd=work, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout + res.stderr
    names = [r["name"] for r in results(work)["results"]]
    assert "ar-node[h2]" in names and "ar-pair[h1,h3]" in names and "nccl-env[h3]" in names
    assert {r["host"] for r in results(work)["results"][0]["pool"]["ranks"]} == {"h1", "h2", "h3"}



def test_one_step_of_node_agents_forks_every_pool_and_the_task_prolog_reaches_the_ranks(slurm: dict, work: Path) -> None:
    """--launcher slurm starts one srun step of node agents, one per node; every pool's ranks are forked
    from the agents' zygotes (none imports torch), each node's ranks run where Slurm put its agent, and
    the site's task environment (cluster.sh's TaskProlog) reaches the ranks through it."""
    (work / "s.yaml").write_text(SUITE + """  - id: ar-env
    measure: all_reduce
    scope: cluster
    env: {NCCL_DEBUG: WARN}
    params: {sizes: [1KiB], iters: 3, warmup: 1}
""")  # a pool of its own (another environment), forked from the same zygotes: NCCL reads it after the fork
    (work / "th" / "cpu.yaml").write_text(LIMITS + "  ar-env: {busbw: {limit: '>= 0.000001', unit: GB/s}}\n")
    bad = node_env(slurm, "ccnode2", "NCCL_P2P_DISABLE=1\n")
    try:
        res = run(slurm, work)
    finally:
        bad.unlink()
    assert res.returncode == 1, res.stdout[-3000:] + res.stderr[-3000:]
    data = results(work)
    assert data["run"]["launcher"] == "slurm" and data["run"]["nodes"] == ["ccnode1", "ccnode2", "ccnode3"]
    outcome = {r["name"]: r["outcome"] for r in data["results"]}
    assert {n: o for n, o in outcome.items() if o != "passed"} == {"nccl-env[ccnode2]": "failed"}, outcome
    assert (work / "out" / "latest" / "exclude.txt").read_text() == "ccnode2\n"
    record = (work / "out" / "latest" / "run.jsonl").read_text().splitlines()
    pools = [json.loads(line) for line in record if '"type": "pool"' in line]
    assert len(pools) >= 2 and {r["host"] for r in pools[0]["ranks"]} == {"ccnode1", "ccnode2", "ccnode3"}
    assert all("zygote_wait" in r["startup"] for p in pools for r in p["ranks"]), pools  # forked, every pool


def test_a_node_whose_agent_cannot_start_is_absent_with_sruns_words_and_the_run_incomplete(
        slurm: dict, work: Path) -> None:
    """ccnode3's task environment breaks Python itself (PYTHONHOME names nothing): srun reports the task,
    and the node is absent, named with srun's words, at once rather than after the agents' wait.
    By a race (seen on a loaded 2-core machine), srun's I/O with ccnode3's slurmstepd fails as its agent
    dies, and srun aborts the whole step, every agent with it (Slurm's step_launch_notify_io_failure,
    whatever --kill-on-bad-exit says): then the run is never a pass either, and names ccnode3 as the cause
    (tests/test_slurm_io_abort.py reads the words srun printed)."""
    bad = node_env(slurm, "ccnode3", "PYTHONHOME=/nonexistent\n")
    try:
        res = run(slurm, work, "-k", "ar-node")
    finally:
        bad.unlink()
    out = res.stdout + res.stderr
    assert "Traceback" not in out and "ccnode3: its agent ended before joining (srun: Exited with exit code 1)" in \
        out, out[-3000:]  # (the run's line of the absent node, or of no agent joined)
    if "srun aborted the whole step after an I/O error with ccnode3's slurmstepd" in out:  # the race
        # no agent joined (exit 3, a harness error), or some had and the step's end stopped the run (exit 2)
        assert res.returncode in (2, 3), out[-3000:]
        assert "check that srun can start a step" not in out, out[-3000:]
        return
    assert res.returncode == 2, out[-3000:]  # INCOMPLETE
    data = results(work)
    why = data["run"]["absent"]["ccnode3"]
    assert why.startswith("its agent ended before joining (srun: Exited with exit code 1)"), why
    assert data["untested"] == ["ccnode3"]
    assert {r["name"]: r["outcome"] for r in data["results"]} == {"ar-node[ccnode1]": "passed",
                                                                  "ar-node[ccnode2]": "passed"}


def _agent_on(node: str) -> int:
    """The pid of the `clustercheck agent --slurm` process srun started on `node` (its environment says)."""
    for proc in Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
            environ = (proc / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"agent" in argv and b"--slurm" in argv and f"SLURMD_NODENAME={node}".encode() in environ:
            return int(proc.name)
    raise AssertionError(f"no agent on {node}")


def test_a_node_whose_agent_is_killed_mid_run_is_named_unreachable_at_once(slurm: dict, work: Path) -> None:
    """ccnode3's agent is SIGKILLed while every rank waits 2 s before the node check (a test-only delay).
    srun reports the task at once: ccnode3's item errors naming its agent and srun's words, ccnode3 is
    excluded as unreachable, and the other nodes keep their verdicts."""
    from joining import kill_mid_run

    cmd = ["salloc", "-N3", sys.executable, "-m", "clustercheck", "run", "s.yaml", "--thresholds", "th", "--out", "out",
           "--launcher", "slurm", "-k", "ar-node", "--cc-inject-fault=ar-node:delay"]
    ctl = subprocess.Popen(cmd, cwd=work, env=slurm, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out = kill_mid_run(ctl, work / "out" / "latest" / "run.jsonl", lambda: _agent_on("ccnode3"), '"type": "pool"')
    found = {r["name"]: r for r in results(work)["results"]}
    lost = found["ar-node[ccnode3]"]
    assert lost["outcome"] == "error" and "was lost with its node's agent (ccnode3), which ended (srun: Killed)" in \
        lost["message"], lost["message"]
    assert lost["unreachable"] == ["ccnode3"] and (work / "out" / "latest" / "exclude.txt").read_text() == "ccnode3\n"
    assert {n: r["outcome"] for n, r in found.items() if n != "ar-node[ccnode3]"} == {
        "ar-node[ccnode1]": "passed", "ar-node[ccnode2]": "passed"}
    assert ctl.returncode == 3 and "Traceback" not in out, out[-3000:]


def test_a_step_srun_cannot_create_is_refused_at_once_with_sruns_words(slurm: dict, work: Path) -> None:
    """The agents' step asks for 3 nodes of a 2-node allocation (SLURM_JOB_NODELIST names 3). With the planned
    hosts given to srun (--nodelist) srun refuses the step at once, and the controller refuses in one line
    (exit 4), well before --join-timeout, quoting srun and without the loopback advice meant for agents that
    ran and could not reach it. (Without --nodelist srun waited, retrying, for the nodes it could not have:
    tests/test_slurm_agents.py reads the words it printed then.)"""
    cmd = ["salloc", "-N2", "env", "SLURM_JOB_NODELIST=ccnode[1-3]", sys.executable, "-m", "clustercheck", "run",
           "s.yaml", "--thresholds", "th", "--out", "out", "--launcher", "slurm", "-k", "ar-node",
           "--join-timeout", "60"]
    res = subprocess.run(cmd, cwd=work, env=slurm, capture_output=True, text=True, timeout=120)
    assert res.returncode == 4, res.stdout[-2000:] + res.stderr[-2000:]
    assert "node agent(s) joined after" not in res.stderr, res.stderr  # no wait
    (error,) = [line for line in res.stderr.splitlines() if line.startswith("ERROR:")]
    assert error.startswith("ERROR: no host's agent joined (ccnode1: the agents' srun step ended with 1 before its "
                            "agent joined: srun: error: Unable to create step for job "), error
    assert "no task of the agents' srun step printed a line, so no agent ran" in error
    assert "--store-addr" not in error and "Traceback" not in res.stderr
    left = subprocess.run(["pgrep", "-f", "srun --nodes=3 --ntasks=3"], capture_output=True, text=True).stdout
    assert left == "", left  # the step's srun ended with the run
