"""A node without /sys/bus/pci/devices (a container that does not mount it) has no PCIe AER statistics to
read: a note, as every other sysfs reader's missing root, never a `vanished` error that failed the node's
hardware on every window."""

from __future__ import annotations

from pathlib import Path

import pytest

from clustercheck.counters import judge, sysfs
from clustercheck.counters.delta import delta
from clustercheck.counters.facts import Snapshot
from clustercheck.judging.windows import item_verdicts
from test_counters_sysfs import deny


def snapshot(root: Path, taken: float) -> Snapshot:
    r = sysfs.aer(root)
    return Snapshot("node1", taken, r.counters, r.gauges, r.errors, r.notes)


def test_a_missing_pci_root_is_a_note_and_fails_no_window(tmp_path: Path) -> None:
    r = sysfs.aer(tmp_path / "absent")
    assert not r.errors and not r.counters and len(r.notes) == 1 and str(tmp_path / "absent") in r.notes[0]
    j = judge(delta(snapshot(tmp_path / "absent", 0.0), snapshot(tmp_path / "absent", 30.0)))
    assert not j.vanished and not j.harness_errors
    assert all(v.passed for v in item_verdicts("c", {"node1": j}, ["node1"]))


def test_a_pci_root_that_cannot_be_listed_is_still_unreadable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "devices"
    root.mkdir()
    deny(monkeypatch, root)  # EACCES, as the kernel answers (a chmod is no use to a test run as root)
    r = sysfs.aer(root)
    assert [(e.what, e.kind) for e in r.errors] == [(str(root), "unreadable")] and not r.notes
