"""The native tools of the fabric and of storage, judged per NIC and per GPU: perftest's ib_write_bw and
NVIDIA's gdsio, on real captures (each fixture names its source), through the offline probes and through
the kinds' judges as a run calls them; and NCCL's transport as a live multi-node collective asserts it,
from its ranks' own NCCL logs (real captures read by the rank-side reader)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from clustercheck.cli import main
from clustercheck.errors import HarnessError, Skip
from clustercheck.fabric.comm import describe
from clustercheck.kinds.base import Answers, CheckSpec, Rules
from clustercheck.kinds.collectives import transport_verdicts
from clustercheck.kinds.gdsio import judge as judge_gdsio
from clustercheck.kinds.ib_write_bw import judge as judge_ib_write_bw
from clustercheck.measure.nccl_log import NcclLog
from evidence import TOOLS

IBW = TOOLS / "ib_write_bw"
GDS = TOOLS / "gdsio"
LOGS = Path(__file__).parent / "fixtures" / "nccl-debug"


def _probe(capsys: pytest.CaptureFixture[str], name: str, path: Path, *expect: str) -> tuple[int, str]:
    args = ["probe", name, "--input", str(path)]
    for e in expect:
        args += ["--expect", e]
    code = main(args)
    return code, capsys.readouterr().out


# -- offline: the probes -------------------------------------------------------------------------------

def test_ib_write_bw_probe_judges_the_largest_size_per_nic(capsys):
    code, out = _probe(capsys, "ib-write-bw", IBW / "roce-mlx5_0-all-sizes-gpu-operator-docs.txt", "ib_write_bw_min=90")
    assert code == 0 and "PASS mlx5_0: bandwidth: BW average 92.39 Gb/s at 8388608 B (RDMA_Write BW Test, link " \
                         "Ethernet); floor 90 Gb/s (ib_write_bw_min)" in out
    code, out = _probe(capsys, "ib-write-bw", IBW / "roce-mlx5_0-all-sizes-gpu-operator-docs.txt", "ib_write_bw_min=95")
    assert code == 1 and "FAIL mlx5_0: bandwidth" in out
    code, out = _probe(capsys, "ib-write-bw", IBW / "roce-mlx5_0-all-sizes-gpu-operator-docs.txt")
    assert code == 5 and "NOT JUDGED mlx5_0: bandwidth: not judged: no floor given" in out  # nothing judged


def test_ib_write_bw_in_mib_per_second_is_read_as_gbps_and_a_cut_table_fails(capsys):
    # MB/sec in perftest is MiB/s (src/perftest_parameters.c: format_factor 0x100000): 23240.68 MiB/s = 194.96 Gb/s
    code, out = _probe(capsys, "ib-write-bw", IBW / "loopback-ib0-all-sizes-interleaved-superbench.txt",
                       "ib_write_bw_min=190")
    assert code == 0 and "BW average 194.96 Gb/s at 8388608 B" in out
    code, out = _probe(capsys, "ib-write-bw", IBW / "dgx-spark-roce-run-infinitely-client1.txt", "ib_write_bw_min=90")
    assert code == 1 and "FAIL rocep1s0f0: run: the table has no closing line" in out
    assert "PASS rocep1s0f0: bandwidth: BW average 92.56 Gb/s at 65536 B" in out  # the worst of its repeated readings


def test_gdsio_probe_judges_each_gpu_and_shows_the_host_memory_path_beside_it(capsys):
    code, out = _probe(capsys, "gdsio", GDS / "wrx90-2gpu-raid0-write-gpud-cpuonly-stelline.txt", "gdsio_write_min=24")
    assert code == 0, out
    assert "PASS GPU0: write GPUDirect: WRITE GPUD 25.11 GiB/s, 1 thread(s), 38738 us average on /mnt/nvme-raid/test.bin " \
           "(output line 2); through host memory CPUONLY 25.78 GiB/s; floor 24 GiB/s (gdsio_write_min)" in out
    code, out = _probe(capsys, "gdsio", GDS / "asus-4gpu-raid0-write-gpud-cpuonly-stelline.txt", "gdsio_write_min=23")
    failed = [ln for ln in out.splitlines() if ln.startswith("FAIL")]
    assert code == 1 and len(failed) == 3 and all("22." in ln for ln in failed), failed  # 22.02, 22.82, 22.87 GiB/s
    code, out = _probe(capsys, "gdsio", GDS / "asus-4gpu-raid0-write-gpud-cpuonly-stelline.txt")
    assert code == 5 and out.count("NOT JUDGED") == 8 and "no floor given (--expect gdsio_write_min=N" in out
    code, out = _probe(capsys, "gdsio", GDS / "asus-4gpu-raid0-write-gpud-cpuonly-stelline.txt", "gdsio_read_min=20")
    assert code == 5  # a write floor is what these writes need; a read floor judges nothing here


# -- in a run: the kinds' judges -----------------------------------------------------------------------

def _answers(measure: str, result: dict[str, Any], params: dict[str, Any] | None = None) -> Answers:
    check = CheckSpec("c", measure, "node", params or {}, (), 60, "", "s.yaml", 1)
    return Answers(check, [result, {}], [{"host": "n1"}, {"host": "n1"}], "nccl")


def _client(path: Path, returncode: int = 0) -> dict[str, Any]:
    return {"outcome": "ran", "stdout": path.read_text(), "returncode": returncode, "timed_out": False}


def test_ib_write_bw_kind_judges_each_nic_against_its_port_rate_or_the_expectation():
    runs = [{"device": "mlx5_0", "port": 1, "rate_gbps": 100.0, "up": True,
             "client": _client(IBW / "roce-mlx5_0-all-sizes-gpu-operator-docs.txt"), "server": {}},
            {"device": "mlx5_1", "port": 1, "rate_gbps": 200.0, "up": True,
             "client": _client(IBW / "roce-cx5-100g-deepops.txt"), "server": {}}]
    result = {"host": "n1", "binary": "ib_write_bw", "outcome": "ran", "runs": runs}
    m, verdicts = judge_ib_write_bw(_answers("ib_write_bw", result), Rules({}))
    assert [(v.subject, v.passed, round(v.rule.value, 1)) for v in verdicts] == [("mlx5_0", True, 90.0),  # type: ignore[union-attr]
                                                                                 ("mlx5_1", False, 180.0)]
    assert m.subjects["mlx5_1"]["line_fraction"] == pytest.approx(92.40 / 200)
    _, verdicts = judge_ib_write_bw(_answers("ib_write_bw", result), Rules({}, expect={"ib_write_bw_min": 92.39}))
    assert [v.passed for v in verdicts] == [True, True]
    with pytest.raises(Skip, match="not found on PATH"):
        judge_ib_write_bw(_answers("ib_write_bw", {"binary": "ib_write_bw", "outcome": "missing",
                                                   "reason": "ib_write_bw (perftest) not found on PATH on n1"}), Rules({}))
    broken = {**result, "runs": [{**runs[0], "client": {**_client(IBW / "roce-cx5-100g-deepops.txt"), "stdout": "oops\n",
                                                          "returncode": 1}}]}
    with pytest.raises(HarnessError, match="without a bandwidth table"):
        judge_ib_write_bw(_answers("ib_write_bw", broken), Rules({}))


def test_the_loopbacks_server_side_is_judged_beside_its_client_never_dropped():
    # perftest prints a table and its errors on both sides of the loopback (the superbench capture interleaves
    # them); a run judged the client's stdout alone, so a server that read less, or failed, passed. The server
    # here is the real client capture with its 8 MiB row's average edited from 92.39 to 45.10 Gb/s, then one
    # whose stderr says what perftest's server prints when its peer is lost
    capture = IBW / "roce-mlx5_0-all-sizes-gpu-operator-docs.txt"
    halved = capture.read_text().replace("8388608    5000             92.39              92.39",
                                         "8388608    5000             92.39              45.10")
    assert halved != capture.read_text()

    def judged(server: dict[str, Any]) -> list[tuple[str, str, bool | None, str]]:
        run = {"device": "mlx5_0", "port": 1, "rate_gbps": 100.0, "up": True, "client": _client(capture),
               "server": server}
        result = {"host": "n1", "binary": "ib_write_bw", "outcome": "ran", "runs": [run]}
        _, verdicts = judge_ib_write_bw(_answers("ib_write_bw", result), Rules({}, expect={"ib_write_bw_min": 90}))
        return [(v.subject or "", v.metric, v.passed, f"{v.measured} {v.worst or v.detail or ''}") for v in verdicts]

    ok = judged({"outcome": "ran", "returncode": 0, "stdout": capture.read_text(), "stderr_tail": ""})
    assert [(s, m, p) for s, m, p, _ in ok] == [("mlx5_0", "bw_gbps", True)]
    low = judged({"outcome": "ran", "returncode": 0, "stdout": halved, "stderr_tail": ""})
    assert [(s, m, p) for s, m, p, _ in low] == [("mlx5_0", "bw_gbps", False)]  # passed at 92.39 before
    assert low[0][3].startswith("45.1 the server's reading 45.10 Gb/s (client's 92.39)"), low
    lost = judged({"outcome": "ran", "returncode": 1, "stdout": "",
                   "stderr_tail": " Couldn't read remote address\n Failed to exchange data between server and clients\n"})
    assert [(s, m, p) for s, m, p, _ in lost] == [("mlx5_0", "run", False), ("mlx5_0", "bw_gbps", True)]
    assert lost[0][3] == "failed server: stderr: Couldn't read remote address, exited with status 1"


def _gds_runs(path: Path) -> list[dict[str, Any]]:
    """Each result line of a real capture as the rank would return it: one gdsio run per GPU and direction."""
    lines = path.read_text().splitlines()
    out = []
    for i, line in enumerate(lines):
        if line.startswith("IoType: WRITE XferType: GPUD"):
            gpu = int(lines[i - 1].split(" -d ")[1].split()[0])
            out.append({"gpu": gpu, "io": "write", "outcome": "ran", "stdout": line + "\n", "returncode": 0,
                        "timed_out": False})
    return out


def test_gdsio_kind_judges_each_gpu_against_the_storage_floor_and_never_passes_without_one():
    result = {"host": "n1", "binary": "gdsio", "outcome": "ran", "gpus": 2,
              "runs": _gds_runs(GDS / "wrx90-2gpu-raid0-write-gpud-cpuonly-stelline.txt")}
    m, verdicts = judge_gdsio(_answers("gdsio", result), Rules({}, expect={"gdsio_write_min": 25.05}))
    assert [(v.subject, v.passed) for v in verdicts] == [("GPU0", True), ("GPU1", False)]
    assert m.subjects == {"GPU0": {"write_gibs": 25.112706}, "GPU1": {"write_gibs": 25.034021}}
    with pytest.raises(HarnessError, match="not judged: no floor given"):
        judge_gdsio(_answers("gdsio", result), Rules({}))
    with pytest.raises(Skip, match="CLUSTERCHECK_GDS_DIR is not set"):
        judge_gdsio(_answers("gdsio", {"binary": "gdsio", "outcome": "missing",
                                       "reason": "$CLUSTERCHECK_GDS_DIR is not set on n1"}), Rules({}))


def test_a_gpu_whose_gdsio_run_moved_nothing_gpudirect_fails_by_name_never_left_out():
    capture = GDS / "wrx90-2gpu-raid0-write-gpud-cpuonly-stelline.txt"
    runs = _gds_runs(capture)
    through_cpu = next(line for line in capture.read_text().splitlines()
                       if line.startswith("IoType: WRITE XferType: CPUONLY"))
    runs[1] = {**runs[1], "stdout": through_cpu + "\n"}  # GPU1 ran, exit 0, but through host memory
    result = {"host": "n1", "binary": "gdsio", "outcome": "ran", "runs": runs, "gpus": 2}
    m, verdicts = judge_gdsio(_answers("gdsio", result), Rules({}, expect={"gdsio_write_min": 5}))
    assert [(v.subject, v.metric, v.passed) for v in verdicts] == [("GPU0", "write_gibs", True),
                                                                   ("GPU1", "transfer", False)]
    assert verdicts[1].detail == "write: XferType CPUONLY, no GPUDirect transfer"  # GPU1 was left out before


# -- live: NCCL's transport from the ranks' own logs -----------------------------------------------------

def _rank_log(tmp_path: Path, name: str) -> dict[str, Any]:
    """What a rank returns after reading its NCCL_DEBUG_FILE (here a real capture in that file)."""
    path = tmp_path / name
    path.write_text((LOGS / name).read_text())
    log = NcclLog(path)
    log.read("all_reduce")
    return {"nccl": log.summary()}


def test_a_live_multinode_collective_asserts_the_transport_from_its_ranks_logs(tmp_path):
    per_rank = [_rank_log(tmp_path, "nv_peer_memory-56-ib-without-gdr-distance-socket-init.txt")]
    comm = describe("nccl", per_rank, [{"nccl": "2.4.7"}], None, {})
    assert set(comm["net"]) == {"master_node", "secondary_node"}
    verdicts, unjudged = transport_verdicts("fabric", comm, Rules({}, "thresholds/h100-sxm-8x.yaml expect",
                                                                  expect={"net": "IB", "gdr": True}, multi_node=True))
    assert unjudged == []
    assert [(v.metric, v.passed) for v in verdicts] == [("network", True), ("GPUDirect RDMA", False)]
    assert "GPU Direct RDMA Disabled for GPU 2[2] / HCA 0 (distance 3 >= 2)" in (verdicts[1].detail or "")
    assert verdicts[1].rule.origin == "thresholds/h100-sxm-8x.yaml expect"  # type: ignore[union-attr]


def test_a_ranks_network_facts_name_the_node_the_run_gave_it_not_the_hostname_nccl_printed(tmp_path):
    # NCCL prints the machine's hostname (swat1-04 in this capture); under Kubernetes that is the pod's
    # name, and under --hosts it need not be what --hosts said. The verdict names the run's node.
    rank = _rank_log(tmp_path, "nccl-1412-ib-without-gdrdma.txt")
    comm = describe("nccl", [rank], [{"host": "node-07", "nccl": "2.18.3"}], None, {})
    assert set(comm["net"]) == {"node-07"}
    verdicts, _ = transport_verdicts("fabric", comm, Rules({}, expect={"gdr": True}, multi_node=True))
    assert [(v.metric, v.passed) for v in verdicts] == [("GPUDirect RDMA", False)]
    assert "network channels without GDRDMA on node-07" in (verdicts[0].detail or "")
    assert "swat1-04" not in (verdicts[0].detail or "")
    unnamed = describe("nccl", [rank], [{}], None, {})  # a capture read offline keeps NCCL's name
    assert set(unnamed["net"]) == {"swat1-04"}


def test_a_live_collective_whose_nccl_log_was_not_read_or_shows_no_channels_is_not_judged(tmp_path):
    rules = Rules({}, expect={"net": "IB"}, multi_node=True)
    off = describe("nccl", [{"nccl": {"log": None, "why_not": "NCCL_DEBUG set by the user: NCCL's log not read"}}],
                   [{}], None, {})
    verdicts, unjudged = transport_verdicts("fabric", off, rules)
    assert verdicts == [] and "not judged: NCCL_DEBUG set by the user" in unjudged[0]
    blind = describe("nccl", [_rank_log(tmp_path, "nccl-892-h800-algo-env-p2p.txt")], [{}], None, {})
    verdicts, unjudged = transport_verdicts("fabric", blind, rules)
    assert verdicts == [] and "not judged: no channel lines" in unjudged[0]
    assert transport_verdicts("fabric", blind, Rules({}, multi_node=True)) == ([], [])  # nothing expected, nothing judged


def test_a_node_whose_log_shows_no_network_is_not_judged_though_the_other_used_ib(tmp_path):
    ib = _rank_log(tmp_path, "nccl-1412-ib-without-gdrdma.txt")
    quiet = _rank_log(tmp_path, "nccl-892-h800-algo-env-p2p.txt")  # a real log with no network line at all
    comm = describe("nccl", [ib, quiet], [{"host": "node-07", "nccl": "2.18.3"}, {"host": "node-08"}], None, {})
    rules = Rules({}, expect={"net": "IB"}, multi_node=True)
    verdicts, unjudged = transport_verdicts("fabric", comm, rules, ["node-07", "node-08"])  # it passed before,
    assert verdicts == []                                                                  # on node-07's lines
    assert "not judged: no network line read from the NCCL log of node-08" in unjudged[0]
    verdicts, unjudged = transport_verdicts("fabric", comm, rules, ["node-07"])
    assert [v.passed for v in verdicts] == [True] and unjudged == []


def test_a_node_whose_log_says_nothing_of_gdr_or_nics_is_not_judged_though_the_other_passed(tmp_path):
    # as the network above: GDR and NICs per node were judged on the nodes whose logs said something, and
    # node-08, whose real log has no network line, was left out of a pass on node-07's GDRDMA channels
    gdr = _rank_log(tmp_path, "nccl-707-a100-four-nics-gdrdma.txt")
    quiet = _rank_log(tmp_path, "nccl-892-h800-algo-env-p2p.txt")
    comm = describe("nccl", [gdr, quiet], [{"host": "node-07"}, {"host": "node-08"}], None, {})
    for expect, what in (({"gdr": True}, "GPUDirect RDMA"), ({"nics": 4}, "NICs per node")):
        rules = Rules({}, expect=expect, multi_node=True)
        verdicts, unjudged = transport_verdicts("fabric", comm, rules, ["node-07", "node-08"])
        assert verdicts == [], what  # passed before, on node-07's lines alone
        assert unjudged[0].startswith(f"NCCL's {what} between nodes is not judged: ") and \
            "from the NCCL log of node-08 (" in unjudged[0] and "node-07" in unjudged[0]
        verdicts, unjudged = transport_verdicts("fabric", comm, rules, ["node-07"])
        assert [(v.metric, v.passed) for v in verdicts] == [(what, True)] and unjudged == []
    # a failure on the node that spoke still fails: silence elsewhere does not hide it
    verdicts, unjudged = transport_verdicts("fabric", comm, Rules({}, expect={"gdr": False, "nics": 8}, multi_node=True),
                                            ["node-07", "node-08"])
    assert [(v.metric, v.passed) for v in verdicts] == [("GPUDirect RDMA", False), ("NICs per node", False)]
    assert unjudged == []


def test_a_live_collective_whose_nccl_log_shows_an_ib_completion_error_fails_by_node(tmp_path):
    # nccl-707-a100-four-nics-gdrdma.txt edited: the failure its issue's title quotes appended, as NCCL prints it
    # on the same rank, then the error-return trace (tests/test_probe_nccl_log.py reads the same edit offline)
    (tmp_path / "edited.txt").write_text(
        (LOGS / "nccl-707-a100-four-nics-gdrdma.txt").read_text()
        + "10-90-43-152:120890:121560 [0] transport/net_ib.cc:818 NCCL WARN NET/IB : Got completion with error 4, "
          "opcode 8983, len 0, vendor err 81\n"
        + "10-90-43-152:120890:121560 [0] NCCL INFO transport/net.cc:1067 -> 6\n")
    log = NcclLog(tmp_path / "edited.txt")
    log.read("all_reduce")
    rank = {"nccl": log.summary()}
    comm = describe("nccl", [rank], [{"host": "node-07", "nccl": "2.10.3"}], None, {})
    for rules in (Rules({}, expect={"net": "IB", "gdr": True}, multi_node=True), Rules({}, multi_node=True)):
        verdicts, _ = transport_verdicts("fabric", comm, rules, ["node-07"])
        assert (verdicts[0].metric, verdicts[0].passed, verdicts[0].subject) == ("NCCL errors", False, "node-07")
        assert "\"NET/IB : Got completion with error 4, opcode 8983, len 0, vendor err 81\"" in (verdicts[0].detail or "")
