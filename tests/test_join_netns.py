"""Node agents over network namespaces, one per pod, as an Indexed Job's pods see the network: each
namespace (tests/netns.py) gets the pod's hostname (`<job>-<index>`, in a UTS namespace of its own) and
the hosts file Kubernetes would give it (`ip netns exec` mounts /etc/netns/<ns>/hosts over /etc/hosts):
every pod as `<job>-<index>.<service>`, and the controller as `controller.<service>`, the name
`clustercheck k8s render --controller in-cluster` gives the agents. Nothing pins gloo to an interface:
each rank finds its own address by resolving its pod's hostname, as it does in a pod.

Four pods are expected: three agents join (two with NODE_NAME, as the downward API sets it, one without,
which then names its node by its hostname), the fourth never starts; the third is killed mid-run.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest

from clustercheck.exitcodes import Exit

sys.path.insert(0, str(Path(__file__).resolve().parent))
from joining import agent, await_warm, controller, finish, free_port, project, results, token, wait_for  # noqa: E402
from netns import NetBed, netbed, unavailable, wait_gone  # noqa: E402

JOB, SERVICE = "ccj", "ccs"
# a pod's hostname is set in a UTS namespace of its own, then the agent is exec'd in its place
HOSTNAME = "import os, socket, sys; socket.sethostname(sys.argv[1]); os.execv(sys.argv[2], sys.argv[2:])"


@pytest.fixture(scope="module", autouse=True)
def netns_here() -> None:
    why = unavailable()
    if why is not None:
        pytest.skip(f"no network namespaces here: {why}")
    if shutil.which("unshare") is None:
        pytest.skip("util-linux's unshare is not installed")


@pytest.fixture
def pods() -> Iterator[NetBed]:
    with netbed(4) as bed:
        made = []
        try:
            names = [f"{bed.addr[h]}\t{JOB}-{i}.{SERVICE} {JOB}-{i}" for i, h in enumerate(bed.hosts)]
            for h in bed.hosts:
                etc = Path("/etc/netns") / h
                etc.mkdir(parents=True)
                made.append(etc)
                (etc / "hosts").write_text("127.0.0.1\tlocalhost\n" + "\n".join(names) +
                                           f"\n{bed.root_addr}\tcontroller.{SERVICE}\n")
            yield bed
        finally:
            for etc in made:
                shutil.rmtree(etc, ignore_errors=True)
    assert wait_gone(bed) == []


def _in_pod(bed: NetBed, i: int) -> list[str]:
    return ["ip", "netns", "exec", bed.hosts[i], "unshare", "--uts", sys.executable, "-c", HOSTNAME, f"{JOB}-{i}"]


@pytest.mark.pool
def test_agents_in_pods_resolve_each_other_by_name_and_one_absent_one_killed(pods: NetBed, tmp_path: Path) -> None:
    bed = pods
    # the test bed is what it claims: inside pod 0, pod 2's name and the controller's resolve as in a cluster
    seen = subprocess.run([*_in_pod(bed, 0), shutil.which("getent") or "getent", "hosts", f"{JOB}-2.{SERVICE}",
                           f"controller.{SERVICE}"], capture_output=True, text=True, timeout=30)
    assert seen.stdout.split() == [bed.addr[bed.hosts[2]], f"{JOB}-2.{SERVICE}", f"{JOB}-2",
                                   bed.root_addr, f"controller.{SERVICE}"], seen.stdout + seen.stderr
    project(tmp_path)
    port, secret = free_port(), token()
    addr = f"controller.{SERVICE}:{port}"
    # the pods start before the controller, as pods may: each agent imports torch and forks its zygote, then
    # tries the controller until it listens. --join-timeout then waits for their reaching it (under a second),
    # not for their start, and for the absent fourth pod: the 6 s it waits is what the test spends on it
    agents = [agent(tmp_path, secret, 0, "kw-node-0", addr, "--local-ranks", "2", prefix=_in_pod(bed, 0)),
              agent(tmp_path, secret, 1, "kw-node-1", addr, "--local-ranks", "2", prefix=_in_pod(bed, 1)),
              agent(tmp_path, secret, 2, None, addr, "--local-ranks", "2", prefix=_in_pod(bed, 2))]
    await_warm(tmp_path, agents)
    ctl = controller(tmp_path, secret, ["s.yaml", "--thresholds", "th", "--launcher", "join", "--nodes", "4",
                                        "--store-addr", f"{bed.root_addr}:{port}", "--join-timeout", "6",
                                        "-k", "not node-late", "--cc-inject-fault=node-ar:delay"])
    try:
        wait_for(tmp_path / "out" / "latest" / "run.jsonl", '"type": "result"', 240)
    finally:
        agents[2].kill()  # pod 2 dies while every rank waits before the node check
    out = finish(ctl, agents)
    data = results(tmp_path)
    outcome = {r["name"]: r for r in data["results"]}
    # the cluster check ran across the three pods' namespaces, each rank on its pod's own address
    cluster = outcome["cluster-ar"]
    assert cluster["outcome"] == "passed", out[-4000:]
    assert {r["host"] for r in cluster["pool"]["ranks"]} == {"kw-node-0", "kw-node-1", f"{JOB}-2"}
    assert [outcome[f"node-ar[{n}]"]["outcome"] for n in ("kw-node-0", "kw-node-1")] == ["passed", "passed"], out[-4000:]
    died = outcome[f"node-ar[{JOB}-2]"]
    assert died["outcome"] == "error" and f"was lost with its node's agent ({JOB}-2)" in died["message"]
    assert data["verdict"] == "INCOMPLETE" and ctl.returncode == Exit.INCOMPLETE
    assert data["untested"] == ["index-3"] and "JOB_COMPLETION_INDEX=3" in data["run"]["absent"]["index-3"]
    assert [a.returncode for a in agents[:2]] == [0, 0]
    assert "Traceback" not in out


def test_a_pod_resolves_its_own_hostname_to_its_own_address() -> None:
    """What gloo relies on in a pod, and here: the hostname (its UTS namespace's) resolves, through the
    namespace's hosts file, to the pod's own address, not to loopback."""
    with netbed(1) as bed:
        etc = Path("/etc/netns") / bed.hosts[0]
        etc.mkdir(parents=True)
        try:
            (etc / "hosts").write_text(f"{bed.addr[bed.hosts[0]]}\t{JOB}-0.{SERVICE} {JOB}-0\n")
            seen = subprocess.run([*_in_pod(bed, 0), sys.executable, "-c",
                                   "import socket; print(socket.gethostname(), socket.gethostbyname(socket.gethostname()))"],
                                  capture_output=True, text=True, timeout=30)
        finally:
            shutil.rmtree(etc)
    assert seen.stdout.split() == [f"{JOB}-0", bed.addr[bed.hosts[0]]], seen.stderr
