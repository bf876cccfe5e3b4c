"""A typed nested `--expect topology.KEY=...` overrides that one key of the profile's `topology:` block and
keeps its others (probe and run merge alike, judging/expect.py `merged`): replacing the whole block dropped
the profile's gpu_gpu NV18 unseen, and a GPU pair at NV4 passed. `topology={}` expects nothing: refused."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from evidence import TOOLS

from clustercheck.exitcodes import Exit
from clustercheck.judging.expect import merged, parse_expect_args
from clustercheck.judging.profiles import search_path

REPO = Path(__file__).resolve().parent.parent
NV4_PAIR = TOOLS / "nvidia-smi-topo" / "3x-rtxa6000-nv4-pair-plus-node-ansi-escapes.txt"  # GPU0-GPU1 NV4, no NIC


def probe(*args: object) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "CLUSTERCHECK_THRESHOLDS"}
    return subprocess.run([sys.executable, "-m", "clustercheck", "probe", *map(str, args)], capture_output=True,
                          text=True, cwd=REPO, env=env, timeout=120)


def test_a_typed_nested_topology_key_keeps_the_profiles_other_topology_keys_through_the_cli() -> None:
    p = probe("topo", "--input", NV4_PAIR, "--platform", "h100-sxm-8x", "--expect", "topology.gpu_nic=[PIX,PXB,NODE,SYS]")
    assert p.returncode == Exit.FAILED, (p.stdout, p.stderr)
    lines = p.stdout.splitlines()
    # the profile's gpu_gpu NV18 still judges every pair (it passed as "GPU pairs ..." before) ...
    assert "FAIL GPU0-GPU1: GPU link level: NV4, expected NV18" in lines, p.stdout
    assert "FAIL GPU0-GPU2: GPU link level: NODE, expected NV18" in lines, p.stdout
    assert not any(line.startswith("PASS GPU pairs") for line in lines), p.stdout
    # ... and the typed gpu_nic judges too: this capture has no NIC
    assert "FAIL GPU0: nearest NIC: no NIC in the matrix" in lines, p.stdout


def test_a_typed_empty_topology_mapping_is_refused_in_one_line_never_a_wiped_block() -> None:
    p = probe("topo", "--input", NV4_PAIR, "--platform", "h100-sxm-8x", "--expect", "topology={}")
    assert p.returncode == Exit.BAD_INPUT, (p.stdout, p.stderr)
    (line,) = [line for line in p.stderr.splitlines() if line.strip()]
    assert "topology" in line and "no level given (empty mapping)" in line and "gpu_gpu" in line, line
    assert "PASS" not in p.stdout


def test_the_merge_the_run_uses_keeps_the_profiles_topology_and_replaces_only_the_typed_keys() -> None:
    """run/session.py judges a run against merged(profile.expect, --expect): the same function as probe."""
    profile = search_path(environ={}).load("h100-sxm-8x")
    assert profile.expect["topology"] == {"gpu_gpu": "NV18"}
    typed = parse_expect_args(["topology.gpu_nic=[PIX,PXB]", "gpu_count=4"])
    got = merged(profile.expect, typed)
    assert got["topology"] == {"gpu_gpu": "NV18", "gpu_nic": ["PIX", "PXB"]}
    assert got["gpu_count"] == 4 and got["nvlinks_per_gpu"] == profile.expect["nvlinks_per_gpu"]
    assert profile.expect["topology"] == {"gpu_gpu": "NV18"}  # the profile's own block is not changed
    over = merged(profile.expect, parse_expect_args(["topology.gpu_gpu=[NODE,SYS]"]))
    assert over["topology"] == {"gpu_gpu": ["NODE", "SYS"]}  # the same nested key: the typed one wins
    assert merged({}, typed)["topology"] == {"gpu_nic": ["PIX", "PXB"]}  # no profile block: the typed one


TOPO_SUITE = """\
suite: topo
description: the topology probe alone
checks:
  - {id: topology, measure: probe, params: {probe: topo}, description: GPU topology}
