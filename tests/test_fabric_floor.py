"""The fabric floor (clustercheck/judging/fabric.py): multi-node busbw judged against a fraction of the
nodes' network line rate, never against one node's NVLink floor; unknown line rate is not judged.
Offline through `clustercheck probe nccl-tests` on a real 2-node, 16-rank H100 capture; in a run through
`run.judge.rules_for`, which the session and `clustercheck verify` both call."""

from __future__ import annotations

from pathlib import Path

import pytest

from clustercheck.cli import main
from clustercheck.errors import NoThreshold, UserError
from clustercheck.judging.fabric import FabricRule, RunFabric, parse_rule, ring_problem
from clustercheck.judging.thresholds import parse_profile
from clustercheck.kinds.base import CheckSpec
from clustercheck.run.judge import rules_for
from clustercheck.yamlfile import loads
from evidence import TOOLS, text

H100 = TOOLS / "nccl-tests" / "allreduce-h100-2node-16rank-mpirun.txt"
DGX2 = TOOLS / "nccl-tests" / "allreduce-dgxa100-2node-oldformat-error-col.txt"
SINGLE = TOOLS / "nccl-tests" / "alltoall-4xgb300-single-node-new-format-na.txt"


def nccl_tests(capsys: pytest.CaptureFixture[str], path: Path | str, *args: str) -> tuple[int, str, str]:
    code = main(["probe", "nccl-tests", "--input", str(path), *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def busbw(out: str) -> str:
    return next(line for line in out.splitlines() if ": busbw: " in line)


@pytest.mark.parametrize("rate, code, word, floor", [("3200", 1, "FAIL", "360"), ("800", 0, "PASS", "90")])
def test_the_two_node_h100_capture_against_the_line_rate(capsys, rate, code, word, floor):
    got, out, _ = nccl_tests(capsys, H100, "--expect", f"fabric_gbps={rate}")
    assert got == code, out
    assert busbw(out).startswith(f"{word} all_reduce_perf: busbw: 338.82 / 337.35 GB/s (out-of-place / in-place) at "
                                 f"8589934592 B; 2 node(s); fabric floor {floor} GB/s (0.9 * {rate} Gb/s / 8; line rate "
                                 f"from --expect fabric_gbps; rule built in)")
    # a pass on 2 nodes says the algorithm was not shown to be Ring (Tree/NVLSTree can exceed the network)
    assert ("NCCL_ALGO=Ring" in busbw(out)) == (word == "PASS")


def test_without_a_line_rate_the_multinode_busbw_is_not_judged_and_the_nvlink_floor_never_applies(capsys):
    for extra in ((), ("--platform", "h100-sxm-8x")):
        got, out, _ = nccl_tests(capsys, H100, *extra)
        assert got == 3 and busbw(out).startswith(
            "NOT JUDGED all_reduce_perf: busbw: not judged: network line rate unknown (give --expect fabric_gbps=N or a "
            "profile's fabric block)"), out
        assert "430" not in busbw(out)


def test_the_profile_fabric_block_judges_with_its_own_fraction_and_source(capsys, tmp_path):
    profile = (Path(__file__).parents[1] / "thresholds" / "h100-sxm-8x.yaml").read_text()
    assert "\nfabric:" in profile  # the shipped rule: fraction and source, the line rate from the nodes
    (tmp_path / "h100-sxm-8x.yaml").write_text(profile.replace("\nfabric:\n", "\nfabric:\n  line_rate_gbps: 1600\n", 1))
    got, out, _ = nccl_tests(capsys, H100, "--platform", "h100-sxm-8x", "--thresholds", str(tmp_path))
    assert got == 0 and "fabric floor 180 GB/s (0.9 * 1600 Gb/s / 8; line rate from" in busbw(out), out
    assert "h100-sxm-8x.yaml:" in busbw(out)  # the rule's origin: the profile's fabric block, file and line
    got, out, _ = nccl_tests(capsys, H100, "--platform", "h100-sxm-8x", "--thresholds", str(tmp_path),
                             "--expect", "fabric_gbps=3200")
    assert got == 1 and "line rate from --expect fabric_gbps" in busbw(out)  # --expect overrides the block


def test_below_the_plateau_size_and_a_one_node_capture(capsys):
    got, out, _ = nccl_tests(capsys, DGX2, "--expect", "fabric_gbps=1600", "--expect", "gpu_count=8")
    assert got == 3 and "not judged: the largest size is below the 8GiB the fabric rule judges at" in busbw(out)
    got, out, _ = nccl_tests(capsys, SINGLE, "--expect", "fabric_gbps=3200")
    # the fabric never judges one node, and no busbw_min was given: not judged, never passed
    assert got == 3 and "not judged: no busbw floor given (busbw_min); " in busbw(out) and "1 node(s)" in busbw(out)


@pytest.mark.parametrize("value, message", [("0", "above 0, got 0"), ("-800", "above 0, got -800"),
                                            ("abc", "expected an integer or a number, got text"),
                                            (".nan", "above 0, got nan")])
def test_a_line_rate_that_is_not_a_positive_number_is_refused_in_one_line(capsys, value, message):
    got, out, err = nccl_tests(capsys, H100, "--expect", f"fabric_gbps={value}")
    assert got == 4 and out == "" and err.count("\n") == 1 and "--expect: fabric_gbps: " in err and message in err


def test_hosts_times_gpus_against_what_is_expected(capsys, tmp_path):
    got, out, _ = nccl_tests(capsys, H100, "--expect", "nodes=4", "--expect", "fabric_gbps=800")
    assert got == 1 and "FAIL all_reduce_perf: hosts x GPUs: 2 host(s), 4 expected" in out
    got, out, _ = nccl_tests(capsys, H100, "--platform", "h100-sxm-8x", "--expect", "nodes=2", "--expect",
                             "fabric_gbps=800")
    assert got == 0 and "PASS all_reduce_perf: hosts x GPUs: ztan-mig-235z x8 + ztan-mig-gq73 x8" in out
    lines = text("nccl-tests", H100.name).splitlines()
    short = [ln for ln in lines if "#  Rank 15 " not in ln]  # the same capture with one rank of the 2nd host gone
    (tmp_path / "short.txt").write_text("\n".join(short) + "\n")
    got, out, _ = nccl_tests(capsys, tmp_path / "short.txt", "--platform", "h100-sxm-8x", "--expect", "fabric_gbps=800")
    assert got == 1 and "FAIL all_reduce_perf: hosts x GPUs: ztan-mig-gq73 ran 7 rank(s), the platform has 8 GPUs " \
                        "per node" in out


# -- the rule in a profile ------------------------------------------------------------------------------

def _profile(fabric: str = "") -> str:
    return ("platform: p\ndetect: {gpu_count: 0}\ndefaults:\n  all_reduce:\n    busbw: {limit: '>= 400', unit: GB/s}\n"
            "  all_gather:\n    busbw: {limit: '>= 300', unit: GB/s}\n" + fabric)


@pytest.mark.parametrize("block, key, message", [
    ("fabric: {fraction: 1.5, source: s}\n", "fabric.fraction", "expected a fraction of the line rate in (0, 1]"),
    ("fabric: {fraction: {all_reduce: .nan}, source: s}\n", "fabric.fraction.all_reduce", "got nan"),
    ("fabric: {fraction: 0.9}\n", "fabric.source", "needs its public source"),
    ("fabric: {line_rate_gbps: 0, source: s}\n", "fabric.line_rate_gbps", "above 0"),
    ("fabric: {min_size: lots, source: s}\n", "fabric.min_size", "size"),
    ("fabric: {fraction: 0.9, sources: s}\n", "fabric.sources", "unknown key"),
])
def test_a_bad_fabric_block_is_refused_with_file_line_and_key(block, key, message):
    with pytest.raises(UserError) as err:
        parse_profile(loads(_profile(block), "p.yaml"), "p.yaml", "p")
    assert f"p.yaml:8: {key}: " in str(err.value) and message in str(err.value), str(err.value)


def _check(measure: str, scope: str, judge_at: int = 16 << 30, env: tuple[tuple[str, str], ...] = (),
           check_id: str = "x") -> CheckSpec:
    return CheckSpec(check_id, measure, scope, {"judge_at": judge_at, "sizes": [judge_at]}, env, 60, "", "s.yaml", 1)


RULE = "fabric: {fraction: {all_reduce: 0.9, all_gather: 0.92}, min_size: 8GiB, source: public}\n"


def _run(nodes: int, backend: str = "nccl", rate: float | None = 3200.0, **expect: object) -> RunFabric:
    return RunFabric(nodes, backend, expect, (rate, "the nodes' RDMA ports: 8 active ..."))


def test_rules_for_a_multinode_check_are_the_fabric_floor_and_a_node_check_keeps_the_nvlink_floor():
    profile = parse_profile(loads(_profile(RULE), "p.yaml"), "p.yaml", "p")
    ring = (("NCCL_ALGO", "Ring"),)
    node = rules_for(_check("all_reduce", "node", env=ring), profile, _run(4))
    assert node.limits["busbw"].value == 400 and not node.multi_node
    one = rules_for(_check("all_reduce", "cluster", env=ring), profile, _run(1))
    assert one.limits["busbw"].value == 400  # a one-node cluster: the fabric floor never judges it
    for scope in ("cluster", "pair", "localize"):
        multi = rules_for(_check("all_reduce", scope, env=ring), profile, _run(4))
        limit = multi.limits["busbw"]
        assert multi.multi_node and limit.value == 360 and limit.expression == ">= 0.9 * 3200 Gb/s / 8"
        assert limit.origin == "p.yaml:8 fabric" and "line rate 3200 Gb/s from the nodes' RDMA ports" in limit.source
    gather = rules_for(_check("all_gather", "cluster"), profile, _run(4, fabric_gbps=800))
    assert gather.limits["busbw"].value == pytest.approx(92.0)  # 0.92 x 800 / 8; --expect over the nodes' rate


@pytest.mark.parametrize("check, run, message", [
    (_check("all_reduce", "pair", env=(("NCCL_ALGO", "Ring"),)), _run(2, rate=None),
     "x: not judged: network line rate unknown (give --expect fabric_gbps=N or a profile's fabric block); the nodes'"),
    (_check("all_reduce", "pair"), _run(2), "x: not judged: a multi-node all_reduce is judged against the network on "
                                            "Ring only"),
    (_check("all_gather", "pair", judge_at=1 << 30), _run(2), "x: not judged: judged at 1GiB, below the 8GiB"),
    (_check("alltoall", "pair"), _run(2), "x: not judged: the fabric rule (p.yaml:8 fabric) covers all_reduce, "
                                          "all_gather, not alltoall"),
])
def test_what_cannot_be_judged_against_the_fabric_is_an_error_never_a_pass(check, run, message):
    profile = parse_profile(loads(_profile(RULE), "p.yaml"), "p.yaml", "p")
    with pytest.raises(NoThreshold) as err:
        rules_for(check, profile, run)
    assert str(err.value).startswith(message), str(err.value)


def test_a_profile_entry_naming_the_check_is_the_users_own_limit_even_across_nodes():
    profile = parse_profile(loads(_profile(RULE) + "checks:\n  pair-bw: {busbw: {limit: '>= 0.01', unit: GB/s}}\n",
                                  "p.yaml"), "p.yaml", "p")
    rules = rules_for(_check("all_reduce", "pair", check_id="pair-bw"), profile, _run(2, backend="gloo", rate=None))
    assert rules.limits["busbw"].value == 0.01 and rules.multi_node


@pytest.mark.parametrize("algo, ok", [("Ring", True), ("ring", True), ("allreduce:ring", True),
                                      ("ring;allreduce:nvls", False), ("Tree", False), ("", False)])
def test_ring_is_read_from_nccl_algo_as_nccl_reads_it(algo, ok):
    env = {"NCCL_ALGO": algo} if algo else {}
    assert (ring_problem("all_reduce", "nccl", env) is None) == ok
    assert ring_problem("all_reduce", "gloo", env) is None and ring_problem("all_gather", "nccl", env) is None


def test_the_built_in_rule_and_the_rule_roundtrip():
    rule = FabricRule()
    assert rule.fraction == {"all_reduce": 0.9, "all_gather": 0.9, "reduce_scatter": 0.9} and rule.min_size == 8 << 30
    assert FabricRule.from_dict(rule.as_dict()) == rule
    parsed = parse_rule({"fraction": 0.85, "ports": ["mlx5_0"], "source": "s"}, "f.yaml", 3)
    assert parsed.describe() == ("busbw >= 0.85 x line rate / 8 for multi-node all_reduce, all_gather, reduce_scatter "
                                 "(Ring), judged at >= 8GiB; line rate read from the nodes' RDMA ports (ports mlx5_0)")
