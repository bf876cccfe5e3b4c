"""RCCL's debug log (version banner, transports, its own host-setting warnings), the amd-host probe of AMD's
RCCL prerequisites, the MI300X/MI325X profiles (`clustercheck platforms show`) and the MI300X quick gate."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from clustercheck.fabric import nccl_debug
from clustercheck.measure.collectives import refuse_graph_on_rocm
from clustercheck.probes import amd_host
from clustercheck.probes import get, run_live
from clustercheck.probes.base import ProbeParseError, ProbeSkip
from helpers import load_named

REPO = Path(__file__).resolve().parent.parent
DEBUG = REPO / "tests" / "fixtures" / "nccl-debug"


def log(name: str) -> str:
    return (DEBUG / name).read_text(encoding="utf-8")


def cc(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "clustercheck", *args], capture_output=True, text=True, cwd=REPO,
                          timeout=300)


# -- RCCL's debug lines ------------------------------------------------------------------------------------
def test_rccl_banner_gives_version_head_and_hip():
    d = nccl_debug.parse(log("rccl-6074-2x7900xtx-version-banner.txt"))
    assert d.is_rccl and d.rccl_versions == ("2.27.7-HEAD:0d2c4fd",) and d.version == "2.27.7"
    assert d.hip_versions == ("7.2.26015-fc0010cf6a",)
    assert d.numa_balancing_on is False and d.iommu_pt_missing is None and d.warnings == ()


def test_rccl_transports_and_channel_summary():
    d = nccl_debug.parse(log("rccl-6074-2x7900xtx-channels-p2p-ipc.txt"))
    assert [(t.src_dev, t.dst_dev, t.via) for t in d.transports] == [
        ("3000", "d000", "P2P/IPC"), ("d000", "3000", "P2P/IPC"), ("3000", "d000", "P2P/IPC"), ("d000", "3000", "P2P/IPC")]
    assert d.transport_kinds == {"P2P"} and not d.p2p_suspect
    assert d.nvls_channels == (0,)  # "comm:0x..., coll channels:2 collnet channels:2, nvls channels:0"
    assert not d.is_rccl  # this excerpt holds no banner: nothing says RCCL


def test_rccl_numa_balancing_warning_behind_ray_prefixes():
    d = nccl_debug.parse(log("rccl-5656-r9700-numa-balancing-warn.txt"))
    assert d.rccl_versions == ("2.26.6-HEAD:f224e2c",) and d.hip_versions == ("7.0.51831-a3e329ad8",)
    assert d.numa_balancing_on is True
    assert d.warnings == ('NUMA auto balancing enabled which can lead to variability in the RCCL performance! '
                          'Disable by "sudo sysctl kernel.numa_balancing=0"',)
    assert d.networks == ("Socket",) and d.transport_kinds == {"NET/Socket"}
    assert d.env_dict == {"NCCL_SOCKET_IFNAME": "enp165s0f1np1"} and d.nvls_channels == (0,)


def test_nccl_logs_are_not_taken_for_rccl():
    d = nccl_debug.parse(log("nccl-892-h800-algo-env-p2p.txt"))
    assert not d.is_rccl and d.numa_balancing_on is None and d.hip_versions == ()


# -- amd-host: NUMA balancing and iommu=pt -------------------------------------------------------------------
def test_amd_host_from_rccl_log_fails_numa_balancing():
    (v,) = amd_host.judge(amd_host.parse(log("rccl-5656-r9700-numa-balancing-warn.txt")), {})
    assert (v.what, v.passed) == ("NUMA auto-balancing off", False) and "RCCL log" in v.detail


def test_amd_host_from_rccl_banner_without_warning_passes_numa():
    (v,) = amd_host.judge(amd_host.parse(log("rccl-6074-2x7900xtx-version-banner.txt")), {})
    assert (v.what, v.passed) == ("NUMA auto-balancing off", True)


# Built by hand in the forms `sysctl kernel.numa_balancing` and `cat /proc/cmdline` print (not captures).
GOOD = "kernel.numa_balancing = 0\nBOOT_IMAGE=/boot/vmlinuz-6.8.0 root=UUID=1 ro pci=realloc=off iommu=pt\n"
BAD = "kernel.numa_balancing = 1\nBOOT_IMAGE=/boot/vmlinuz-6.8.0 root=UUID=1 ro amd_iommu=on\n"


def test_amd_host_from_sysctl_and_cmdline():
    assert [(v.what, v.passed) for v in amd_host.judge(amd_host.parse(GOOD), {})] == [
        ("NUMA auto-balancing off", True), ("IOMMU passthrough", True)]
    bad = amd_host.judge(amd_host.parse(BAD), {})
    assert [(v.what, v.passed) for v in bad] == [("NUMA auto-balancing off", False), ("IOMMU passthrough", False)]
    assert "amd_iommu=on" in bad[1].detail and "iommu=pt" in bad[1].detail


def test_amd_host_live_reads_proc_and_fails_closed_on_an_unreadable_file(tmp_path):
    pci = tmp_path / "devices" / "0000:05:00.0"
    pci.mkdir(parents=True)
    for name, value in (("class", "0x120000"), ("vendor", "0x1002"), ("device", "0x74a1")):
        (pci / name).write_text(value)
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "cmdline").write_text("BOOT_IMAGE=/vmlinuz root=/dev/sda1 iommu=pt\n")
    got = amd_host.collect(proc=tmp_path / "proc", pci_root=tmp_path / "devices")
    verdicts = amd_host.judge(got, {})
    assert [(v.what, v.passed) for v in verdicts] == [("NUMA auto-balancing off", False), ("IOMMU passthrough", True)]
    assert verdicts[0].detail.startswith("kernel.numa_balancing could not be read")
    with pytest.raises(ProbeSkip, match="no AMD accelerator"):
        amd_host.collect(proc=tmp_path / "proc", pci_root=tmp_path / "none")


def test_amd_host_refuses_other_text():
    with pytest.raises(ProbeParseError, match="numa_balancing"):
        amd_host.parse("hello\n")


def test_amd_probes_skip_on_this_machine_with_reasons():
    for name in ("amd-smi", "amd-host"):
        outcome = run_live(get(name), {})
        assert outcome.outcome == "skipped" and outcome.reason, (name, outcome)


def test_graph_mode_left_alone_on_cuda_builds():
    refuse_graph_on_rocm({"cuda_graph": 3})  # this machine's torch is not ROCm's: nothing to refuse


# -- profiles and the quick gate -----------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["mi300x-8x", "mi325x-8x"])
def test_platforms_show_prints_every_limit_with_a_public_source(name):
    out = cc("platforms", "show", name)
    assert out.returncode == 0, out.stderr
    profile = load_named(REPO / "thresholds", name)
    limits = [(c, m) for c, metrics in profile.limits.items() for m in metrics]
    assert len(limits) == 6
    lines = out.stdout.splitlines()
    for check, metric in limits:
        at = next(i for i, l in enumerate(lines) if l.strip().startswith(f"{check}.{metric} "))
        source = next(l for l in lines[at + 1:] if l.strip().startswith("source:"))
        assert "https://" in source or "clustercheck's" in source, (check, metric, source)
    assert "topology={'gpu_gpu': 'XGMI'}" in out.stdout


@pytest.mark.parametrize("platform", ["mi300x-8x", "mi325x-8x"])
def test_quick_gate_mi300x_collects(platform):
    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                          "suites/quick-gate-mi300x.yaml", "--platform", platform], capture_output=True, text=True,
                         cwd=REPO, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    ids = [l.split("::")[1].split("[")[0] for l in out.stdout.splitlines() if "::" in l]
    assert ids == ["amd-smi", "topo", "amd-host", "allreduce-default", "allreduce-ring", "p2p-matrix", "host-device",
                   "device-memory"]
