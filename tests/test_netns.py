"""Nodes as network namespaces on this machine (tests/netns.py), one link throttled by tc: the real hosts
launcher, pool, gloo and suite runner over veth links, and the localization planner on measured groups.

The ranks run `ip netns exec <host> env GLOO_SOCKET_IFNAME=eth0 python -m clustercheck.run.worker`: gloo
binds to the namespace's own veth, and the controller's store (root namespace) is reached at the
root's address on the bridge, $CC_STORE_ADDR (the hostname here resolves to loopback, which inside a
namespace is the namespace's own).

Sizes and rates: 512 KiB all_reduce; a throttled link at 8 Mbit/s moves it at 0.0008-0.001 GB/s bus
bandwidth, an unthrottled veth on two busy cores at 0.06-0.35 GB/s (measured here). Each group is timed
over two iterations, and one stalled iteration makes a healthy pair slow: in CI, with three test
workers on two cores, healthy pairs read 0.0207 and 0.00966 GB/s. The floor, 0.003 GB/s, sits 3x from
the throttled link and 3x from the slowest healthy pair seen.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest

from clustercheck.exitcodes import Exit

sys.path.insert(0, str(Path(__file__).resolve().parent))
from netns import IFNAME, NetBed, netbed, unavailable, wait_gone  # noqa: E402

pytestmark = pytest.mark.pool  # starts real rank pools or whole runs: `pytest -m 'not pool'` leaves it out

RATE = "8mbit"
LIMIT_GBS = 0.003  # the floor (above)
SIZE = "512KiB"
TEMPLATE = f"ip netns exec {{host}} env GLOO_SOCKET_IFNAME={IFNAME} {{python}}"

SUITE = f"""checks:
  - id: pair-bw
    measure: all_reduce
    scope: pair
    params: {{sizes: [{SIZE}], iters: 2, warmup: 1, check_iters: 1}}
"""
LIMITS = f"""platform: cpu
detect: {{gpu_count: 0}}
checks:
  pair-bw: {{busbw: {{limit: '>= {LIMIT_GBS}', unit: GB/s}}}}
