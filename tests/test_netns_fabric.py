"""The shipped fabric suite end to end over network namespaces (tests/netns.py) with gloo: four hosts on
veth links, the link between two of them throttled by tc, the line rate from a profile's fabric block.
The suite is suites/fabric.yaml as shipped, with its sizes cut to 512 KiB and its timeout to what a
2-core machine needs (the 16 GiB sizes are for GPU clusters).

Rates (test_netns.py's docstring): the throttled link (8 Mbit/s) moves 512 KiB all_reduce at 0.0008-0.001
GB/s bus bandwidth, healthy pairs at 0.06-0.35 GB/s, or as little as 0.00966 GB/s when an iteration
stalls on a crowded machine. The profile's fabric block gives a 0.24 Gb/s line rate at a fraction 0.1:
the fabric floor is 0.003 GB/s, 3x from either.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest
import yaml

from clustercheck.exitcodes import Exit

sys.path.insert(0, str(Path(__file__).resolve().parent))
from netns import IFNAME, NetBed, netbed, unavailable, wait_gone  # noqa: E402

pytestmark = pytest.mark.pool

ROOT = Path(__file__).resolve().parent.parent
RATE = "8mbit"
TEMPLATE = f"ip netns exec {{host}} env GLOO_SOCKET_IFNAME={IFNAME} {{python}}"
PROFILE = """platform: cpu
detect: {gpu_count: 0}
fabric:
  line_rate_gbps: 0.24
  fraction: 0.1
  min_size: 512KiB
  source: "clustercheck's test bed: veth links between network namespaces, 0.24 Gb/s taken as the line rate"
"""


@pytest.fixture(scope="module", autouse=True)
def netns_here() -> None:
    why = unavailable()
    if why is not None:
        pytest.skip(f"no network namespaces here: {why}")


@pytest.fixture
def bed() -> Iterator[NetBed]:
    with netbed(4) as b:
        yield b
    assert wait_gone(b) == []


def small_fabric_suite() -> str:
    """suites/fabric.yaml with 512 KiB sizes: the same checks, scopes, environment and min_nodes."""
    doc = yaml.safe_load((ROOT / "suites" / "fabric.yaml").read_text())
    doc["defaults"]["timeout"] = 240
    for check in doc["checks"]:
        if "sizes" in check.get("params", {}):
            check["params"].update(sizes=["512KiB"], warmup=1, iters=2, check_iters=1)
    return yaml.safe_dump(doc, sort_keys=False)


def test_the_fabric_suite_fails_the_throttled_link_only_and_every_node_passes(bed: NetBed, tmp_path: Path) -> None:
    a, b = bed.hosts[0], bed.hosts[1]
    bed.throttle_pair(a, b, RATE)
    (tmp_path / "th").mkdir()
    (tmp_path / "th" / "cpu.yaml").write_text(PROFILE)
    (tmp_path / "fabric.yaml").write_text(small_fabric_suite())
    cmd = [sys.executable, "-m", "clustercheck", "run", "fabric.yaml", "--thresholds", "th", "--out", "out",
           "--launcher", "hosts", "--hosts", ",".join(bed.hosts), "--host-command", TEMPLATE, "--ranks", "1",
           "--store-addr", bed.root_addr]
    env = {k: v for k, v in os.environ.items() if k not in ("CC_STORE_ADDR", "CLUSTERCHECK_THRESHOLDS")}
    res = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    out = res.stdout[-6000:] + res.stderr[-3000:]
    assert (tmp_path / "out" / "latest" / "results.json").is_file(), out
    data = json.loads((tmp_path / "out" / "latest" / "results.json").read_text())
    by_name = {r["name"]: r for r in data["results"]}
    outcomes = {name: r["outcome"] for name, r in by_name.items()}

    # the pair rounds: every node passes, the cluster item names the throttled link and nothing else
    assert {outcomes[f"allreduce-ring-pairs[{h}]"] for h in bed.hosts} == {"passed"}, outcomes
    cluster = by_name["allreduce-ring-pairs"]
    assert cluster["outcome"] == "failed", out
    assert [v["subject"] for v in cluster["verdicts"] if not v["passed"]] == [f"link {a} <-> {b}"], cluster["verdicts"]
    assert (tmp_path / "out" / "latest" / "exclude.txt").read_text() == ""  # no node drained for a link

    # the all-node checks cross the slow link: they fail against the fabric floor, which names its origin
    for name in ("allreduce-ring-all-nodes", "allgather-all-nodes"):
        r = by_name[name]
        (busbw,) = [v for v in r["verdicts"] if v["metric"] == "busbw"]
        assert r["outcome"] == "failed" and not busbw["passed"] and busbw["limit"] == pytest.approx(0.003), busbw
        assert busbw["expression"] == ">= 0.1 * 0.24 Gb/s / 8" and busbw["origin"].startswith("th/cpu.yaml:3 fabric"), busbw
        assert busbw["measured"] < 0.003, busbw

    # no RDMA device and no perftest in the namespaces: said so, never passed
    for h in bed.hosts:
        assert outcomes[f"nic-ports[{h}]"] == "skipped" and outcomes[f"ib-write-bw[{h}]"] == "skipped", outcomes
    assert res.returncode == Exit.FAILED, out
    assert set(data["run"]["node_facts"]) == set(bed.hosts)  # each node's facts, its network among them
    assert all("network" in f for f in data["run"]["node_facts"].values())


def test_unthrottled_the_same_suite_passes_every_fabric_check(bed: NetBed, tmp_path: Path) -> None:
    (tmp_path / "th").mkdir()
    (tmp_path / "th" / "cpu.yaml").write_text(PROFILE)
    (tmp_path / "fabric.yaml").write_text(small_fabric_suite())
    cmd = [sys.executable, "-m", "clustercheck", "run", "fabric.yaml", "--thresholds", "th", "--out", "out",
           "--launcher", "hosts", "--hosts", ",".join(bed.hosts), "--host-command", TEMPLATE, "--ranks", "1",
           "--store-addr", bed.root_addr]
    env = {k: v for k, v in os.environ.items() if k not in ("CC_STORE_ADDR", "CLUSTERCHECK_THRESHOLDS")}
    res = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    data = json.loads((tmp_path / "out" / "latest" / "results.json").read_text())
    outcomes = {r["name"]: r["outcome"] for r in data["results"]}
    measured = {k: v for k, v in outcomes.items() if not k.startswith(("nic-ports", "ib-write-bw"))}
    assert set(measured.values()) == {"passed"}, (outcomes, res.stdout[-4000:])
    assert res.returncode == Exit.PASSED, res.stdout[-3000:]  # skips beside passes: the run passed
