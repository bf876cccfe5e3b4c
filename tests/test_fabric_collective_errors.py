"""The collectives judge: NCCL's own errors fail a single-node run too; the network between nodes stays
multi-node. Rank logs are real captures (tests/fixtures/nccl-debug/, source on line 1), edited."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from clustercheck.fabric.comm import describe
from clustercheck.kinds.base import Rules
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
    verdicts = collectives.nccl_verdicts("all_reduce", comm, rules, ["node-07"] * 8)
    assert [(v.metric, v.passed, v.subject) for v in verdicts] == [("NCCL errors", False, "node-07")]
    assert "Cuda failure 'peer access is not supported" in (verdicts[0].detail or "")
    assert "GPU [7]" in (verdicts[0].detail or "")


def test_an_nccl_warn_is_named_by_the_rank_whose_log_said_it(tmp_path):
    (tmp_path / "rank0").mkdir()
    clean, warned = rank_log(tmp_path / "rank0", ONE_NODE), rank_log(tmp_path, ONE_NODE, P2P_WARN)
    comm = describe("nccl", [clean, warned], [{"host": "node-07"}, {"host": "node-07"}], None, {})
    verdicts = collectives.nccl_verdicts("all_reduce", comm, Rules({}), ["node-07"] * 2)
    assert [(v.metric, v.passed, v.subject) for v in verdicts] == [("NCCL errors", False, "node-07")]
    assert "on node-07 GPU [7] (rank 1)" in (verdicts[0].detail or "")


def test_a_clean_single_node_log_gives_no_transport_verdict(tmp_path):
    comm = describe("nccl", [rank_log(tmp_path, ONE_NODE)], [{"host": "node-07"}], None, {})
    assert collectives.nccl_verdicts("all_reduce", comm, Rules({}, expect={"net": "IB"}), ["node-07"] * 8) == []


def test_shm_between_gpus_fails_p2p_in_the_collectives_judge_naming_rank_and_host(tmp_path):
    comm = describe("nccl", [rank_log(tmp_path, ONE_NODE)], [{"host": "node-07"}], None, {})
    verdicts = collectives.nccl_verdicts("all_reduce", comm, Rules({}, expect={"p2p": True}), ["node-07"] * 8)
    assert [(v.metric, v.passed, v.subject) for v in verdicts] == [("P2P between GPUs", False, "node-07")]
    assert "SHM between GPUs on node-07 (rank 0)" in (verdicts[0].detail or "")
    assert collectives.nccl_verdicts("all_reduce", comm, Rules({}), ["node-07"] * 8) == []  # not expected


def test_the_nvlink_profiles_expect_p2p():
    from clustercheck.judging import thresholds

    for name in ("a100-sxm-8x", "b200-8x", "h100-sxm-8x", "h200-sxm-8x"):
        assert thresholds.load_profile(ROOT / "thresholds" / f"{name}.yaml").expect.get("p2p") is True, name
    for name in ("a40-nvbridge-8x", "mi300x-8x", "h100-sxm-1x"):  # PCIe pairs, xGMI, one GPU: not promised
        assert thresholds.load_profile(ROOT / "thresholds" / f"{name}.yaml").expect.get("p2p") is None, name
