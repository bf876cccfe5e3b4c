"""The collectives judge: NCCL's own errors fail a single-node run too; the network between nodes stays
multi-node. Rank logs are real captures (tests/fixtures/nccl-debug/, source on line 1), edited."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from clustercheck.errors import HarnessError
from clustercheck.fabric.comm import describe
from clustercheck.judging.limits import Limit
from clustercheck.kinds.base import Answers, CheckSpec, Rules
from clustercheck.kinds import collectives
from clustercheck.measure.nccl_log import NcclLog

LOGS = Path(__file__).parent / "fixtures" / "nccl-debug"
ROOT = Path(__file__).resolve().parent.parent
ONE_NODE = "deepseek-coder-v2-29-8xa100pcie-shm.txt"   # 8 GPUs of one host, fd8c67c1741e
P2P_WARN = ("fd8c67c1741e:9506:9506 [7] transport/p2p.cc:275 NCCL WARN Cuda failure 'peer access is not supported "
            "between these two devices'")


def rank_log(tmp_path: Path, name: str, *appended: str) -> dict[str, Any]:
    """What a rank returns after reading its NCCL_DEBUG_FILE (here a real capture, lines appended)."""
    path = tmp_path / name
    path.write_text((LOGS / name).read_text().rstrip("\n") + "\n" + "".join(f"{a}\n" for a in appended))
    log = NcclLog(path)
    log.read("all_reduce")
    return {"nccl": log.summary()}


def test_a_single_node_collective_whose_rank_logged_an_nccl_warn_fails(tmp_path):
    comm = describe("nccl", [rank_log(tmp_path, ONE_NODE, P2P_WARN)], [{"host": "node-07"}], None, {})
    rules = Rules({}, expect={"net": "IB", "gdr": True})   # a single-node run: net and gdr are not judged
    verdicts, unjudged = collectives.nccl_verdicts("all_reduce", comm, rules, ["node-07"] * 8)
    assert unjudged == []
    assert [(v.metric, v.passed, v.subject) for v in verdicts] == [("NCCL errors", False, "node-07")]
    assert "Cuda failure 'peer access is not supported" in (verdicts[0].detail or "")
    assert "GPU [7]" in (verdicts[0].detail or "")


def test_an_nccl_warn_is_named_by_the_rank_whose_log_said_it(tmp_path):
    (tmp_path / "rank0").mkdir()
    clean, warned = rank_log(tmp_path / "rank0", ONE_NODE), rank_log(tmp_path, ONE_NODE, P2P_WARN)
    comm = describe("nccl", [clean, warned], [{"host": "node-07"}, {"host": "node-07"}], None, {})
    verdicts, _ = collectives.nccl_verdicts("all_reduce", comm, Rules({}), ["node-07"] * 2)
    assert [(v.metric, v.passed, v.subject) for v in verdicts] == [("NCCL errors", False, "node-07")]
    assert "on node-07 GPU [7] (rank 1)" in (verdicts[0].detail or "")


def test_a_clean_single_node_log_gives_no_transport_verdict(tmp_path):
    comm = describe("nccl", [rank_log(tmp_path, ONE_NODE)], [{"host": "node-07"}], None, {})
    assert collectives.nccl_verdicts("all_reduce", comm, Rules({}, expect={"net": "IB"}), ["node-07"] * 8) == ([], [])


def test_shm_between_gpus_fails_p2p_in_the_collectives_judge_naming_rank_and_host(tmp_path):
    comm = describe("nccl", [rank_log(tmp_path, ONE_NODE)], [{"host": "node-07"}], None, {})
    verdicts, _ = collectives.nccl_verdicts("all_reduce", comm, Rules({}, expect={"p2p": True}), ["node-07"] * 8)
    assert [(v.metric, v.passed, v.subject) for v in verdicts] == [("P2P between GPUs", False, "node-07")]
    assert "SHM between GPUs on node-07 (rank 0)" in (verdicts[0].detail or "")
    assert collectives.nccl_verdicts("all_reduce", comm, Rules({}), ["node-07"] * 8) == ([], [])  # not expected


def test_the_nvlink_profiles_expect_p2p():
    from clustercheck.judging import thresholds

    for name in ("a100-sxm-8x", "a100-sxm-80gb-8x", "b200-8x", "h100-sxm-8x", "h200-sxm-8x"):
        assert thresholds.load_profile(ROOT / "thresholds" / f"{name}.yaml").expect.get("p2p") is True, name
    for name in ("a40-nvbridge-8x", "mi300x-8x", "h100-sxm-1x"):  # PCIe pairs, xGMI, one GPU: not promised
        assert thresholds.load_profile(ROOT / "thresholds" / f"{name}.yaml").expect.get("p2p") is None, name


# -- the judge: a failure beside what the logs could not say ---------------------------------------------

IB_GDR = "nccl-707-a100-four-nics-gdrdma.txt"        # host 10-90-43-152: IB with GPUDirect RDMA, four NICs
IB_ERROR = ("10-90-43-152:120890:121560 [0] transport/net_ib.cc:818 NCCL WARN NET/IB : Got completion with error 12, "
            "opcode 0, len 0, vendor err 129")
QUIET = "nccl-892-h800-algo-env-p2p.txt"             # a real log with no network line at all
GIB = 1 << 30


def _measured(nccl: dict[str, Any], seconds: float) -> dict[str, Any]:
    """One rank's answer to a 1 GiB all_reduce: its time and NCCL's log as the rank read it."""
    return {"dtype": "float32", "nccl": nccl["nccl"],
            "rows": [{"size": GIB, "count": GIB // 4, "bytes": GIB, "placement": "in", "seconds": seconds,
                      "wrong": 0, "iter_seconds": []}]}


def _two_nodes(tmp_path: Path, seconds: float, *appended: str) -> Answers:
    (tmp_path / "b").mkdir()
    per_rank = [_measured(rank_log(tmp_path, IB_GDR, *appended), seconds),
                _measured(rank_log(tmp_path / "b", QUIET), seconds)]
    check = CheckSpec("allreduce-ring-all-nodes", "all_reduce", "cluster",
                      {"judge_at": GIB, "check_iters": 1, "sizes": [GIB]}, (("NCCL_ALGO", "Ring"),), 60, "",
                      "suite.yaml", 1)
    return Answers(check, per_rank, [{"host": "node-07"}, {"host": "node-08"}], "nccl")


FLOOR = Limit("allreduce-ring-all-nodes", "busbw", ">=", 360.0, "GB/s", ">= 0.9 * 3200 Gb/s / 8", "fabric", "h100")
H100 = {"net": "IB", "gdr": True}   # what every 8-GPU profile expects of a multi-node item


def test_a_failed_busbw_and_nccl_error_stand_beside_a_node_whose_log_said_nothing_of_the_network(tmp_path):
    # node-07's traffic failed (an IB completion error), busbw is 10.7 GB/s against a 360 GB/s floor, and
    # node-08's log has no network line: its transport is not judged, but that must not turn the hardware
    # failure into an error of the item (it raised before, and the busbw and NCCL errors verdicts were lost)
    a = _two_nodes(tmp_path, 0.1, IB_ERROR)
    m, verdicts = collectives.judge(a, Rules({"busbw": FLOOR}, expect=H100, multi_node=True))
    failed = {v.metric for v in verdicts if not v.passed}
    assert failed == {"busbw", "NCCL errors"}
    assert m.metrics["busbw"] < 360.0
    assert any("node-08" in n and "not judged" in n for n in m.notes), m.notes
    errors = next(v for v in verdicts if v.metric == "NCCL errors")
    assert errors.subject == "node-07" and "Got completion with error 12" in (errors.detail or "")


def test_a_run_where_nothing_failed_and_a_nodes_network_is_unjudged_is_an_error_naming_it(tmp_path):
    a = _two_nodes(tmp_path, 0.001)   # 1 GiB in 1 ms: busbw above the floor; no NCCL error
    with pytest.raises(HarnessError, match="not judged: no network line read from the NCCL log of node-08"):
        collectives.judge(a, Rules({"busbw": FLOOR}, expect=H100, multi_node=True))


def test_p2p_without_a_log_does_not_hide_a_failed_busbw(tmp_path):
    a = _two_nodes(tmp_path, 0.1)
    off = {"log": None, "why_not": "NCCL_DEBUG set by the user: NCCL's log not read"}
    a = Answers(a.check, [{**r, "nccl": off} for r in a.per_rank], a.ranks, "nccl")
    m, verdicts = collectives.judge(a, Rules({"busbw": FLOOR}, expect={"p2p": True}))
    assert [(v.metric, v.passed) for v in verdicts if not v.passed] == [("busbw", False)]
    assert any(n.startswith("P2P between GPUs is not judged: NCCL_DEBUG set by the user") for n in m.notes)
    with pytest.raises(HarnessError, match="P2P between GPUs is not judged"):
        collectives.judge(Answers(a.check, [{**r, "rows": [{**r["rows"][0], "seconds": 0.001}]} for r in a.per_rank],
                                  a.ranks, "nccl"), Rules({"busbw": FLOOR}, expect={"p2p": True}))


def test_a_rank_whose_nccl_log_never_came_is_not_judged_never_read_on_its_siblings_lines(tmp_path):
    """Rank 1's NCCL_DEBUG_FILE was never written (or could not be read): its summary said `log: <path>` with
    nothing in it, so p2p was judged on rank 0's lines alone and rank 1's GPUs passed unseen. Now the item names
    it, not judged, where an expectation reads the logs (p2p here); without one nothing is said."""
    (tmp_path / "rank0").mkdir()
    clean = rank_log(tmp_path / "rank0", ONE_NODE)
    missing = NcclLog(tmp_path / "never-written.log")
    missing.read("all_reduce")
    assert missing.summary()["unread"] == f"NCCL wrote no log at {tmp_path / 'never-written.log'}"
    comm = describe("nccl", [clean, {"nccl": missing.summary()}], [{"host": "node-07"}, {"host": "node-08"}], None, {})
    assert comm["unread_logs"] == [{"rank": 1, "host": "node-08", "why": missing.summary()["unread"]}]
    _, unjudged = collectives.nccl_verdicts("all_reduce", comm, Rules({}, expect={"p2p": True}), ["node-07", "node-08"])
    assert any(u.startswith("NCCL's log of rank 1 (node-08) was not read (NCCL wrote no log at ") for u in unjudged)
    assert collectives.nccl_verdicts("all_reduce", comm, Rules({}), ["node-07", "node-08"])[1] == []
    (tmp_path / "never-written.log").write_text("late\n")  # read once after all: nothing is said of it any more
    missing.read("all_reduce")
    assert "unread" not in missing.summary()
