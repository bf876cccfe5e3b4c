"""`clustercheck run SUITE --expect KEY` that no selected check reads is refused (one line, exit 4) before any
check runs, never run and passed; and each kind's declared expect keys (`Kind.expect_keys`, `Kind.reads`) are
the keys clustercheck's code reads out of an expectation mapping for it, found by reading that code."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from clustercheck import probes
from clustercheck.errors import UserError
from clustercheck.judging.expect import EXPECT_KEYS, TOPOLOGY_KEYS
from clustercheck.kinds import KINDS, register
from clustercheck.kinds.base import Kind
from clustercheck.suite.load import load_suite

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "clustercheck"
SUITES = PACKAGE / "data" / "suites"
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "alltoall", "broadcast", "reduce", "sendrecv")

MIXED = """\
suite: mixed
description: a probe check beside an all_reduce one
checks:
  - {id: nvlink-links, measure: probe, params: {probe: nvlink}, description: active NVLinks}
  - {id: nvlink-own, measure: probe, params: {probe: nvlink, expect: {nvlinks_per_gpu: 12}}, description: its own}
  - {id: topo-amd, measure: probe, params: {probe: amd-smi}, description: amd-smi reads topology.gpu_gpu only}
  - id: allreduce-one
    description: one small all_reduce
    measure: all_reduce
    scope: node
    params: {sizes: [1KiB], warmup: 1, iters: 2}
  - id: gds-write
    description: gdsio writes only
    measure: gdsio
    params: {io: [write]}
  - id: ib-own-devices
    description: ib_write_bw on devices of its own
    measure: ib_write_bw
    params: {devices: [mlx5_0]}
"""


def cc(*args: object, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("CC_STORE_ADDR", "CLUSTERCHECK_THRESHOLDS")}
    return subprocess.run([sys.executable, "-m", "clustercheck", "run", *map(str, args)], capture_output=True,
                          text=True, cwd=cwd, env=env, timeout=300)


def refused_line(p: subprocess.CompletedProcess[str]) -> str:
    assert p.returncode == 4, (p.returncode, p.stdout[-2000:], p.stderr[-2000:])
    lines = [line for line in p.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, p.stderr
    return lines[0]


# -- through the real CLI --------------------------------------------------------------------------------------

def test_a_key_no_check_of_the_run_reads_is_refused_before_any_rank_and_no_run_is_recorded(tmp_path: Path) -> None:
    p = cc("cpu-smoke", "--expect", "nvlinks_per_gpu=18", "--out", tmp_path / "runs")
    assert refused_line(p) == ("ERROR: --expect nvlinks_per_gpu: no check of this run reads it (the checks read: net, "
                               "gdr, nics, p2p, fabric_gbps, fabric_ports)")
    assert "passed" not in p.stdout
    assert not list((tmp_path / "runs").glob("*/run.jsonl"))  # nothing measured, nothing recorded


def test_deselection_that_left_out_the_only_reader_is_named(tmp_path: Path) -> None:
    suite = tmp_path / "mixed.yaml"
    suite.write_text(MIXED)
    p = cc(suite, "--expect", "ib_rate_gbps=400", "-k", "allreduce", "--out", tmp_path / "runs")
    assert refused_line(p) == "ERROR: --expect ib_rate_gbps: no check of this run reads it (the checks read: net, gdr, " \
                              "nics, p2p, fabric_gbps, fabric_ports)"
    p = cc(suite, "--expect", "nvlinks_per_gpu=18", "-k", "allreduce", "--out", tmp_path / "runs")
    assert refused_line(p) == ("ERROR: --expect nvlinks_per_gpu: no check selected for this run reads it (deselected: "
                               "nvlink-links; the selected checks read: net, gdr, nics, p2p, fabric_gbps, fabric_ports)")
    assert not list((tmp_path / "runs").glob("*/run.jsonl"))


TWO_NODES = ("--launcher", "hosts", "--hosts", "h[1-2]", "--host-command", "env CC_HOST={host} {python}")
ACROSS = """\
suite: across
description: one all_reduce across the nodes, judged by the fabric floor
checks:
  - id: across-floor
    description: all_reduce over every rank of every node, no limits of its own
    measure: all_reduce
    scope: cluster
    min_nodes: 2
    params: {sizes: [1MiB], warmup: 1, iters: 3}
