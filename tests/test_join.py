"""--launcher join and `clustercheck agent`, for real on this machine: a controller and node agents as plain
processes carrying the Indexed Job environment (JOB_COMPLETION_INDEX, NODE_NAME, CLUSTERCHECK_CONTROLLER),
real rank pools (gloo) started by the agents, the c10d store between them. tests/test_join_netns.py runs
the same across network namespaces, one per pod."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest

from clustercheck.exitcodes import Exit

sys.path.insert(0, str(Path(__file__).resolve().parent))
from joining import agent, alive, await_warm, controller, finish, free_port, parent, project, results, token, wait_for  # noqa: E402


@pytest.mark.pool
def test_the_acceptance_command_passes_with_both_nodes_and_measures_across_them(tmp_path: Path) -> None:
    """The issue's command, word for word, with one rank per node: cpu-smoke's node-scoped all_reduce checks
    have nothing to move on a node of one rank and say so (skipped, per node), and its cluster check measures
    all_reduce across both nodes and passes. So the run passes on a judged measurement, never on skips."""
    port, secret = free_port(), token()
    ctl = controller(tmp_path, secret, ["cpu-smoke", "--launcher", "join", "--nodes", "2", "--store-addr",
                                        f"127.0.0.1:{port}"])
    agents = [agent(tmp_path, secret, i, f"pod{i}", f"127.0.0.1:{port}", "--local-ranks", "1") for i in (0, 1)]
    out = finish(ctl, agents)
    data = results(tmp_path)
    assert ctl.returncode == Exit.PASSED and data["verdict"] == "PASS", out[-3000:]
    per_node = [r for r in data["results"] if r["scope"] == "node"]
    assert {r["node"] for r in per_node} == {"pod0", "pod1"} and len(per_node) == 6
    assert {r["outcome"] for r in per_node} == {"skipped"} and "single rank" in per_node[0]["message"]
    (across,) = [r for r in data["results"] if r["scope"] == "cluster"]
    assert across["outcome"] == "passed" and across["nodes"] == ["pod0", "pod1"]
    assert {v["metric"]: v["passed"] for v in across["verdicts"]} == {"busbw": True, "wrong": True}
    assert data["run"]["ranks_per_node"] == 1 and data["counts"]["passed"] == 1
    assert [a.returncode for a in agents] == [0, 0]  # the controller said goodbye


@pytest.mark.pool
def test_two_agents_with_two_ranks_each_pass_cpu_smoke(tmp_path: Path) -> None:
    port, secret = free_port(), token()
    ctl = controller(tmp_path, secret, ["cpu-smoke", "--launcher", "join", "--nodes", "2", "--store-addr",
                                        f"127.0.0.1:{port}"])
    agents = [agent(tmp_path, secret, i, f"pod{i}", f"127.0.0.1:{port}", "--local-ranks", "2") for i in (0, 1)]
    out = finish(ctl, agents)
    data = results(tmp_path)
    assert ctl.returncode == Exit.PASSED and data["verdict"] == "PASS", out[-3000:]
    assert {r["node"] for r in data["results"]} == {"pod0", "pod1", None} and len(data["results"]) == 7
    assert {r["outcome"] for r in data["results"]} == {"passed"}
    ranks = data["results"][0]["pool"]["ranks"]
    assert [(r["host"], r["local_rank"]) for r in ranks] == [("pod0", 0), ("pod0", 1), ("pod1", 0), ("pod1", 1)]
    log = (tmp_path / "out" / "latest" / "logs")
    assert sorted(p.name for p in log.glob("pool1-rank*.log")) == [f"pool1-rank{r}.log" for r in range(4)]
    assert [a.returncode for a in agents] == [0, 0]


@pytest.mark.pool
def test_an_agent_that_never_joins_leaves_its_node_untested_and_the_run_incomplete(tmp_path: Path) -> None:
    """Three nodes expected: index 0 joins, index 1 has another secret (it says so and is refused), index 2
    never starts. The run measures node 0, and says INCOMPLETE, naming both others and why."""
    project(tmp_path)
    port, secret = free_port(), token()
    agents = [agent(tmp_path, secret, 0, "pod0", f"127.0.0.1:{port}", "--local-ranks", "2"),
              agent(tmp_path, token(), 1, "pod1", f"127.0.0.1:{port}", "--local-ranks", "2")]
    # started and warm (torch imported) before the controller: agent 0 joins, and agent 1 is refused, within a
    # second of its waiting, so the 6 s --join-timeout is what index 2's absence costs
    await_warm(tmp_path, agents)
    ctl = controller(tmp_path, secret, ["s.yaml", "--thresholds", "th", "--launcher", "join", "--nodes", "3",
                                        "--store-addr", f"127.0.0.1:{port}", "--join-timeout", "6"])
    out = finish(ctl, agents)
    data = results(tmp_path)
    assert ctl.returncode == Exit.INCOMPLETE and data["verdict"] == "INCOMPLETE", out[-3000:]
    assert data["incomplete"]["reason"] == "2 node(s) never joined: index-1, index-2"
    assert sorted(data["untested"]) == ["index-1", "index-2"]
    absent = data["run"]["absent"]
    assert "CLUSTERCHECK_TOKEN differs" in absent["index-1"] and "JOB_COMPLETION_INDEX=2" in absent["index-2"]
    assert {r["node"] for r in data["results"] if r["scope"] == "node"} == {"pod0"}
    assert {r["outcome"] for r in data["results"]} == {"passed"}
    assert "INCOMPLETE: 2 node(s) never joined: index-1, index-2; 4 of 7 planned item(s) not run" in out
    assert "untested: index-[1-2]" in out
    # every report says so, JUnit too: the absent nodes' items are error testcases that never ran
    assert sorted(data["incomplete"]["items"]) == [f"s::{c}[index-{i}]" for c in ("node-ar", "node-late") for i in (1, 2)]
    junit = (tmp_path / "out" / "latest" / "junit.xml").read_text()
    assert junit.count('type="incomplete"') == 5 and "not run: index-1 never joined (index-1: " in junit
    assert data["incomplete"]["never_joined"] == {f"index-{i}": [f"s::{c}[index-{i}]" for c in ("node-ar", "node-late")]
                                                  for i in (1, 2)}
    assert "INCOMPLETE: 2 node(s) never joined" in junit and junit.count('type="untested"') == 2  # the run, each node
    bad = (tmp_path / "agent1.log").read_text()
    assert agents[1].returncode == Exit.BAD_INPUT and "hello failed verification" in bad and "Traceback" not in bad


@pytest.mark.pool
def test_an_agent_that_dies_mid_run_errors_its_node_and_the_other_keeps_its_verdicts(tmp_path: Path) -> None:
    """Agent 1 is killed (SIGKILL) once the first result is written, while every rank waits 2 s before
    the node check (a test-only delay): its ranks go with it (PR_SET_PDEATHSIG), the controller hears no
    heartbeat for 10 s, and only node 1's item errors, naming its agent."""
    project(tmp_path)
    port, secret = free_port(), token()
    ctl = controller(tmp_path, secret, ["s.yaml", "--thresholds", "th", "--launcher", "join", "--nodes", "2",
                                        "--store-addr", f"127.0.0.1:{port}", "-k", "not node-late",
                                        "--cc-inject-fault=node-ar:delay"])
    agents = [agent(tmp_path, secret, i, f"pod{i}", f"127.0.0.1:{port}", "--local-ranks", "2") for i in (0, 1)]
    record = tmp_path / "out" / "latest" / "run.jsonl"
    try:
        wait_for(record, '"type": "result"', 180)
    finally:
        agents[1].kill()
    out = finish(ctl, agents)
    data = results(tmp_path)
    outcome = {r["name"]: r for r in data["results"]}
    assert outcome["cluster-ar"]["outcome"] == "passed", out[-3000:]
    assert outcome["node-ar[pod0]"]["outcome"] == "passed", out[-3000:]
    died = outcome["node-ar[pod1]"]
    assert died["outcome"] == "error" and "(pod1) was lost with its node's agent (pod1), silent for 10 s" in \
        died["message"], died["message"]
    assert "pod0" not in died["message"].splitlines()[0]
    assert died["unreachable"] == ["pod1"]  # a node whose agent went silent is unreachable or dead: excluded
    assert (tmp_path / "out" / "latest" / "exclude.txt").read_text().split() == ["pod1"]
    assert ctl.returncode == Exit.ERROR and data["verdict"] == "ERROR"
    assert agents[0].returncode == 0