"""


@pytest.fixture(scope="module", autouse=True)
def netns_here() -> None:
    why = unavailable()  # not at import: it adds (and removes) a namespace to find out
    if why is not None:
        pytest.skip(f"no network namespaces here: {why}")


@pytest.fixture
def bed() -> Iterator[NetBed]:
    with netbed(4) as b:
        yield b
    assert wait_gone(b) == []  # namespaces, veths and the bridge are gone


def test_a_failure_inside_the_bed_still_removes_everything() -> None:
    with pytest.raises(RuntimeError, match="boom"):
        with netbed(2) as b:
            assert len(b.leftovers()) == 2 + 1 + 1  # two hosts, the switch namespace, the root's veth
            raise RuntimeError("boom")
    assert wait_gone(b) == []


def test_a_bed_that_fails_half_built_is_removed(monkeypatch: pytest.MonkeyPatch) -> None:
    import netns

    real = netns._ns
    made: list[str] = []

    def failing(ns: str, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        if argv[:3] == ("ip", "addr", "add") and made:  # the second host's address
            raise RuntimeError("injected")
        if argv[:3] == ("ip", "addr", "add"):
            made.append(ns)
        return real(ns, *argv, check=check)

    monkeypatch.setattr(netns, "_ns", failing)
    with pytest.raises(RuntimeError, match="injected"):
        NetBed.create(3)
    tag = made[0].rsplit("-h", 1)[0] + "-"
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
    assert not [ns for ns in listed if ns.startswith(tag)]  # hosts 1 and 2 and the switch were made
    # this bed's links only: another test file's bed may come and go meanwhile on another xdist worker
    assert not [i for i in os.listdir("/sys/class/net") if i.startswith(tag)]


def test_pair_suite_fails_exactly_the_pairs_of_the_throttled_host(bed: NetBed, tmp_path: Path) -> None:
    slow = bed.hosts[2]
    bed.throttle_host(slow, RATE)
    (tmp_path / "th").mkdir()
    (tmp_path / "th" / "cpu.yaml").write_text(LIMITS)
    (tmp_path / "s.yaml").write_text(SUITE)
    cmd = [sys.executable, "-m", "clustercheck", "run", "s.yaml", "--thresholds", "th", "--out", "out",
           "--launcher", "hosts", "--hosts", ",".join(bed.hosts), "--host-command", TEMPLATE, "--ranks", "1",
           "--store-addr", bed.root_addr]  # the flag, not $CC_STORE_ADDR: it must reach the ranks
    env = {k: v for k, v in os.environ.items() if k != "CC_STORE_ADDR"}
    res = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
    data = json.loads((tmp_path / "out" / "latest" / "results.json").read_text())
    outcomes = {r["node"]: r["outcome"] for r in data["results"]}
    pairs = {f"{a},{b}" for i, a in enumerate(bed.hosts) for b in bed.hosts[i + 1:]}
    assert set(outcomes) == pairs, res.stdout + res.stderr
    assert outcomes == {p: "failed" if slow in p.split(",") else "passed" for p in pairs}, res.stdout
    busbw = {r["node"]: r["metrics"]["busbw"]["value"] for r in data["results"]}
    assert max(v for p, v in busbw.items() if slow in p) < LIMIT_GBS < \
        min(v for p, v in busbw.items() if slow not in p), busbw
    assert res.returncode == 1  # failed items: the run's verdict
    assert (tmp_path / "out" / "latest" / "exclude.txt").read_text() == f"{slow}\n"  # it failed 3 partners
    assert {r["host"] for r in data["results"][0]["pool"]["ranks"]} == set(bed.hosts)


def test_a_store_the_hosts_cannot_reach_is_said_with_what_to_give(bed: NetBed, tmp_path: Path) -> None:
    """The controller's hostname resolving to loopback (Debian's 127.0.1.1, or 127.0.0.1 here) is the
    first thing a new cluster hits: agents in other namespaces cannot reach 127.0.0.1 of this one. The
    run stops before any check, once the agents gave up (hosts.REACH s), in one line that names each host
    with what its agent said and says to give --store-addr (not a pass, not a hang)."""
    (tmp_path / "s.yaml").write_text(SUITE)
    cmd = [sys.executable, "-m", "clustercheck", "run", "s.yaml", "--out", "out", "--launcher", "hosts",
           "--hosts", ",".join(bed.hosts), "--host-command", TEMPLATE, "--ranks", "1", "--store-addr", "127.0.0.1"]
    res = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=240)
    out = res.stdout + res.stderr
    (line,) = [ln for ln in out.splitlines() if "a loopback address" in ln]
    assert "no host's agent joined" in line and "advertised at 127.0.0.1" in line and "give --store-addr" in line, \
        out[-3000:]
    assert "(as --store-addr gave it)" in line, line  # not "the hostname resolves to it": the user named it
    # each host named with what its agent said
    assert f"{bed.hosts[0]}: its agent exited with 4 before joining" in line, line
    assert "could not reach the controller at 127.0.0.1" in line, line
    assert not (tmp_path / "out").exists()  # refused before any rank or record
    assert res.returncode == Exit.BAD_INPUT and "Traceback" not in out, out[-3000:]


def test_the_planner_names_the_throttled_link_and_only_it(bed: NetBed, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the traffic between hosts 1 and 2 is slow (htb on each one's eth0, filtered by the other's
    address): each host is fine with every other partner, so the fault is that pair, not a node."""
    from clustercheck.kinds import KINDS
    from clustercheck.run.hosts import HostsLauncher
    from clustercheck.localize import Planner
    from clustercheck.localize.drive import all_reduce_busbw, drive, group_outcomes, rank_groups
    from clustercheck.run.failure import RankFailure
    from clustercheck.run.pool import PoolKey
    from clustercheck.run.pools import PoolManager

    a, b = bed.hosts[0], bed.hosts[1]
    bed.throttle_pair(a, b, RATE)
    monkeypatch.setenv("CC_STORE_ADDR", bed.root_addr)
    launcher = HostsLauncher(list(bed.hosts), TEMPLATE)
    launcher.begin()
    manager = PoolManager(tmp_path / "logs", launcher=launcher)
    params = {"collective": "all_reduce", "sizes": [512 << 10], "dtype": "float32", "warmup": 1, "iters": 2,
              "check_iters": 1, "placements": ["in"]}
    rounds: list[list[tuple[tuple[str, ...], object]]] = []
    try:
        pool = manager.get(PoolKey("gloo", len(bed.hosts)))
        ranks_of = {r["host"]: [r["rank"]] for r in pool.ranks}

        def run(groups: list[tuple[str, ...]]) -> list[object]:
            ranks = rank_groups(groups, ranks_of)
            try:
                answers = dict(enumerate(pool.run("all_reduce", params, 120, groups=ranks,
                                                  runner=KINDS["all_reduce"].runner)))
            except RankFailure as exc:
                answers = exc.answered
            return group_outcomes(ranks, answers, all_reduce_busbw)

        v = drive(Planner(list(bed.hosts), threshold=LIMIT_GBS), run,
                  on_round=lambda gs, out: rounds.append([(g.members, o) for g, o in zip(gs, out)]))
    finally:
        manager.close(kill=True)
        launcher.close()  # the hosts' agents leave
    story = json.dumps(rounds)
    assert [(f.kind, f.nodes) for f in v.findings] == [("link", (a, b))], story
    assert v.suspects == () and v.unexplained == () and v.cleared == set(bed.hosts), story
    assert v.rounds == 3, story
    slow = [o for rnd in rounds for members, o in rnd if {a, b} <= set(members)]
    fast = [o for rnd in rounds for members, o in rnd if not {a, b} <= set(members)]
    # the throttled pair below the floor, every other group above it (the margin above it is the
    # machine's, not the planner's: see the module's docstring)
    assert slow and fast and max(slow) < LIMIT_GBS < min(fast), story  # type: ignore[operator]


