"""sysfs readers where the kernel refuses (EACCES): a directory that cannot be listed, a file that cannot be
stat'ed or opened. Tests run as root, where chmod denies nothing, so the refusal is made at the call the
reader makes (os.scandir, Path.stat, Path.open), answering as the kernel does. The fixtures are the real
captures of tests/test_counters.py (the kernel's AER sample, an mlx5 port's counters)."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest

from clustercheck.counters import Sources, delta, judge, sysfs, take
from test_counters import DEV, IB_MLX5, ib_tree, sources  # noqa: F401  (sources: the fixture)


def deny(monkeypatch: pytest.MonkeyPatch, *denied: Path) -> None:
    """EACCES for listing, stat'ing or opening any of `denied`, as the kernel answers a reader without
    permission."""
    refused = {str(p) for p in denied}

    def check(path: Any) -> None:
        if os.fspath(path) in refused:
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), os.fspath(path))

    scandir, stat, open_ = os.scandir, Path.stat, Path.open

    def scandir_(path: Any = ".") -> Any:
        check(path)
        return scandir(path)

    def stat_(self: Path, *args: Any, **kwargs: Any) -> Any:
        check(self)
        return stat(self, *args, **kwargs)

    def open__(self: Path, *args: Any, **kwargs: Any) -> Any:
        check(self)
        return open_(self, *args, **kwargs)

    monkeypatch.setattr(os, "scandir", scandir_)
    monkeypatch.setattr(Path, "stat", stat_)
    monkeypatch.setattr(Path, "open", open__)


def test_an_ib_ports_directory_that_cannot_be_listed_is_unreadable_never_no_ib_counters(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """glob() answered [] for mlx5_1/ports it could not list: the node got the note 'no InfiniBand port
    counters', which reads as 'not on this hardware'."""
    root = ib_tree(tmp_path, IB_MLX5)
    deny(monkeypatch, root / "mlx5_1" / "ports")
    r = sysfs.ib(root)
    assert not r.counters and not r.notes
    assert [(e.reader, e.device, e.what, e.kind) for e in r.errors] == [
        ("ib", "mlx5_1", str(root / "mlx5_1" / "ports"), "unreadable")]
    assert "Permission denied" in r.errors[0].error