@pytest.mark.pool
def test_agents_whose_controller_is_gone_exit_and_their_ranks_with_them(tmp_path: Path) -> None:
    """The controller is killed (SIGKILL: no goodbye) while the ranks wait in a check: each agent says the
    controller is gone, stops its ranks and exits 3; no rank process is left to hold a GPU. Before that:
    each agent forks its zygote from itself before it has joined, and the ranks are forked from that;
    the zygote goes with the agent."""
    project(tmp_path)
    port, secret = free_port(), token()
    agents = [agent(tmp_path, secret, i, f"pod{i}", f"127.0.0.1:{port}", "--local-ranks", "2") for i in (0, 1)]
    zygotes = [_zygote_of(a.pid) for a in agents]  # no controller yet
    # forked from the agent after its torch import, not started afresh: the agent's own command line
    assert all(b"\0agent\0" in Path(f"/proc/{z}/cmdline").read_bytes() for z in zygotes)
    ctl = controller(tmp_path, secret, ["s.yaml", "--thresholds", "th", "--launcher", "join", "--nodes", "2",
                                        "--store-addr", f"127.0.0.1:{port}", "--cc-inject-fault=node-ar:delay"])
    record = tmp_path / "out" / "latest" / "run.jsonl"
    wait_for(record, '"type": "result"', 180)
    pids = [r["pid"] for line in record.read_text().splitlines() if '"type": "pool"' in line
            for r in json.loads(line)["ranks"]]
    assert len(pids) == 4 and all(alive(p) for p in pids)
    assert sorted(parent(p) for p in pids) == sorted(zygotes * 2)
    ctl.kill()
    ctl.wait()
    for a in agents:
        a.wait(60)
    assert [a.returncode for a in agents] == [3, 3]
    for i in (0, 1):
        said = (tmp_path / f"agent{i}.log").read_text()
        assert "the controller is gone" in said, said
        stopped = re.search(r"stopped (\d) rank\(s\)(?:, (\d) had ended on their own)?", said)
        assert stopped and int(stopped[1]) + int(stopped[2] or 0) == 2, said  # a rank may leave first
    assert not [p for p in pids + zygotes if alive(p)]


