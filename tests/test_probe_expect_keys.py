"""`--expect KEY` a probe never reads is refused (one line, exit 4), never run and passed; and each probe's
`expect_keys` is what its judge() reads, found by judging every stored capture the probe parses with an
expectation mapping that records every key looked up in it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator, Mapping

import pytest

from evidence import FIXTURES, TOOLS

from clustercheck import probes
from clustercheck.judging.expect import EXPECT_KEYS, TOPOLOGY_KEYS, check_expect
from clustercheck.judging.fabric import expectations
from clustercheck.probes.base import ProbeParseError, ProbeSkip

REPO = Path(__file__).resolve().parent.parent
NVSMI_Q = TOOLS / "nvidia-smi-q" / "h100-80gb-hbm3-nvidia-smi-a-della.txt"
NVLINK = TOOLS / "nvlink-status" / "a100-sxm4-gpu7-nvlink-s-azure.txt"
TOPO = TOOLS / "nvidia-smi-topo" / "puget-wrx90-2gpu-phb-2nic.txt"
AMD_TOPO = TOOLS / "amd-smi" / "topology-8gpu-xgmi-changelog-6.1.txt"
INTERNAL = {"fabric_rule"}  # the CLI hands every probe the fabric rule under this key; no user types it
NESTED = {"topology": TOPOLOGY_KEYS}

# every key set, each to a value check_expect takes, so that the judges take the branches a value opens
FULL = check_expect({
    "gpu_count": 8, "gpu_model": "H100", "nvlinks_per_gpu": 18, "nvswitch_fabric": True,
    "topology": {"gpu_gpu": "NV18", "gpu_nic": ["PIX"]}, "acs_redirect": False, "pcie_gen": 5, "pcie_width": 16,
    "ib_rate_gbps": 400, "ib_ports": 8, "gds": True, "gds_compat_mode": False, "gpu_temp_max_c": 85,
    "driver_min": "535.104", "cuda_min": "12.2", "nccl_min": "2.18", "torch_min": "2.1",
    "nccl_env_allow": ["NCCL_DEBUG"], "busbw_min": 100, "busbw_min_multinode": 100, "nodes": 2,
    "fabric_gbps": 3200, "fabric_ports": ["mlx5_0"], "net": "IB", "gdr": True, "nics": 8, "p2p": True,
    "ib_write_bw_min": 90, "gdsio_read_min": 5, "gdsio_write_min": 5, "h2d_min": 20, "d2h_min": 20,
    "p2p_min": 100, "p2p_uniformity": 0.1}, "test")
FULL_PAIRS = {**FULL, "topology": {"nvlink_pairs": "NV4"}}  # topo reads gpu_gpu only where no pairs are bridged


class Recording(Mapping[str, Any]):
    """An expectation mapping that notes every key looked up in it (`topology.gpu_nic` for a nested one);
    iterating it would read every key at once, which the test refuses."""

    def __init__(self, data: Mapping[str, Any], seen: set[str], prefix: str = "") -> None:
        self.data, self.seen, self.prefix = data, seen, prefix

    def __getitem__(self, key: str) -> Any:
        self.seen.add(self.prefix + key)
        value = self.data[key]
        return Recording(value, self.seen, f"{self.prefix}{key}.") if isinstance(value, dict) else value

    def __contains__(self, key: object) -> bool:
        self.seen.add(self.prefix + str(key))
        return key in self.data

    def __iter__(self) -> Iterator[str]:
        self.seen.add(f"{self.prefix}*")
        return iter(self.data)

    def __len__(self) -> int:
        return len(self.data)


def extra_captures(name: str) -> list[str]:
    """Texts that open a branch no stored capture reaches: a gdsio read (the captures only write)."""
    if name == "gdsio":
        return [f.read_text().replace("IoType: WRITE", "IoType: READ") for f in sorted((TOOLS / "gdsio").glob("*.txt"))]
    return []


def read_keys(name: str) -> set[str]:
    probe, seen, parsed_any = probes.get(name), set[str](), False
    texts = [f.read_text(errors="replace") for f in sorted(FIXTURES.rglob("*.txt"))] + extra_captures(name)
    inputs: list[Any] = []
    for text in texts:
        try:
            inputs.append(probe.parse(text))
        except ProbeParseError:
            continue
    if name == "gds":  # the live path's "not installed", which no capture holds: gds reads `gds` there
        from clustercheck.probes.gds import Absent
        inputs.append(Absent("GPUDirect Storage is not installed"))
    for parsed in inputs:
        parsed_any = True
        for expect in ({}, FULL, FULL_PAIRS, {**FULL, **expectations(None)}):
            try:
                probe.judge(parsed, Recording(expect, seen))
            except (ProbeSkip, ProbeParseError):
                pass
    assert parsed_any, f"no capture under {FIXTURES} parses as {name}'s input"
    return seen - INTERNAL


def declared(name: str) -> set[str]:
    """What expect_keys promise: `topology` with every nested key, `topology.gpu_gpu` with its parent."""
    out: set[str] = set()
    for key in probes.get(name).expect_keys:
        top = key.split(".")[0]
        out |= {key, top} | ({f"{key}.{k}" for k in NESTED.get(key, ())})
    return out


@pytest.mark.parametrize("name", probes.NAMES)
def test_expect_keys_are_what_judge_reads(name: str) -> None:
    assert read_keys(name) == declared(name)


def test_every_declared_key_is_one_the_expect_parser_takes() -> None:
    for name in probes.NAMES:
        for key in probes.get(name).expect_keys:
            top, _, sub = key.partition(".")
            assert top in EXPECT_KEYS and (not sub or sub in NESTED[top]), (name, key)


def cc(*args: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "clustercheck", "probe", *map(str, args)], capture_output=True,
                          text=True, cwd=REPO, timeout=300)


def refused(out: subprocess.CompletedProcess[str]) -> str:
    """One line on stderr, exit 4, and nothing judged or printed before it."""
    assert out.returncode == 4, out.stdout + out.stderr
    assert out.stdout == "" and len(out.stderr.strip().splitlines()) == 1, out.stdout + out.stderr
    return out.stderr.strip().removeprefix("clustercheck: error: ")


@pytest.mark.parametrize("args, line", [
    (["ecc", "--input", NVSMI_Q, "--expect", "nvlinks_per_gpu=18"],
     "--expect nvlinks_per_gpu: probe ecc does not read it (it reads: gpu_count)"),
    (["pcie-link", "--input", NVSMI_Q, "--expect", "ib_ports=4"],
     "--expect ib_ports: probe pcie-link does not read it (it reads: pcie_gen, pcie_width, gpu_count)"),
    (["numa", "--input", TOPO, "--expect", "nvlinks_per_gpu=12"], "--expect nvlinks_per_gpu: probe numa does not "
                                                                  "read it (it reads: gpu_count)"),
    (["amd-smi", "--input", AMD_TOPO, "--expect", "topology.gpu_nic=PIX"],
     "--expect topology.gpu_nic: probe amd-smi does not read it (it reads: gpu_count, pcie_gen, pcie_width, "
     "gpu_temp_max_c, topology.gpu_gpu)"),
    (["amd-smi", "--input", AMD_TOPO, "--expect", "topology={gpu_gpu: XGMI, nvlink_pairs: NV4}"],
     "--expect topology.nvlink_pairs: probe amd-smi does not read it (it reads: gpu_count, pcie_gen, pcie_width, "
     "gpu_temp_max_c, topology.gpu_gpu)"),
    # one key read beside one not: still refused
    (["nvlink", "--input", NVLINK, "--expect", "nvlinks_per_gpu=12", "--expect", "pcie_gen=4"],
     "--expect pcie_gen: probe nvlink does not read it (it reads: nvlinks_per_gpu, gpu_count)"),
])
def test_a_typed_key_the_probe_never_reads_is_refused(args: list[object], line: str) -> None:
    assert refused(cc(*args)) == line


def test_probe_all_says_a_key_only_skipped_probes_read_judged_nothing() -> None:
    """`probe all` never judges busbw_min: nccl-tests, its only reader, judges a capture and skips live.
    The key is named NOT-JUDGED and the exit is never 0."""
    out = cc("all", "--expect", "busbw_min=400")
    assert out.returncode in (1, 3, 5), out.stdout + out.stderr
    assert ("NOT-JUDGED --expect busbw_min: every probe that reads it was skipped here (nccl-tests)"
            in out.stdout.splitlines()), out.stdout


def test_probe_all_beside_a_pass_is_exit_3(monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    """Real probes, the list cut to two so that no other probe's view of this machine decides the exit:
    env passes (no NCCL variable set), nccl-tests skips, and busbw_min was judged by nothing."""
    from clustercheck.cli import main
    from clustercheck.probes import run_all

    monkeypatch.setattr(run_all, "NAMES", ("env", "nccl-tests"))
    for name in [k for k in os.environ if k.startswith(("NCCL_", "CUDA_"))]:
        monkeypatch.delenv(name)
    assert main(["probe", "all", "--platform", "cpu", "--expect", "busbw_min=400"]) == 3
    out = capsys.readouterr().out
    assert "1 passed; 0 failed; 0 not judged; 1 skipped; 0 error" in out, out
    assert "not all judged: 1 --expect key(s) judged by no probe here (exit 3, never 0)" in out, out


def test_probe_all_refuses_a_key_no_probe_reads(monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """Every key the parser takes is read by some probe today (the test above each probe's tuple); with
    the probes cut to env, busbw_min is read by none and refused before anything runs."""
    from clustercheck.cli import main

    monkeypatch.setattr(probes, "NAMES", ("env",))
    assert main(["probe", "all", "--expect", "busbw_min=400"]) == 4
    out = capsys.readouterr()
    assert out.out == "" and "--expect busbw_min: no probe reads it (probe --list names the keys each reads)" \
        in out.err, out


def test_every_key_the_parser_takes_is_read_by_some_probe() -> None:
    keys = [*EXPECT_KEYS, *(f"topology.{k}" for k in TOPOLOGY_KEYS)]
    assert [k for k in keys if not any(probes.get(n).reads(k) for n in probes.NAMES)] == []


@pytest.mark.parametrize("args, code", [
    (["nvlink", "--input", NVLINK, "--expect", "nvlinks_per_gpu=18"], 1),
    (["topo", "--input", TOPO, "--expect", "topology.gpu_nic=NODE", "--expect", "gpu_count=2"], 0),
    (["amd-smi", "--input", AMD_TOPO, "--expect", "topology.gpu_gpu=XGMI"], 0),
])
def test_a_key_the_probe_reads_is_judged(args: list[object], code: int) -> None:
    out = cc(*args)
    assert out.returncode == code, out.stdout + out.stderr


def test_a_profile_key_the_probe_does_not_read_is_not_refused() -> None:
    """A profile's expect: block serves every probe: ecc reads its gpu_count and leaves nvlinks_per_gpu to
    nvlink, and nothing is refused."""
    out = cc("ecc", "--input", NVSMI_Q, "--platform", "h100-sxm-8x")
    assert out.returncode != 4 and "does not read" not in out.stderr, out.stdout + out.stderr