def test_an_ib_port_directory_that_cannot_be_listed_names_its_port(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = ib_tree(tmp_path, IB_MLX5)
    deny(monkeypatch, root / "mlx5_1" / "ports" / "1")
    r = sysfs.ib(root)
    assert [(e.device, e.kind) for e in r.errors] == [("mlx5_1/1", "unreadable")] and not r.notes
    assert r.errors[0].explains("ib.symbol_error", "mlx5_1/1")  # so a window is not judged for that port


def test_an_unlistable_ib_root_is_an_error_and_an_absent_one_a_note(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    assert sysfs.ib(tmp_path / "none").notes == (f"no InfiniBand devices ({tmp_path / 'none'} absent)",)
    root = ib_tree(tmp_path / "ib", IB_MLX5)
    deny(monkeypatch, root)
    assert [(e.device, e.what, e.kind) for e in sysfs.ib(root).errors] == [("", str(root), "unreadable")]


def test_an_aer_file_that_cannot_be_stated_is_an_error_naming_it_not_a_lost_snapshot(
        sources: Sources, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    """Path.exists() raised PermissionError out of sysfs.aer, so take() raised: every window of the check
    was lost. The file is now read, and its refusal is an unreadable error naming it; the window is not
    judged for that counter and the others are."""
    before = take(sources=sources, host="n")
    fatal = sources.pci / DEV / "aer_dev_fatal"
    deny(monkeypatch, fatal)
    after = take(before, sources, "n")
    j = judge(delta(before, after))
    assert [(e.reader, e.device, e.what, e.kind, e.counter) for e in j.harness_errors] == [
        ("pcie.aer", DEV, str(fatal), "unreadable", "pcie.aer.fatal")]
    assert not j.vanished and {c.name for c in after.counters} == {"pcie.aer.correctable", "pcie.aer.nonfatal"}


def test_an_ib_counter_file_that_cannot_be_stated_is_an_error_naming_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = ib_tree(tmp_path, IB_MLX5)
    path = root / "mlx5_1" / "ports" / "1" / "counters" / "symbol_error"
    deny(monkeypatch, path)
    r = sysfs.ib(root)
    assert [(e.device, e.what, e.counter) for e in r.errors if e.kind == "unreadable"] == [
        ("mlx5_1/1", str(path), "ib.symbol_error")]
    assert len(r.counters) == 11


def test_thermal_zones_and_cpuinfo_that_cannot_be_read_are_noted_by_file_not_absent(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Gauges no verdict reads: not read is a note naming the file and why, never "no thermal zones"."""
    thermal, cpus, cpuinfo = tmp_path / "thermal", tmp_path / "cpus", tmp_path / "cpuinfo"
    for d in (thermal, cpus):
        d.mkdir()
    cpuinfo.write_text("processor\t: 0\ncpu MHz\t\t: 2400.000\n")
    deny(monkeypatch, thermal, cpuinfo)
    th, mhz = sysfs.thermal(thermal), sysfs.cpu_mhz(cpus, cpuinfo)
    assert not th.errors and th.notes == (f"thermal.temp not read, a gauge no verdict reads: {thermal}: "
                                          "Permission denied",)
    assert not mhz.errors and mhz.notes == (f"cpu.mhz not read, a gauge no verdict reads: {cpuinfo}: "
                                            "Permission denied",)


# AMD GPUs: the amdgpu driver's RAS error counts, /sys/class/drm/card<N>/device/ras/<block>_err_count, in the
# format amdgpu_ras_sysfs_read writes ("ue: N", "ce: N"; "de: N" for umc on newer kernels). The bus ids are
# illustrative (the MI300X capture, rocm-smi's Concise Info, gives none); card0 is a BMC's VGA (ast).
AMD_GPU, BMC_VGA = "0000:c1:00.0", "0000:02:00.0"


def drm_tree(root: Path, ras: dict[str, str] | None) -> Path:
    """<root>/class/drm/{card0 (ast), card1 (amdgpu, `ras` files; no ras/ if None), card1-DP-1}."""
    drm = root / "class" / "drm"
    for card, bus, driver in (("card0", BMC_VGA, "ast"), ("card1", AMD_GPU, "amdgpu")):
        dev = root / "devices" / "pci0000:00" / bus
        (dev / "drm" / card).mkdir(parents=True)
        (root / "bus" / "pci" / "drivers" / driver).mkdir(parents=True, exist_ok=True)
        os.symlink(os.path.relpath(root / "bus" / "pci" / "drivers" / driver, dev), dev / "driver")
        drm.mkdir(parents=True, exist_ok=True)
        os.symlink(os.path.relpath(dev / "drm" / card, drm), drm / card)
        os.symlink(os.path.relpath(dev, dev / "drm" / card), dev / "drm" / card / "device")
    (drm / "card1-DP-1").mkdir()
    if ras is not None:
        (root / "devices" / "pci0000:00" / AMD_GPU / "ras").mkdir()
        for name, text in {"features": "feature mask: 0x3fff\n", **ras}.items():
            (root / "devices" / "pci0000:00" / AMD_GPU / "ras" / name).write_text(text)
    return drm


RAS = {"umc_err_count": "ue: 0\nce: 2\nde: 0\n", "gfx_err_count": "ue: 0\nce: 0\n", "sdma_err_count": "ue: 0\nce: 0\n"}


def test_an_amd_gpus_uncorrectable_error_in_the_window_fails_naming_bus_id_and_block(
        tmp_path: Path, sources: Sources) -> None:  # noqa: F811
    """With --counters on an AMD node NVML read nothing ('no NVIDIA driver') and an AMD GPU's memory errors
    during the check went unseen."""
    drm = drm_tree(tmp_path / "sys", RAS)
    src = Sources(**{**sources.__dict__, "drm": drm})
    before = take(sources=src, host="n")
    assert {(c.name, c.device, c.value) for c in before.counters if c.name.startswith("amdgpu.")} == {
        ("amdgpu.ue.umc", AMD_GPU, 0), ("amdgpu.ce.umc", AMD_GPU, 2), ("amdgpu.de.umc", AMD_GPU, 0),
        ("amdgpu.ue.gfx", AMD_GPU, 0), ("amdgpu.ce.gfx", AMD_GPU, 0), ("amdgpu.ue.sdma", AMD_GPU, 0),
        ("amdgpu.ce.sdma", AMD_GPU, 0)}
    assert not any("amdgpu" in n or n.startswith(sysfs.NO_GPU) for n in before.notes)
    (drm / "card1" / "device" / "ras" / "umc_err_count").write_text("ue: 5\nce: 40\nde: 0\n")
    j = judge(delta(before, take(before, src, "n")))
    assert [(f.increase.name, f.increase.device, f.increase.amount, f.passed) for f in j.findings] == [
        ("amdgpu.ue.umc", AMD_GPU, 5, False), ("amdgpu.ce.umc", AMD_GPU, 38, True)]
    assert not j.harness_errors and not j.vanished


def test_an_amd_gpus_ras_that_cannot_be_read_is_unreadable_and_one_without_ras_a_note_naming_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    drm = drm_tree(tmp_path / "off", None)
    r = sysfs.amdgpu(drm)
    assert not r.counters and not r.errors
    assert r.notes == (f"card1 ({AMD_GPU}): no amdgpu RAS error counts in {drm / 'card1' / 'device' / 'ras'} "
                       "(RAS not enabled)",)
    drm = drm_tree(tmp_path / "denied", {**RAS, "gfx_err_count": "Query currently inaccessible\n"})
    r = sysfs.amdgpu(drm)
    assert [(e.device, e.counter, e.kind) for e in r.errors] == [
        (AMD_GPU, "amdgpu.ue.gfx", "unreadable"), (AMD_GPU, "amdgpu.ce.gfx", "unreadable")]
    assert "Query currently inaccessible" in r.errors[0].error and len(r.counters) == 5
    deny(monkeypatch, drm / "card1" / "device" / "ras")
    r = sysfs.amdgpu(drm)
    assert [(e.device, e.what, e.kind) for e in r.errors] == [
        (AMD_GPU, str(drm / "card1" / "device" / "ras"), "unreadable")] and not r.counters and not r.notes


def test_no_nvidia_driver_is_no_note_where_amd_gpus_are_read_and_no_amd_gpu_none_where_nvidia_ones_are(
        tmp_path: Path, sources: Sources, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    """'no GPU counters: no NVIDIA driver' is rendered 'counters not judged, not on this hardware': on a
    node whose AMD GPUs were read it is no GPU left unread."""
    from nvml_capture import h100_node, in_process
    in_process(monkeypatch, {**h100_node(), "init_error": 12})  # NVML_ERROR_LIBRARY_NOT_FOUND
    amd = Sources(**{**sources.__dict__, "drm": drm_tree(tmp_path / "amd", RAS), "nvml": True})
    assert not any(n.startswith(sysfs.NO_GPU) for n in take(sources=amd, host="n").notes)
    none = Sources(**{**sources.__dict__, "drm": tmp_path / "none", "nvml": True})
    assert sorted(n for n in take(sources=none, host="n").notes if n.startswith(sysfs.NO_GPU)) == [
        f"{sysfs.NO_GPU}no GPU bound to amdgpu under {tmp_path / 'none'}", f"{sysfs.NO_GPU}no NVIDIA driver "
        "(NVML_ERROR_LIBRARY_NOT_FOUND)"]
    in_process(monkeypatch, h100_node())
    assert not any(n.startswith(sysfs.NO_GPU) for n in take(sources=none, host="n").notes)


def test_a_cpu_frequency_that_is_not_a_number_is_not_judged_for_that_cpu_never_a_traceback(
        tmp_path: Path, sources: Sources) -> None:  # noqa: F811
    """/proc/cpuinfo's "cpu MHz" and cpufreq's scaling_cur_freq read as text the kernel does not promise to be
    a number (an empty file, "<unknown>" on a hypervisor that hides the clock): float() raised ValueError out
    of the snapshot. Now that CPU's frequency is a note naming it (a gauge no verdict reads), and the others
    are read."""
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\ncpu MHz\t\t: <unknown>\n\nprocessor\t: 1\ncpu MHz\t\t: 2400.000\n")
    r = sysfs.cpu_mhz(tmp_path / "no-cpus", info)
    assert [(g.device, g.value) for g in r.gauges] == [("cpu1", 2400.0)] and not r.errors
    assert r.notes == (f"cpu.mhz of cpu0 not read, a gauge no verdict reads: {info}: 'cpu MHz' is not a number: "
                       "'<unknown>'",)
    cpus = tmp_path / "cpus"
    for cpu, text in ((0, ""), (1, "1200000\n")):
        (cpus / f"cpu{cpu}" / "cpufreq").mkdir(parents=True)
        (cpus / f"cpu{cpu}" / "cpufreq" / "scaling_cur_freq").write_text(text)
    r = sysfs.cpu_mhz(cpus, info)
    assert [(g.device, g.value) for g in r.gauges] == [("cpu1", 1200.0)] and not r.errors
    assert [n.split(":")[0] for n in r.notes] == ["cpu.mhz of cpu0 not read, a gauge no verdict reads"]
    # through a window: the node's counters are judged (no verdict reads the clock), the CPU named in a note
    node = Sources(**{**sources.__dict__, "cpuinfo": info})
    before = take(sources=node, host="node1")
    j = judge(delta(before, take(before, node, "node1")))
    assert not j.harness_errors and any(n.startswith("cpu.mhz of cpu0 not read") for n in j.notes), j.notes