LOCALIZE_SUITE = f"""checks:
  - id: fabric
    measure: all_reduce
    scope: localize
    params: {{sizes: [{SIZE}], iters: 2, warmup: 1, check_iters: 1, placements: [in]}}
"""
LOCALIZE_LIMITS = LIMITS.replace("pair-bw:", "fabric:")


@pytest.fixture
def bed6() -> Iterator[NetBed]:
    with netbed(6) as b:
        yield b
    assert wait_gone(b) == []


@pytest.mark.parametrize("fault", ["link", "node"])
def test_scope_localize_through_the_run_names_the_throttled_link_or_node_and_only_it(bed6: NetBed, tmp_path: Path,
                                                                                     fault: str) -> None:
    """`clustercheck run` with `scope: localize` on 6 namespaced nodes: the planner's rounds on the run's
    own pool. One pair's traffic throttled: every node passes, the cluster item fails naming that link,
    nothing is excluded. One node's traffic throttled on all its links: that node fails and is excluded."""
    hosts = bed6.hosts
    if fault == "link":
        bed6.throttle_pair(hosts[0], hosts[1], RATE)
    else:
        bed6.throttle_host(hosts[3], RATE)
    (tmp_path / "th").mkdir()
    (tmp_path / "th" / "cpu.yaml").write_text(LOCALIZE_LIMITS)
    (tmp_path / "s.yaml").write_text(LOCALIZE_SUITE)
    cmd = [sys.executable, "-m", "clustercheck", "run", "s.yaml", "--thresholds", "th", "--out", "out",
           "--launcher", "hosts", "--hosts", ",".join(hosts), "--host-command", TEMPLATE, "--ranks", "1"]
    env = {**os.environ, "CC_STORE_ADDR": bed6.root_addr}
    res = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert (tmp_path / "out" / "latest" / "results.json").is_file(), res.stdout[-4000:] + res.stderr[-4000:]
    data = json.loads((tmp_path / "out" / "latest" / "results.json").read_text())
    outcomes = {r["name"]: r["outcome"] for r in data["results"]}
    (cluster,) = [r for r in data["results"] if r["name"] == "fabric"]
    assert {row["round"] for row in cluster["rows"]} <= {1, 2, 3, 4}
    excluded = (tmp_path / "out" / "latest" / "exclude.txt").read_text()
    if fault == "link":
        assert outcomes == {**{f"fabric[{h}]": "passed" for h in hosts}, "fabric": "failed"}, res.stdout
        bad_ones = [v for v in cluster["verdicts"] if not v["passed"]]
        assert len(bad_ones) == 1, (bad_ones, cluster["rows"])
        (bad,) = bad_ones
        assert bad["subject"] == f"link {hosts[0]} <-> {hosts[1]}", bad
        assert excluded == ""  # no node drained for a link alone
    else:
        assert outcomes == {**{f"fabric[{h}]": "failed" if h == hosts[3] else "passed" for h in hosts},
                            "fabric": "passed"}, res.stdout
        assert excluded == f"{hosts[3]}\n"
    assert res.returncode == 1