"""


def run_topo(tmp_path: Path, suite: str, *args: str) -> subprocess.CompletedProcess[str]:
    """A real local run of a topo probe check; `nvidia-smi topo -m` (which this machine lacks) prints the
    3-GPU capture through a stand-in on PATH."""
    (tmp_path / "bin").mkdir()
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.write_text(f'#!/bin/sh\nif [ "$1 $2" = "topo -m" ]; then cat {NV4_PAIR}; exit 0; fi\n'
                   f'echo "nvidia-smi stand-in: topo -m only" >&2; exit 9\n')
    smi.chmod(0o755)
    (tmp_path / "topo.yaml").write_text(suite)
    env = {k: v for k, v in os.environ.items() if k not in ("CC_STORE_ADDR", "CLUSTERCHECK_THRESHOLDS")}
    env["PATH"] = f"{tmp_path / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    return subprocess.run([sys.executable, "-m", "clustercheck", "run", "topo.yaml", "--platform", "h100-sxm-8x",
                           "--out", "runs", "--no-progress", *args],
                          capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)


def judged_nv18_and_gpu_nic(tmp_path: Path, p: subprocess.CompletedProcess[str]) -> None:
    assert p.returncode == Exit.FAILED, (p.stdout[-3000:], p.stderr[-3000:])
    (result,) = json.loads((tmp_path / "runs" / "latest" / "results.json").read_text())["results"]
    judged = {(v["subject"], v["metric"]): v for v in result["verdicts"]}
    pair = judged[("GPU0-GPU1", "GPU link level")]  # the profile's NV18: "PASS GPU pairs" before
    assert not pair["passed"] and pair["detail"] == "NV4, expected NV18", pair
    assert not any(subject == "GPU pairs" for subject, _ in judged), judged
    nic = judged[("GPU0", "nearest NIC")]  # the gpu_nic given beside it
    assert not nic["passed"] and "PIX" in nic["limit"], nic


def test_a_run_judges_the_profiles_gpu_gpu_beside_a_typed_gpu_nic(tmp_path: Path) -> None:
    p = run_topo(tmp_path, TOPO_SUITE, "--expect", "topology.gpu_nic=[PIX,PXB,NODE,SYS]")
    judged_nv18_and_gpu_nic(tmp_path, p)


OWN_GPU_NIC = """\
suite: topo
description: the topology probe with a gpu_nic of its own
checks:
  - id: topology
    measure: probe
    params: {probe: topo, expect: {topology: {gpu_nic: [PIX, PXB, NODE, SYS]}}}
    description: GPU topology
"""


def test_a_checks_own_topology_key_keeps_the_profiles_others(tmp_path: Path) -> None:
    """kinds/probe.py task(): a check's `params: {expect: {topology: {gpu_nic: ...}}}` dropped the profile's
    gpu_gpu the same way; the run's --expect of the topology keys it leaves (gpu_gpu) still reaches the judge."""
    judged_nv18_and_gpu_nic(tmp_path, run_topo(tmp_path, OWN_GPU_NIC))
    from clustercheck.kinds.probe import reads
    from clustercheck.suite.load import load_suite

    (check,) = load_suite(tmp_path / "topo.yaml", "topo.yaml").checks
    assert reads(check) == ("gpu_count", "topology.gpu_gpu", "topology.nvlink_pairs")


ALL_GATHER = TOOLS / "nccl-tests" / "allgather-8xa100-oldformat-validation0-superbench.txt"  # 223.39 GB/s, one node


def test_a_typed_floor_for_one_collective_keeps_the_profiles_floors_for_the_others_through_the_cli() -> None:
    """h100-sxm-8x's busbw_min is {all_reduce: 430, all_gather: 330, reduce_scatter: 330}: a typed
    busbw_min.all_reduce=100 replaced the whole mapping, and this all_gather capture read `not judged`."""
    p = probe("nccl-tests", "--input", ALL_GATHER, "--platform", "h100-sxm-8x", "--expect", "busbw_min.all_reduce=100")
    (busbw,) = [line for line in p.stdout.splitlines() if ": busbw: " in line]
    assert busbw.startswith("FAIL all_gather_perf: busbw: 223.39 / 230.07 GB/s") and \
        busbw.endswith("floor 330 GB/s (busbw_min.all_gather)"), p.stdout
    assert p.returncode == Exit.FAILED, (p.stdout, p.stderr)
    p = probe("nccl-tests", "--input", ALL_GATHER, "--platform", "h100-sxm-8x", "--expect", "busbw_min.all_gather=200")
    assert "PASS all_gather_perf: busbw:" in p.stdout and "floor 200 GB/s (busbw_min.all_gather)" in p.stdout, p.stdout


def test_busbw_floors_merge_by_collective_and_a_typed_number_replaces_them_all() -> None:
    profile = search_path(environ={}).load("h100-sxm-8x")
    floors = {"all_reduce": 430, "all_gather": 330, "reduce_scatter": 330}
    assert profile.expect["busbw_min"] == floors
    got = merged(profile.expect, parse_expect_args(["busbw_min.all_reduce=100", "busbw_min_multinode.all_gather=50"]))
    assert got["busbw_min"] == {**floors, "all_reduce": 100}
    assert got["busbw_min_multinode"] == {"all_gather": 50}  # no profile sets it: the typed mapping alone
    assert profile.expect["busbw_min"] == floors  # the profile's own block is not changed
    assert merged(profile.expect, parse_expect_args(["busbw_min=100"]))["busbw_min"] == 100  # one floor for every one
    # a profile's single number is its floor for every collective: a typed one replaces that collective's only
    one = merged({"busbw_min_multinode": 40}, parse_expect_args(["busbw_min_multinode={all_reduce: 45}"]))
    assert one["busbw_min_multinode"]["all_reduce"] == 45 and one["busbw_min_multinode"]["all_gather"] == 40


def test_a_typed_empty_busbw_mapping_is_refused_in_one_line_never_a_floor_changed_unseen() -> None:
    """Merged by collective, `busbw_min={}` would change no floor and be taken for one changed."""
    p = probe("nccl-tests", "--input", ALL_GATHER, "--platform", "h100-sxm-8x", "--expect", "busbw_min={}")
    assert p.returncode == Exit.BAD_INPUT, (p.stdout, p.stderr)
    (line,) = [line for line in p.stderr.splitlines() if line.strip()]
    assert "busbw_min: no floor given (empty mapping)" in line, line
    assert "busbw" not in p.stdout