def _zygote_of(agent_pid: int, timeout: float = 30) -> int:
    """The pid of the zygote an agent started, once it is there."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        for proc in Path("/proc").iterdir():
            try:
                if proc.name.isdigit() and parent(int(proc.name)) == agent_pid and \
                        (proc / "comm").read_text() == "cc-zygote\n":  # forked from the agent: its command line
                    return int(proc.name)
            except OSError:
                continue
        time.sleep(0.1)
    raise AssertionError(f"agent {agent_pid} started no zygote within {timeout} s")


@pytest.mark.pool
def test_two_agents_on_one_node_are_refused_before_anything_runs(tmp_path: Path) -> None:
    port, secret = free_port(), token()
    ctl = controller(tmp_path, secret, ["cpu-smoke", "--launcher", "join", "--nodes", "2", "--store-addr",
                                        f"127.0.0.1:{port}"])
    agents = [agent(tmp_path, secret, i, "same-node", f"127.0.0.1:{port}", "--local-ranks", "1") for i in (0, 1)]
    out = finish(ctl, agents, timeout=120)
    assert ctl.returncode == Exit.BAD_INPUT and "node agents 0 and 1 both run on node same-node" in out, out
    assert "Traceback" not in out and not (tmp_path / "out" / "latest").exists()
    assert [a.returncode for a in agents] == [0, 0]  # sent away, not left waiting


def test_a_binary_token_file_is_one_line_naming_it(tmp_path: Path) -> None:
    """`openssl rand 32 > token` writes bytes: one line naming the variable and the file, not a traceback."""
    from clustercheck.errors import UserError
    from clustercheck.run.gang import read_token

    path = tmp_path / "token"
    path.write_bytes(b"\xff\xfe\xfd" * 16)
    with pytest.raises(UserError, match=f"CLUSTERCHECK_TOKEN_FILE={path}: not UTF-8 text; .* openssl rand -hex 32"):
        read_token({"CLUSTERCHECK_TOKEN_FILE": str(path)})


@pytest.mark.parametrize("env, args, said", [
    ({"JOB_COMPLETION_INDEX": None}, [], "JOB_COMPLETION_INDEX is not set"),
    ({"JOB_COMPLETION_INDEX": "one"}, [], "JOB_COMPLETION_INDEX is 'one', not a number"),
    ({}, ["--index", "-1"], "--index is '-1'; it must be >= 0"),
    ({"JOB_COMPLETION_INDEX": "-2"}, [], "JOB_COMPLETION_INDEX is '-2'; it must be >= 0"),
    ({"CLUSTERCHECK_CONTROLLER": None}, [], "CLUSTERCHECK_CONTROLLER is not set"),
    ({"CLUSTERCHECK_CONTROLLER": "ctl"}, [], "CLUSTERCHECK_CONTROLLER 'ctl': expected HOST:PORT"),
    ({"CLUSTERCHECK_TOKEN": None}, [], "set CLUSTERCHECK_TOKEN"),
    ({"CLUSTERCHECK_TOKEN": "short"}, [], "the shared secret has 5 characters"),
    ({"CLUSTERCHECK_TOKEN_FILE": "/nonexistent/t", "CLUSTERCHECK_TOKEN": None}, [], "CLUSTERCHECK_TOKEN_FILE=/nonexistent/t"),
    ({}, ["--local-ranks", "0"], "--local-ranks must be between 1 and 1024"),
    ({"NODE_NAME": "a b"}, [], "node name 'a b' (NODE_NAME)"),
    ({}, ["--join-timeout", "nan"], "'nan': must be above 0 and at most 86400 seconds"),  # it waited for ever
    ({}, ["--join-timeout", "-5"], "'-5': must be above 0 and at most 86400 seconds"),
])
def test_an_agent_refuses_a_bad_identity_in_one_line(tmp_path: Path, env: dict[str, str | None], args: list[str],
                                                      said: str) -> None:
    e = {k: v for k, v in os.environ.items() if not k.startswith("CLUSTERCHECK_")}
    e.update(JOB_COMPLETION_INDEX="0", CLUSTERCHECK_CONTROLLER="127.0.0.1:1", CLUSTERCHECK_TOKEN=token())
    for k, v in env.items():
        if v is None:
            e.pop(k, None)
        else:
            e[k] = v
    res = subprocess.run([sys.executable, "-m", "clustercheck", "agent", *args], env=e, capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == Exit.BAD_INPUT, res.stderr
    (line,) = res.stderr.strip().splitlines()
    assert said in line and line.startswith(("clustercheck: error:", "clustercheck agent: error:")), line  # argparse's


def test_agent_help_states_its_own_exit_codes_once_and_no_table_without_70() -> None:
    """`agent --help` lists the agent's codes (70 among them); the shared table of the other subcommands,
    "(every subcommand, ...)", has no 70 and would contradict it."""
    res = subprocess.run([sys.executable, "-m", "clustercheck", "agent", "--help"], capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 0, res.stderr
    text = " ".join(res.stdout.split())
    assert text.count("exit codes") == 1 and "every subcommand" not in text
    assert "70 an internal error" in text and "3 the controller is gone" in text and "128+N" in text


@pytest.mark.parametrize("args, said", [
    (["--launcher", "join"], "--launcher join needs --nodes N"),
    (["--launcher", "join", "--nodes", "0"], "--nodes must be between 1 and 100000"),
    (["--launcher", "k8s", "--nodes", "-2"], "--nodes must be between 1 and 100000"),
    (["--nodes", "2"], "--nodes is for --launcher join or k8s"),
    (["--launcher", "join", "--nodes", "2", "--store-addr", "10.0.0.1:99999"], "expected HOST:PORT"),
    (["--launcher", "join", "--nodes", "2", "--join-timeout", "0"], "--join-timeout must be between"),
    (["--launcher", "k8s", "--nodes", "2", "--node-selector", "gpu"], "--node-selector 'gpu': expected KEY=VALUE"),
    (["--launcher", "k8s", "--nodes", "2", "--node-selector", "a/b/c=d"], "--node-selector 'a/b/c=d'"),
    (["--launcher", "k8s", "--nodes", "2", "--rdma", "ib=1"], "--rdma 'ib=1': expected RESOURCE=COUNT"),
    (["--launcher", "k8s", "--nodes", "2", "--namespace", "Bad_NS"], "--namespace 'Bad_NS'"),
    (["--launcher", "k8s", "--nodes", "2"], "--launcher k8s needs --image IMAGE"),
    (["--drain-max", "150%"], "--drain-max is a share of the run's nodes, at most 100%"),
    (["--drain-max", "lots"], "--drain-max: expected a fraction"),
])
def test_bad_node_agent_options_are_one_line_exit_4(tmp_path: Path, args: list[str], said: str) -> None:
    e = {k: v for k, v in os.environ.items() if not k.startswith("CLUSTERCHECK_")}
    e["CLUSTERCHECK_TOKEN"] = token()
    res = subprocess.run([sys.executable, "-m", "clustercheck", "run", "cpu-smoke", "--out", "out", *args], cwd=tmp_path,
                         env=e, capture_output=True, text=True, timeout=120)
    out = res.stdout + res.stderr
    assert res.returncode == Exit.BAD_INPUT and said in out, out[-2000:]
    assert "Traceback" not in out and not (tmp_path / "out").exists()


# each launcher option with a value it accepts: under a launcher that does not read it, it is refused
LAUNCHER_OPTIONS = {"hosts": "gpu[01-64]", "host_command": "foo {host} {python}", "store_addr": "10.0.0.1:29410",
                    "nodes": 2, "join_timeout": 30.0, "image": "reg/cc:1", "namespace": "ns", "gpus_per_node": 8,
                    "node_selector": ["a=b"], "rdma": ["rdma/ib=1"], "k8s_job": "cc", "force": True}
READ_BY = {"local": {"force"}, "slurm": {"store_addr", "join_timeout"},
           "hosts": {"hosts", "host_command", "store_addr", "join_timeout"},
           "join": {"nodes", "store_addr", "join_timeout", "k8s_job", "namespace"},
           "k8s": {"nodes", "store_addr", "join_timeout", "image", "namespace", "gpus_per_node", "node_selector", "rdma"}}


@pytest.mark.parametrize("launcher", sorted(READ_BY))
@pytest.mark.parametrize("name", sorted(LAUNCHER_OPTIONS))
def test_a_launcher_option_is_refused_by_a_launcher_that_does_not_read_it(launcher: str, name: str) -> None:
    """`--launcher local --hosts gpu[01-64]` measured this machine alone and passed; each launcher option
    is taken only by the launchers that read it, and refused by the others, naming those that do."""
    from clustercheck.errors import UserError
    from clustercheck.run.options import RUN_OPTIONS, resolve

    given = {"launcher": launcher, name: LAUNCHER_OPTIONS[name]}
    if launcher == "join" and name == "namespace":
        given["k8s_job"] = "cc"  # join reads --namespace as that of --k8s-job
    defaults = {o.name: o.kwargs()["default"] for o in RUN_OPTIONS}
    if name in READ_BY[launcher]:
        resolve(lambda key: given.get(key, defaults[key]))
        return
    with pytest.raises(UserError) as refused:
        resolve(lambda key: given.get(key, defaults[key]))
    flag = next(o.run_flag for o in RUN_OPTIONS if o.name == name)
    said = str(refused.value)
    if name == "store_addr":  # local: said as ever, since local ranks reach the store on loopback
        assert said.startswith("--store-addr is for the multi-node launchers"), said
    else:
        assert said.startswith(f"{flag} is for --launcher ") and f"--launcher {launcher} does not read it" in said, said
    assert all(other in said for other, reads in READ_BY.items() if name in reads), said


def test_namespace_under_join_needs_the_k8s_job_it_names() -> None:
    from clustercheck.errors import UserError
    from clustercheck.run.options import RUN_OPTIONS, resolve

    given = {"launcher": "join", "nodes": 2, "namespace": "ns"}
    defaults = {o.name: o.kwargs()["default"] for o in RUN_OPTIONS}
    with pytest.raises(UserError, match="--namespace under --launcher join is the namespace of --k8s-job"):
        resolve(lambda key: given.get(key, defaults[key]))


def test_multi_node_options_under_local_are_one_line_exit_4_before_collecting(tmp_path: Path) -> None:
    """The audit's command: --co exited 0, listing this machine's items as the run of 64 nodes."""
    res = subprocess.run([sys.executable, "-m", "clustercheck", "run", "cpu-smoke", "--co", "--hosts", "node[01-",
                          "--image", "x", "--namespace", "ns", "--gpus-per-node", "8"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    out = res.stdout + res.stderr
    assert res.returncode == Exit.BAD_INPUT, out
    assert "--hosts is for --launcher hosts; --launcher local does not read it" in out and "Traceback" not in out


def test_the_controller_without_a_shared_secret_is_one_line_exit_4(tmp_path: Path) -> None:
    e = {k: v for k, v in os.environ.items() if not k.startswith("CLUSTERCHECK_")}
    res = subprocess.run([sys.executable, "-m", "clustercheck", "run", "cpu-smoke", "--launcher", "join", "--nodes", "1"],
                         cwd=tmp_path, env=e, capture_output=True, text=True, timeout=120)
    assert res.returncode == Exit.BAD_INPUT and "set CLUSTERCHECK_TOKEN" in res.stdout + res.stderr


def test_commands_that_fail_verification_or_are_replayed_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    """An agent runs only what its controller sealed for it, numbered as posted: a command sealed with
    another key, or a genuine one posted again under another number, is refused and never run."""
    import socket

    import torch.distributed as dist

    from clustercheck.run import gang, wire
    from clustercheck.run.agent import Agent

    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    store = dist.TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=5),
                          master_listen_fd=listener.detach())
    a = Agent(gang.Identity(0, "pod0", ("127.0.0.1", port)), token(), 1, store=store, key="k" * 64)
    ran: list[str] = []
    a.kill = lambda pool: ran.append(f"kill {pool}")  # type: ignore[method-assign]
    genuine = wire.seal(a.key, {"op": "kill", "pool": 1, "seq": 2})
    for body in (wire.seal("x" * 64, {"op": "kill", "pool": 9, "seq": 1}), genuine, genuine):
        n = store.add(gang.cmd_seq(0), 1)
        store.set(gang.cmd_key(0, n), body)
    assert a._commands() is None
    said = capsys.readouterr().err
    assert ran == ["kill 1"]  # command 2 only: its own number sealed inside
    assert "refusing command 1: message on the store failed verification" in said
    assert "refusing command 3: it was sealed as command 2 (a replay)" in said


def test_the_circuit_breaker_trips_on_more_than_the_share_and_more_than_one_node() -> None:
    from clustercheck.record.exclude import breaker, excluded

    def results(failed: dict[str, list[str]], nodes: int) -> list[dict[str, object]]:
        out: list[dict[str, object]] = []
        for i in range(nodes):
            node = f"n{i}"
            for check, bad in failed.items():
                out.append({"check": check, "name": f"{check}[{node}]", "node": node, "nodes": [node], "scope": "node",
                            "outcome": "failed" if node in bad else "passed", "verdicts": []})
        return out

    three = results({"bw": ["n0", "n1", "n2"]}, 3)
    line = breaker(three, excluded(three), 3, 0.10)  # type: ignore[arg-type]
    assert line is not None and line.startswith("circuit breaker: 3 of 3 nodes (100%) failed bw, more than --drain-max "
                                                 "10% lets act on (1): drained and tainted nothing")
    one = results({"bw": ["n1"]}, 3)
    assert breaker(one, excluded(one), 3, 0.10) is None  # type: ignore[arg-type]  # one node may always be acted on
    spread = results({"a": ["n1"], "b": ["n2"], "c": ["n3"]}, 20)  # three nodes, three different checks
    assert breaker(spread, excluded(spread), 20, 0.10) is None  # type: ignore[arg-type]
    two, three_of_20 = results({"bw": ["n1", "n2"]}, 20), results({"bw": ["n1", "n2", "n3"]}, 20)
    assert breaker(two, excluded(two), 20, 0.10) is None  # type: ignore[arg-type]
    assert "3 of 20 nodes (15%) failed bw" in (breaker(three_of_20, excluded(three_of_20), 20, 0.10) or "")  # type: ignore[arg-type]
    assert breaker(three_of_20, excluded(three_of_20), 20, 0.20) is None  # type: ignore[arg-type]
    # ten of twelve agents lost at once (the controller's network, the Job deleted): errors, each node unreachable,
    # in two checks; they count together, and the breaker trips where it had drained all ten
    lost = [{"check": f"c{i % 2}", "name": f"c{i % 2}[n{i}]", "node": f"n{i}", "nodes": [f"n{i}"], "scope": "node",
             "outcome": "error" if i < 10 else "passed", "verdicts": [], "unreachable": [f"n{i}"] if i < 10 else []}
            for i in range(12)]
    assert len(excluded(lost)) == 10  # type: ignore[arg-type]
    assert (breaker(lost, excluded(lost), 12, 0.10) or "").startswith(  # type: ignore[arg-type]
        "circuit breaker: 10 of 12 nodes (83%) stopped answering, more than --drain-max 10% lets act on (1)")
    assert breaker(lost[:1], excluded(lost[:1]), 10, 0.10) is None  # type: ignore[arg-type]  # one lost node: acted on
    at_once = [{**r, "check": "c0", "name": f"c0[{r['node']}]"} for r in lost[:10]]
    assert excluded(at_once) == {}  # type: ignore[arg-type]  # every node silent in one check: none listed (_all_at_once)


@pytest.mark.pool
def test_the_breaker_stops_the_drain_and_leaves_verdicts_and_exclude_txt(tmp_path: Path) -> None:
    """Both nodes fail the same check (a floor no link meets): --drain-dry-run prints nothing to run, the
    breaker says why in one line, and the verdicts and exclude.txt are what they would have been."""
    project(tmp_path)
    (tmp_path / "th" / "cpu.yaml").write_text((tmp_path / "th" / "cpu.yaml").read_text()
                                              + "  node-ar:\n    busbw: {limit: '>= 1000000', unit: GB/s}\n")  # under LIMITS' checks:
    port, secret = free_port(), token()
    ctl = controller(tmp_path, secret, ["s.yaml", "--thresholds", "th", "--launcher", "join", "--nodes", "2",
                                        "--store-addr", f"127.0.0.1:{port}", "-k", "node-ar", "--drain-dry-run"])
    agents = [agent(tmp_path, secret, i, f"pod{i}", f"127.0.0.1:{port}", "--local-ranks", "2") for i in (0, 1)]
    out = finish(ctl, agents)
    assert ctl.returncode == Exit.FAILED, out[-3000:]
    (line,) = [ln for ln in out.splitlines() if "circuit breaker" in ln]
    assert "2 of 2 nodes (100%) failed node-ar" in line and "drained and tainted nothing" in line
    assert "drain would run" not in out
    assert (tmp_path / "out" / "latest" / "exclude.txt").read_text() == "pod[0-1]\n"
    record = [json.loads(ln) for ln in (tmp_path / "out" / "latest" / "run.jsonl").read_text().splitlines()]
    (ex,) = [e for e in record if e["type"] == "exclude"]
    assert ex["drain"] == [] and ex["breaker"] == line.strip() and set(ex["reasons"]) == {"pod0", "pod1"}


def test_a_rank_on_a_silent_agent_is_taken_as_gone(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The stand-in for a remote rank: an agent that sent no heartbeat for SILENCE seconds takes its ranks
    with it (exit status and story), without waiting for an answer that cannot come."""
    from clustercheck.run import gang, join, remote

    monkeypatch.setattr(gang, "SILENCE", 0.3)
    launcher = join.JoinLauncher(1, f"127.0.0.1:{free_port()}", 5, token(), gather=False)
    launcher.open()
    try:
        member = gang.Member(0, "pod0", "k" * 64, None, "pod0", 1)
        launcher.members[0], launcher.nodes = member, ("pod0",)
        launcher._beats[0] = (0, time.monotonic())
        pool = remote.RemotePool(launcher, 1, [member], [tmp_path / "rank0.log"])
        (rank,) = pool.ranks
        assert rank.poll() is None
        code = rank.wait(5)
        assert code == -9 and rank.ended == "was lost with its node's agent (pod0), silent for 0.3 s,"
        assert "its ranks are taken as gone" in (tmp_path / "rank0.log").read_text()
    finally:
        launcher.close()