def test_scope_localize_follows_the_topology_file_and_refuses_a_node_outside_it(bed6: NetBed, tmp_path: Path) -> None:
    """--topology: the planner gets the switch tree (cut to the run's nodes; the file names one node
    more), the throttled link inside a leaf is still named and only it, and the record says which file
    it used. A run node missing from the file is the user's error, named before any rank starts."""
    hosts = bed6.hosts
    bed6.throttle_pair(hosts[0], hosts[1], RATE)
    (tmp_path / "th").mkdir()
    (tmp_path / "th" / "cpu.yaml").write_text(LOCALIZE_LIMITS)
    (tmp_path / "s.yaml").write_text(LOCALIZE_SUITE)
    tree = {"leaf-a": {"nodes": list(hosts[:3])}, "leaf-b": {"nodes": [*hosts[3:], "elsewhere1"]},
            "spine": {"switches": ["leaf-a", "leaf-b"]}}
    (tmp_path / "topo.json").write_text(json.dumps(tree))
    cmd = [sys.executable, "-m", "clustercheck", "run", "s.yaml", "--thresholds", "th", "--out", "out",
           "--launcher", "hosts", "--hosts", ",".join(hosts), "--host-command", TEMPLATE, "--ranks", "1",
           "--topology", "topo.json"]
    env = {**os.environ, "CC_STORE_ADDR": bed6.root_addr}
    res = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    data = json.loads((tmp_path / "out" / "latest" / "results.json").read_text())
    outcomes = {r["name"]: r["outcome"] for r in data["results"]}
    assert outcomes == {**{f"fabric[{h}]": "passed" for h in hosts}, "fabric": "failed"}, res.stdout
    (cluster,) = [r for r in data["results"] if r["name"] == "fabric"]
    (bad,) = [v for v in cluster["verdicts"] if not v["passed"]]
    assert bad["subject"] == f"link {hosts[0]} <-> {hosts[1]}", bad
    assert "topo.json (2 leaf switch(es))" in json.dumps(cluster), cluster
    assert res.returncode == 1

    tree["leaf-b"]["nodes"] = list(hosts[3:5])  # hosts[5] under no switch
    (tmp_path / "topo.json").write_text(json.dumps(tree))
    # a host command that starts nothing: the refusal comes before any agent is started
    refused = [*cmd, "--out", "out2"]
    refused[refused.index(TEMPLATE)] = "false {host} {python}"
    res = subprocess.run(refused, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert f"1 node(s) are under no switch: {hosts[5]}" in res.stdout + res.stderr, res.stdout[-3000:] + res.stderr[-3000:]
    assert "Traceback" not in res.stdout + res.stderr and res.returncode == 4, res.returncode