"""
# the fabric floor judged at 1 MiB, the line rate from --expect fabric_gbps; the expect: block names keys no
# all_reduce reads (gpu_count, acs_redirect): a profile's block serves every kind and is never refused
PROFILE = """\
platform: cpu
detect: {gpu_count: 0}
fabric: {fraction: 0.1, min_size: 1MiB, source: "a test's: the line rate from --expect fabric_gbps"}
expect: {gpu_count: 0, acs_redirect: false}
"""


@pytest.mark.pool
@pytest.mark.parametrize("typed, why", [
    ("p2p=true", "the gloo backend: it is read from NCCL's log; run with --backend nccl"),
    ("net=IB", "one node: the network between nodes is judged on multi-node runs"),
    ("nics=2", "one node: the network between nodes is judged on multi-node runs"),
    ("fabric_gbps=100", "one node: the fabric floor (busbw against the line rate) applies on multi-node runs"),
])
def test_a_key_the_runs_layout_cannot_judge_is_refused_before_any_check(typed: str, why: str, tmp_path: Path) -> None:
    """cpu-smoke on this machine: gloo, one node. Its all_reduce checks read p2p (from NCCL's log), net, gdr, nics
    (between nodes) and fabric_* (the multi-node floor): run, each passed having judged nothing of them."""
    p = cc("cpu-smoke", "--expect", typed, "--out", tmp_path / "runs", "--no-progress")
    assert refused_line(p) == f"ERROR: --expect {typed.split('=')[0]}: this run cannot judge it ({why})"
    assert "passed" not in p.stdout
    assert not list((tmp_path / "runs").glob("*/run.jsonl"))


@pytest.mark.pool
def test_on_two_nodes_each_check_that_cannot_judge_the_key_is_named_with_why(tmp_path: Path) -> None:
    p = cc("cpu-smoke", "--expect", "fabric_gbps=100", "--out", tmp_path / "runs", *TWO_NODES)
    assert refused_line(p) == (
        "ERROR: --expect fabric_gbps: this run cannot judge it (allreduce-sweep, allreduce-small-latency, "
        "allreduce-bf16: scope node, each node alone: the fabric floor (busbw against the line rate) applies on "
        "checks of scope cluster, pair or localize; allreduce-across-nodes: judged by limits of its own "
        "(thresholds/cpu.yaml checks.allreduce-across-nodes), not by the fabric floor, which reads it)")
    p = cc("cpu-smoke", "--expect", "gdr=true", "--out", tmp_path / "runs", *TWO_NODES)
    assert refused_line(p) == (
        "ERROR: --expect gdr: this run cannot judge it (allreduce-sweep, allreduce-small-latency, allreduce-bf16: "
        "scope node, each node alone: the network between nodes is judged on checks of scope cluster, pair or "
        "localize; the gloo backend: it is read from NCCL's log; run with --backend nccl)")
    assert not list((tmp_path / "runs").glob("*/run.jsonl"))


@pytest.mark.pool
def test_a_key_a_check_of_the_run_judges_runs_and_the_profiles_own_block_is_never_refused(tmp_path: Path) -> None:
    """Two nodes on this machine: the fabric floor judges the cluster all_reduce against --expect fabric_gbps."""
    (tmp_path / "th").mkdir()
    (tmp_path / "th" / "cpu.yaml").write_text(PROFILE)
    (tmp_path / "across.yaml").write_text(ACROSS)
    p = cc("across.yaml", "--thresholds", "th", "--expect", "fabric_gbps=0.001", "--out", "runs", "--no-progress",
           *TWO_NODES, cwd=tmp_path)
    assert p.returncode == 0, (p.stdout[-3000:], p.stderr[-3000:])
    (result,) = json.loads((tmp_path / "runs" / "latest" / "results.json").read_text())["results"]
    (busbw,) = [v for v in result["verdicts"] if v["metric"] == "busbw"]
    assert busbw["expression"] == ">= 0.1 * 0.001 Gb/s / 8" and busbw["passed"], busbw


# -- what the refusal decides, on the suites' real checks ----------------------------------------------------

def checks_of(text: str, tmp_path: Path) -> list:
    path = tmp_path / "mixed.yaml"
    path.write_text(text)
    return list(load_suite(path, "mixed.yaml").checks)


def refusal(typed: dict, selected: list, tmp_path: Path) -> str | None:
    from clustercheck.run.expect_read import refuse_unread

    try:
        refuse_unread(typed, selected, [("mixed.yaml", tmp_path / "mixed.yaml")])
    except UserError as exc:
        return str(exc)
    return None


def test_what_each_check_reads_follows_its_params(tmp_path: Path) -> None:
    checks = {c.id: c for c in checks_of(MIXED, tmp_path)}
    only = [checks["nvlink-own"]]  # its own params set nvlinks_per_gpu: the run's would reach no judge
    assert refusal({"nvlinks_per_gpu": 18}, only, tmp_path) is not None
    assert refusal({"gpu_count": 8}, only, tmp_path) is None
    amd = [checks["topo-amd"]]
    assert refusal({"topology": {"gpu_gpu": "XGMI"}}, amd, tmp_path) is None
    assert "--expect topology.gpu_nic: no check" in str(refusal({"topology": {"gpu_nic": ["PIX"]}}, amd, tmp_path))
    gds = [checks["gds-write"]]
    assert refusal({"gdsio_write_min": 5}, gds, tmp_path) is None
    assert "--expect gdsio_read_min: no check of this run" in str(refusal({"gdsio_read_min": 5}, gds, tmp_path))
    ib = [checks["ib-own-devices"]]
    assert refusal({"ib_write_bw_min": 380}, ib, tmp_path) is None
    assert "--expect fabric_ports: no check selected for this run reads it (deselected: allreduce-one; the selected " \
           "checks read: ib_write_bw_min)" == refusal({"fabric_ports": ["mlx5_0"]}, ib, tmp_path)
    assert refusal({}, [], tmp_path) is None  # nothing typed: nothing to refuse, whatever the checks


LAYOUTS = """\
suite: layouts
description: all_reduce on each node, across the nodes and between node pairs
checks:
  - {id: ar-node, measure: all_reduce, scope: node, params: {sizes: [1KiB]}, description: each node}
  - {id: ar-cluster, measure: all_reduce, scope: cluster, params: {sizes: [1KiB]}, description: every rank}
  - {id: ar-pairs, measure: all_reduce, scope: pair, params: {sizes: [1KiB]}, description: node pairs}
  - {id: allreduce-across-nodes, measure: all_reduce, scope: cluster, params: {sizes: [1KiB]}, description: cpu.yaml's}
"""


def unjudged(typed: dict, ids: list[str], backend: str, nodes: int, per_node: int, tmp_path: Path,
             absent: tuple[str, ...] = ()) -> str | None:
    """refuse_unjudged's line for the checks `ids` of LAYOUTS on such a run, judged by thresholds/cpu.yaml."""
    from clustercheck.judging.thresholds import load_profile
    from clustercheck.run.expect_read import refuse_unjudged
    from clustercheck.run.runner import Layout

    checks = {c.id: c for c in checks_of(LAYOUTS, tmp_path)}
    layout = Layout(backend, [f"n{i}" for i in range(nodes)], per_node)
    try:
        refuse_unjudged(typed, [checks[i] for i in ids], layout, load_profile(REPO / "thresholds" / "cpu.yaml",
                                                                             "thresholds/cpu.yaml"), absent)
    except UserError as exc:
        return str(exc)
    return None


def test_what_the_collectives_can_judge_follows_the_backend_the_nodes_and_the_ranks_per_node(tmp_path: Path) -> None:
    every = ["ar-node", "ar-cluster", "ar-pairs"]
    # NCCL on 2 nodes of 8 GPUs: P2P between a node's GPUs, the network between the nodes, the fabric floor
    for typed in ({"p2p": True}, {"net": "IB"}, {"gdr": True}, {"nics": 4}, {"fabric_gbps": 3200}):
        assert unjudged(typed, every, "nccl", 2, 8, tmp_path) is None, typed
    assert unjudged({"p2p": True}, ["ar-node"], "nccl", 1, 8, tmp_path) is None
    assert unjudged({"net": "IB"}, ["ar-pairs"], "nccl", 2, 8, tmp_path) is None
    # one node, or checks of one node each: nothing between nodes is judged
    assert unjudged({"net": "IB"}, every, "nccl", 1, 8, tmp_path) == \
        "--expect net: this run cannot judge it (one node: the network between nodes is judged on multi-node runs)"
    assert unjudged({"nics": 4}, ["ar-node"], "nccl", 2, 8, tmp_path) == \
        "--expect nics: this run cannot judge it (ar-node: scope node, each node alone: the network between nodes " \
        "is judged on checks of scope cluster, pair or localize)"
    # one GPU per node: no two GPUs of a node for P2P; gloo: no NCCL log at all
    assert unjudged({"p2p": True}, every, "nccl", 2, 1, tmp_path) == \
        "--expect p2p: this run cannot judge it (one rank per node: P2P is judged between two GPUs of one node; " \
        "run with --ranks 2 or more)"
    assert unjudged({"gdr": True}, every, "gloo", 2, 2, tmp_path) == \
        "--expect gdr: this run cannot judge it (ar-node: scope node, each node alone: the network between nodes " \
        "is judged on checks of scope cluster, pair or localize; the gloo backend: it is read from NCCL's log; run " \
        "with --backend nccl)"
    # the fabric floor judges gloo too, but not a check the profile gives limits of its own
    assert unjudged({"fabric_gbps": 1}, ["ar-cluster"], "gloo", 2, 2, tmp_path) is None
    assert unjudged({"fabric_ports": ["mlx5_0"]}, ["allreduce-across-nodes"], "gloo", 2, 2, tmp_path) == \
        "--expect fabric_ports: this run cannot judge it (allreduce-across-nodes: judged by limits of its own " \
        "(thresholds/cpu.yaml checks.allreduce-across-nodes), not by the fabric floor, which reads it)"
    # a node that never joined would have made two: not the user's key, the run's error (NeverJoined)
    assert unjudged({"fabric_gbps": 1}, ["ar-cluster"], "gloo", 1, 2, tmp_path, ("n1",)) is None
    # a check the layout skips judges nothing (run/applies.py)
    assert unjudged({"fabric_gbps": 1}, ["ar-pairs"], "gloo", 1, 2, tmp_path) == \
        "--expect fabric_gbps: this run cannot judge it (ar-pairs: skipped: scope pair needs two nodes or more; " \
        "this run has 1)"
    assert unjudged({}, every, "gloo", 1, 2, tmp_path) is None  # nothing typed: nothing to refuse


IB_PORTS = """\
suite: ib-ports
description: the ib probe, which judges the ports fabric_ports names whatever the line rate
checks:
  - {id: ib-ports, measure: probe, params: {probe: ib}, description: RDMA ports}
"""
SHADOWED = "--expect fabric_ports: this run cannot judge it (the fabric floor takes its line rate from {}, never " \
           "from the ports fabric_ports names)"


def test_fabric_ports_a_given_line_rate_shadows_is_refused_unless_a_check_reads_the_ports_themselves(
        tmp_path: Path) -> None:
    """judging/fabric.py line_rate: fabric_gbps (typed or the profile's), then the profile's
    fabric.line_rate_gbps, and only then the ports fabric_ports names: beside either, the floor never read them,
    and the run passed with a port no node has."""
    from dataclasses import replace

    from clustercheck.judging.fabric import FabricRule
    from clustercheck.judging.thresholds import Profile, load_profile
    from clustercheck.run.expect_read import refuse_unjudged
    from clustercheck.run.runner import Layout

    checks = {c.id: c for c in checks_of(LAYOUTS, tmp_path)}
    cpu = load_profile(REPO / "thresholds" / "cpu.yaml", "thresholds/cpu.yaml")

    def line(typed: dict, profile: Profile = cpu, ids: tuple[str, ...] = ("ar-cluster",), more: tuple = ()) -> str | None:
        try:
            refuse_unjudged(typed, [*(checks[i] for i in ids), *more], Layout("gloo", ["n0", "n1"], 2), profile)
        except UserError as exc:
            return str(exc)
        return None

    ports = {"fabric_ports": ["mlx5_0"]}
    assert line(ports) is None  # no line rate given: the floor sums the ports named
    assert line({**ports, "fabric_gbps": 3200}) == SHADOWED.format("--expect fabric_gbps=3200")
    rated = replace(cpu, fabric=FabricRule(line_rate_gbps=1600, origin="th/cpu.yaml:3 fabric"))
    assert line(ports, rated, ("ar-cluster", "ar-pairs")) == SHADOWED.format("th/cpu.yaml:3 fabric.line_rate_gbps 1600")
    in_block = replace(cpu, expect={**cpu.expect, "fabric_gbps": 400})
    assert line(ports, in_block) == SHADOWED.format("thresholds/cpu.yaml expect.fabric_gbps 400")
    assert line({"fabric_gbps": 3200}, rated) is None  # typed fabric_gbps wins over the profile's: read
    # the ib probe judges the ports named (present, ACTIVE) whatever the rate: read, never refused
    (ib,) = checks_of(IB_PORTS, tmp_path)
    assert line({**ports, "fabric_gbps": 3200}, more=(ib,)) is None


@pytest.mark.pool
def test_a_run_refuses_fabric_ports_beside_fabric_gbps_before_any_check(tmp_path: Path) -> None:
    """Two nodes on this machine, the across-node all_reduce judged by the fabric floor: with fabric_gbps typed
    the ports named were read by nothing, and a port no node has passed (exit 0)."""
    (tmp_path / "th").mkdir()
    (tmp_path / "th" / "cpu.yaml").write_text(PROFILE)
    (tmp_path / "across.yaml").write_text(ACROSS)
    p = cc("across.yaml", "--thresholds", "th", "--expect", "fabric_gbps=0.001", "--expect", "fabric_ports=[mlx5_9]",
           "--out", "runs", "--no-progress", *TWO_NODES, cwd=tmp_path)
    assert refused_line(p) == "ERROR: " + SHADOWED.format("--expect fabric_gbps=0.001")
    assert not list((tmp_path / "runs").glob("*/run.jsonl"))


def test_every_need_a_kind_declares_is_one_the_refusal_knows_for_a_key_it_reads() -> None:
    from clustercheck.run.expect_read import NEEDS

    for kind in KINDS.values():
        for key, needs in kind.expect_needs.items():
            assert key in kind.expect_keys and needs and set(needs) <= set(NEEDS), (kind.name, key, needs)
    assert set(KINDS["all_reduce"].expect_needs) == {"net", "gdr", "nics", "p2p", "fabric_gbps", "fabric_ports"}


@pytest.mark.parametrize("suite", sorted(SUITES.glob("*.yaml")), ids=lambda p: p.stem)
def test_every_key_a_shipped_suite_reads_is_one_it_declares_and_one_the_parser_takes(suite: Path) -> None:
    for check in load_suite(suite).checks:
        for key in KINDS[check.measure].reads(check):
            top, _, sub = key.partition(".")
            assert top in EXPECT_KEYS and (not sub or top == "topology" and sub in TOPOLOGY_KEYS), (check.id, key)
            declared = KINDS[check.measure].expect_keys
            if check.measure != "probe":  # a probe check's: its probe's, held by tests/test_probe_expect_keys.py
                assert key in declared, (check.id, key, declared)
            else:
                assert key in probes.get(check.params["probe"]).expect_keys


def test_a_kind_declaring_a_key_no_expect_block_takes_is_refused_at_registration() -> None:
    kind = KINDS["gemm"]
    fields = {f: getattr(kind, f) for f in kind.__dataclass_fields__}
    with pytest.raises(UserError, match="expect_keys: 'nvlink_count' is no expect: key"):
        register(Kind(**{**fields, "name": "gemm_typo", "expect_keys": ("nvlink_count",)}))
    with pytest.raises(UserError, match="expect_keys: 'topology.gpu_cpu' is no expect: key"):
        register(Kind(**{**fields, "name": "gemm_typo", "expect_keys": ("topology.gpu_cpu",)}))
    assert "gemm_typo" not in KINDS


# -- the declarations stay true: every read of an expectation mapping in clustercheck's code ------------------

# A read: `expect.get("KEY"` or `expect["KEY"]` (rules.expect, run.expect alike), or by a variable whose keys the
# table below names; `expect["KEY"] = ...` is a write (judging/derive.py writes a derived profile's block).
READ = re.compile(r"\bexpect(?:\.get\(|\[)\s*(?:\"(\w+)\"|(\w+))(\]\s*=(?!=))?")
# file -> (the kinds whose checks it reads expectations for, the keys read through a variable, by variable)
READERS: dict[str, tuple[tuple[str, ...], dict[str, tuple[str, ...]]]] = {
    "kinds/collectives.py": (COLLECTIVES, {"k": ("net", "gdr", "nics")}),  # TRANSPORT_KEYS
    "fabric/transport.py": (COLLECTIVES, {"key": ("net", "gdr")}),  # transport_verdicts -> judge
    "judging/fabric.py": (COLLECTIVES, {}),  # the multi-node floor's line rate (run/judge.py, session.py)
    "kinds/gdsio.py": (("gdsio",), {"key": ("gdsio_write_min", "gdsio_read_min")}),
    "kinds/ib_write_bw.py": (("ib_write_bw",), {}),
    "run/expect_read.py": (COLLECTIVES, {}),  # the floor's line rate given, over the fabric_ports it shadows
}
# read by no kind's check: the probes' (tests/test_probe_expect_keys.py), the parser's, and fabric_rule, which
# the probe CLI hands its probes and no user types (EXPECT_KEYS has it not)
OUTSIDE = ("probes/", "judging/expect.py")


def reads_in_code() -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        name = str(path.relative_to(PACKAGE))
        if name.startswith(OUTSIDE):
            continue
        for m in READ.finditer(path.read_text(encoding="utf-8")):
            literal, variable, write = m.groups()
            if write or literal == "fabric_rule":
                continue
            assert name in READERS, f"{name} reads an expectation ({m.group(0)}): add its kinds to READERS and " \
                                    f"the key to their expect_keys"
            keys = (literal,) if literal else READERS[name][1].get(variable or "")
            assert keys, f"{name}: {m.group(0)}: a key read through {variable!r}: name its keys in READERS"
            out.setdefault(name, set()).update(keys)
    return out


def test_every_key_the_code_reads_for_a_kind_is_declared_by_that_kind() -> None:
    seen = reads_in_code()
    assert set(seen) == set(READERS), "a reader in READERS reads nothing now: take it out"
    for name, keys in seen.items():
        for kind in READERS[name][0]:
            missing = keys - set(KINDS[kind].expect_keys)
            assert not missing, f"{kind} does not declare {sorted(missing)}, which {name} reads for it"


def test_every_key_a_kind_declares_is_read_for_it_by_the_code() -> None:
    seen = reads_in_code()
    for kind in KINDS.values():
        if kind.name == "probe":  # its probe's keys; kinds/probe.py hands the mapping on whole
            assert kind.expect_keys == () and kind.expect_keys_of is not None
            continue
        read = set().union(*(keys for name, keys in seen.items() if kind.name in READERS[name][0]))
        assert set(kind.expect_keys) == read, (kind.name, kind.expect_keys, sorted(read))
