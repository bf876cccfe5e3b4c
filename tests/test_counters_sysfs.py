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


def test_thermal_zones_and_cpuinfo_that_cannot_be_read_are_errors_not_absent(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    thermal, cpus, cpuinfo = tmp_path / "thermal", tmp_path / "cpus", tmp_path / "cpuinfo"
    for d in (thermal, cpus):
        d.mkdir()
    cpuinfo.write_text("processor\t: 0\ncpu MHz\t\t: 2400.000\n")
    deny(monkeypatch, thermal, cpuinfo)
    assert [(e.what, e.kind) for e in sysfs.thermal(thermal).errors] == [(str(thermal), "unreadable")]
    assert [(e.what, e.kind) for e in sysfs.cpu_mhz(cpus, cpuinfo).errors] == [(str(cpuinfo), "unreadable")]
