"""What the library said it did: the rank-side NCCL log reader (measure/nccl_log.py) fed with real
captured NCCL logs, the merged `comm` block (comm.py), and the gloo path end to end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clustercheck.fabric import comm
from clustercheck.measure.nccl_log import SUBSYS, NcclLog
from clustercheck.run.pool import PoolKey
from clustercheck.run.pools import PoolManager
from evidence import text as shared_text

LOGS = Path(__file__).parent / "fixtures" / "nccl-debug"


def _log(name: str) -> str:
    return (LOGS / name).read_text()


def _configured(tmp_path: Path, mode: str = "tuning") -> tuple[NcclLog, dict[str, str]]:
    env: dict[str, str] = {"PATH": "/bin"}
    return NcclLog.configure(env, mode, str(tmp_path), "pool1-nccl-rank0.1.log"), env


def test_configure_points_nccl_at_a_file_in_the_log_dir(tmp_path: Path) -> None:
    log, env = _configured(tmp_path, "init")
    assert env["NCCL_DEBUG"] == "INFO" and env["NCCL_DEBUG_SUBSYS"] == "INIT,ENV,NET" == SUBSYS["init"]
    assert env["NCCL_DEBUG_FILE"] == str(tmp_path / "pool1-nccl-rank0.1.log") == str(log.path)
    _, env = _configured(tmp_path, "tuning")
    assert env["NCCL_DEBUG_SUBSYS"] == "INIT,ENV,NET,TUNING"


@pytest.mark.parametrize("var", ["NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE"])
def test_the_users_own_nccl_debug_settings_are_left_alone(tmp_path: Path, var: str) -> None:
    env = {var: "WARN"}
    log = NcclLog.configure(env, "tuning", str(tmp_path), "x.log")
    assert env == {var: "WARN"} and log.path is None
    assert log.summary() == {"log": None, "why_not": f"{var} set by the user: NCCL's log not read"}
    assert log.read("all_reduce") is None


def test_off_sets_nothing_and_a_missing_dir_falls_back_to_tmp(tmp_path: Path) -> None:
    env: dict[str, str] = {}
    assert NcclLog.configure(env, "off", str(tmp_path), "x.log").path is None and env == {}
    log = NcclLog.configure(env, "init", str(tmp_path / "not-on-this-node"), "x.log")
    assert log.path is not None and log.path.parent.is_dir() and log.path.parent != tmp_path / "not-on-this-node"


def test_a_stale_file_of_the_same_name_is_not_read(tmp_path: Path) -> None:
    (tmp_path / "pool1-nccl-rank0.1.log").write_text(_log("nccl-1752-h200-64node-tuning-named.txt"))
    log, _ = _configured(tmp_path)
    assert log.read("all_reduce") is None and log.versions == []


def test_each_read_takes_only_what_nccl_wrote_since_the_last(tmp_path: Path) -> None:
    """The tuning pass reads after each call: lines are attributed to the call that wrote them."""
    log, _ = _configured(tmp_path)
    lines = [ln for ln in _log("nccl-1752-h200-64node-tuning-named.txt").splitlines() if "Bytes -> Algo" in ln]
    assert len(lines) == 2
    with log.path.open("a", buffering=1) as fh:  # line-buffered: NCCL writes its debug file unbuffered
        fh.write(lines[0] + "\n")
        assert log.read("all_reduce") == "Tree/LL128"
        fh.write(lines[1] + "\n")
        assert log.read("all_reduce") == "NVLSTree/Simple"
        assert log.read("all_reduce") is None  # nothing new
        fh.write(lines[0][:40])  # a line NCCL is still writing is left for the next read
        fh.flush()
        assert log.read("all_reduce") is None
        fh.write(lines[0][40:] + "\n")
        fh.flush()
        assert log.read("all_reduce") == "Tree/LL128"


def test_a_choice_for_another_collective_is_not_this_ones(tmp_path: Path) -> None:
    log, _ = _configured(tmp_path)
    log.path.write_text(_log("nccl-1752-h200-64node-tuning-named.txt"))
    assert log.read("all_gather") is None


def test_nameless_tuning_lines_take_the_collective_that_ran(tmp_path: Path) -> None:
    """NCCL 2.20-2.22 print no collective name; the tuning pass knows which one it just ran."""
    log, _ = _configured(tmp_path)
    text = _log("nccl-1453-h100-2node-tuning-unnamed.txt")
    log.path.write_text(text)
    label = log.read("all_reduce")
    assert label is not None and label.split("/")[0] in ("Ring", "Tree", "NVLS", "NVLSTree", "CollNetDirect")
    summary = log.summary()
    assert "NET/IBext_v8" in summary["transports"]


def test_summary_keeps_versions_transports_and_env_across_reads(tmp_path: Path) -> None:
    """Init lines come once (at init, at the first connect); later reads add to them, never forget."""
    log, _ = _configured(tmp_path, "init")
    log.path.write_text(shared_text("nccl-tests", "allreduce-p3dn-2node-efa-nccl-debug-info.txt"))
    assert log.read("all_reduce") is None  # NCCL 2.4.8 prints no tuning line: nothing invented
    with log.path.open("a") as fh:
        fh.write(_log("nccl-892-h800-algo-env-p2p.txt"))
    log.read("all_reduce")
    log.read("all_reduce")
    s = log.summary()
    assert s["versions"] == ["2.4.8+cuda10.0"] and s["networks"] == ["OFI provider efa"]
    assert s["transports"] == ["P2P"] and s["shm_between_gpus"] is False
    assert s["env"] == {"NCCL_TREE_THRESHOLD": "0", "NCCL_ALGO": "Tree,Ring,,CollnetDirect,CollnetChain,NVLS"}


def test_shm_between_gpus_is_carried_into_the_comm_block(tmp_path: Path) -> None:
    log, _ = _configured(tmp_path, "init")
    log.path.write_text(_log("deepseek-coder-v2-29-8xa100pcie-shm.txt"))
    log.read("all_reduce")
    block = comm.describe("nccl", [{"nccl": log.summary()}], [{"nccl": "2.20.5"}], None, {})
    assert block["shm_between_gpus"] is True and "SHM" in block["transports"]
    assert "SHM between GPUs" in comm.line(block)


def test_describe_merges_ranks_and_labels_each_size() -> None:
    ranks = [{"nccl": {"log": "/l/0", "versions": ["2.21.5+cuda12.4"], "transports": ["P2P"],
                       "shm_between_gpus": False, "nvls_capable": True, "env": {}, "networks": []}},
             {"nccl": {"log": "/l/1", "versions": ["2.21.5+cuda12.4"], "transports": ["NET/IB"],
                       "shm_between_gpus": False, "nvls_capable": True, "env": {}, "networks": ["IB"]}}]
    tuned = [{"rows": [{"size": 8, "placement": "in", "algo": "Ring/LL"},
                       {"size": 1 << 30, "placement": "in", "algo": "NVLS/Simple"}]},
             {"rows": [{"size": 8, "placement": "in", "algo": None},
                       {"size": 1 << 30, "placement": "in", "algo": None}]}]
    block = comm.describe("nccl", ranks, [{"nccl": "2.21.5"}] * 2, tuned, {})
    assert block["version"] == "2.21.5" and block["transports"] == ["NET/IB", "P2P"]
    assert block["algorithms"] == {"8/in": "Ring/LL", f"{1 << 30}/in": "NVLS/Simple"}
    assert block["nvls"] == "used" and block["networks"] == ["IB"]
    rows = [{"size": 8, "placement": "in"}, {"size": 1 << 30, "placement": "in"}, {"size": 64, "placement": "in"}]
    comm.tag_rows(rows, block["algorithms"])
    assert [r["algo"] for r in rows] == ["Ring/LL", "NVLS/Simple", None]
    assert comm.line(block) == "NCCL 2.21.5 · transports NET/IB, P2P · network IB · NVLS used"


@pytest.mark.parametrize(("check_env", "nccl_env", "capable", "algos", "label"), [
    ({"NCCL_NVLS_ENABLE": "0"}, {}, True, {"8/in": "Ring/LL"}, "off (NCCL_NVLS_ENABLE=0)"),
    ({}, {"NCCL_NVLS_ENABLE": "0"}, None, {}, "off (NCCL_NVLS_ENABLE=0)"),
    ({}, {}, True, {"8/in": "NVLSTree/Simple"}, "used"),
    ({}, {}, True, {"8/in": "Ring/LL"}, "available, not chosen"),
    ({}, {}, True, {}, "available"),
    ({}, {}, False, {"8/in": "Ring/LL"}, "not available"),
    ({}, {}, None, {}, "unknown"),
])
def test_nvls_label(check_env: dict, nccl_env: dict, capable: bool | None, algos: dict, label: str) -> None:
    assert comm.nvls_label(check_env, nccl_env, capable, algos) == label


def test_no_log_says_why() -> None:
    block = comm.describe("nccl", [{"nccl": {"log": None, "why_not": "NCCL_DEBUG set by the user: NCCL's log "
                                                                       "not read"}}], [{}], None, {},
                          tuning_error="the tuning pass failed, so no algorithm is known: rank 1 raised X")
    assert block["version"] is None and block["algorithms"] == {}
    assert comm.line(block) == ("NCCL · NVLS unknown · NCCL_DEBUG set by the user: NCCL's log not read · "
                                "the tuning pass failed, so no algorithm is known: rank 1 raised X")


def test_gloo_says_only_its_name() -> None:
    assert comm.describe("gloo", [{"rows": []}], [{}], None, {}) == {"library": "gloo"}
    assert comm.line({"library": "gloo"}) == "gloo"


@pytest.mark.pool
def test_the_tuning_pass_runs_each_size_once_on_real_ranks(tmp_path: Path) -> None:
    """The rank side of the pass with real gloo ranks: one row per size and placement, no timing, no
    label (gloo has no NCCL log); the pool stays usable for the timed task after it."""
    pools = PoolManager(tmp_path / "logs")
    try:
        pool = pools.get(PoolKey("gloo", 2))
        params = {"sizes": [1024, 1 << 20], "dtype": "float32", "warmup": 1, "iters": 2, "check_iters": 1,
                  "placements": ["out", "in"], "judge_at": 1 << 20}
        tuned = pool.run("all_gather", {**params, "tuning_pass": True}, 60)
        assert [[(r["size"], r["placement"], r["algo"]) for r in t["rows"]] for t in tuned] == [
            [(1024, "out", None), (1024, "in", None), (1 << 20, "out", None), (1 << 20, "in", None)]] * 2
        assert all(t["nccl"] is None for t in tuned)
        timed = pool.run("all_gather", params, 60)
        assert all(row["wrong"] == 0 and "nccl" not in t for t in timed for row in t["rows"])
    finally:
        pools.close()


def test_a_gloo_run_records_its_library_in_every_report(pytester: pytest.Pytester) -> None:
    (pytester.path / "th").mkdir()
    (pytester.path / "th" / "cpu.yaml").write_text(
        "platform: cpu\ndetect: {gpu_count: 0}\nchecks:\n  ar: {busbw: {limit: '>= 0.0001', unit: GB/s}}\n")
    (pytester.path / "s.yaml").write_text(
        "checks:\n  - id: ar\n    measure: all_reduce\n    params: {sizes: [64KiB], iters: 2, warmup: 1}\n")
    res = pytester.runpytest("s.yaml", "--thresholds", "th", "--cc-out", "out", "--platform", "cpu")
    res.assert_outcomes(passed=1)
    out = pytester.path / "out" / "latest"
    result = json.loads((out / "results.json").read_text())["results"][0]
    assert result["comm"] == {"library": "gloo"}
    assert '<property name="comm" value="gloo"' in (out / "junit.xml").read_text()
    assert '<p class="small comm">gloo' in (out / "report.html").read_text()
    pools = [json.loads(line) for line in (out / "run.jsonl").read_text().splitlines() if '"type": "pool"' in line]
    assert [p["nccl_log"] for p in pools] == ["off"]