def test_a_forged_agent_heartbeat_does_not_keep_a_silent_agent_present(monkeypatch: pytest.MonkeyPatch) -> None:
    """An agent's beat counts only sealed with its key, for its index, and counting up: a value written by
    anything else that reaches the store's port (unsealed, sealed for another agent, or an old beat again)
    leaves the agent silent, and it is taken as gone after SILENCE seconds; a real beat keeps it present."""
    from clustercheck.run import gang, join, wire

    monkeypatch.setattr(gang, "SILENCE", 0.3)
    launcher = join.JoinLauncher(2, f"127.0.0.1:{free_port()}", 5, token(), gather=False)
    launcher.open()
    try:
        keys = [wire.new_key(), wire.new_key()]
        for i in (0, 1):
            launcher.members[i] = gang.Member(i, f"pod{i}", keys[i], None, f"pod{i}", 1)
            launcher._beats[i] = (0, time.monotonic())
        assert launcher.store is not None
        launcher.store.set(gang.beat_key(0), wire.seal(keys[0], {"index": 0, "beat": 1}))  # pod0 beats
        launcher.store.set(gang.beat_key(1), wire.seal(keys[0], {"index": 1, "beat": 1}))  # pod0's key: forged
        launcher._next_beat = 0.0
        assert launcher.silent() == {}
        time.sleep(0.5)
        launcher.store.set(gang.beat_key(0), wire.seal(keys[0], {"index": 0, "beat": 2}))
        launcher.store.set(gang.beat_key(1), "7")  # unsealed, as counters were before
        launcher._next_beat = 0.0
        assert launcher.silent() == {1: "its node's agent (pod1), silent for 0.3 s"}
        time.sleep(0.5)
        launcher.store.set(gang.beat_key(0), wire.seal(keys[0], {"index": 0, "beat": 1}))  # an old beat replayed
        launcher._next_beat = 0.0
        assert set(launcher.silent()) == {0, 1}
    finally:
        launcher.close()


def test_over_says_the_same_at_every_look_once_every_agent_still_in_the_run_went_silent(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """over() is asked after a check by nodefacts or the session, then again by the plugin: once it said the
    plane is gone it says so at every look (a second look that read None let a stopped run exit 3). An agent
    silent at the look before (after an earlier check) is its own loss, not part of a loss at once."""
    from clustercheck.run import gang, join

    monkeypatch.setattr(gang, "SILENCE", 0.3)
    launcher = join.JoinLauncher(3, f"127.0.0.1:{free_port()}", 5, token(), gather=False)
    launcher.open()
    try:
        for i in (0, 1, 2):
            launcher.members[i] = gang.Member(i, f"pod{i}", "k" * 64, None, f"pod{i}", 1)
            launcher._beats[i] = (0, time.monotonic())
        launcher._next_beat = 0.0
        assert launcher.over() is None  # all three beat within SILENCE
        launcher._silent[0] = "its node's agent (pod0), silent for 0.3 s"  # lost in a check: its own loss
        assert launcher.over() is None
        launcher._silent[1] = "its node's agent (pod1), silent for 0.3 s"  # pod1 and pod2 in the next check
        launcher._silent[2] = "its node's agent (pod2), silent for 0.3 s"
        first = launcher.over()
        assert first is not None and "every node agent still in the run (2) stopped answering at once" in first.said()
        assert "pod0" not in first.said()  # lost before: not part of the loss at once
        assert launcher.over() is first and launcher.over(settle=True) is first
    finally:
        launcher.close()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_while_the_agents_are_awaited_is_incomplete_in_one_line(tmp_path: Path, sig: signal.Signals) -> None:
    """Ctrl-C, or the SIGTERM a scheduler sends, before any agent joined: exit 2 and a line that says
    INCOMPLETE and that nothing was measured, never death by the signal or silence."""
    ctl = controller(tmp_path, token(), ["cpu-smoke", "--launcher", "join", "--nodes", "2", "--store-addr",
                                         f"127.0.0.1:{free_port()}"])
    assert ctl.stdout is not None and "waiting up to" in ctl.stdout.readline()
    ctl.send_signal(sig)
    out = finish(ctl, [], timeout=60)
    assert ctl.returncode == Exit.INCOMPLETE, out
    assert "INCOMPLETE: " in out and "with 0 of 2 node agent(s) joined: stopped before any check ran; nothing was measured" in out, out
    assert "Traceback" not in out and not (tmp_path / "out").exists()


def test_while_agents_are_missing_the_controller_says_how_many_joined(monkeypatch: pytest.MonkeyPatch,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """A wait of minutes (pods being scheduled, a Slurm step not yet created) is not silence: after
    SAY_AFTER seconds, then every SAY_EVERY, a line says how many agents joined and how long the wait goes on,
    with what the launcher knows of why (tests/test_slurm_agents.py: srun's words)."""
    from clustercheck.run import join

    monkeypatch.setattr(join, "SAY_AFTER", 0.3)
    monkeypatch.setattr(join, "SAY_EVERY", 0.5)
    launcher = join.JoinLauncher(2, f"127.0.0.1:{free_port()}", 1.2, token(), gather=False)
    monkeypatch.setattr(launcher, "waiting", lambda: "pods pending")
    launcher.open()
    try:
        assert launcher._await(5.0) == {}
    finally:
        launcher.close()
    said = [ln for ln in capsys.readouterr().err.splitlines() if "joined after" in ln]
    assert len(said) == 2, said  # at 0.3 s and 0.8 s of a 1.2 s wait
    assert all(re.fullmatch(r"clustercheck: 0 of 2 node agent\(s\) joined after \d+ s; waiting up to \d+ s more "
                            r"\(pods pending\)", ln) for ln in said), said
