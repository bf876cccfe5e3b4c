"""`measure: ib_write_bw` on a node whose RDMA facts name problems, on real sysfs trees (two dual-port
ConnectX-3 from a real ibstat capture, then broken as a node breaks): a device present but unusable (its
ports/ directory lists no port) fails naming the node and the device; a sysfs file that could not be read
leaves the item not judged naming it; neither is a skip "no RDMA port is ACTIVE", which a node with no
RDMA device at all still is. And the loopback's server side: an end with no exit status is no clean exit."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from clustercheck.errors import HarnessError, Skip
from clustercheck.kinds.base import Rules
from clustercheck.kinds.ib_write_bw import judge
from evidence import TOOLS

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ib_write_bw_node import answers as _answers, connectx3_sys, first_rank, on_node  # noqa: E402

IBW = TOOLS / "ib_write_bw"
CAPTURE = IBW / "roce-cx5-100g-deepops.txt"  # 92.40 Gb/s: passes 0.9 of the ConnectX-3 ports' 56 Gb/s


def _rank(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, root: Path, devices: list[str] | None = None) -> dict[str, Any]:
    """The node's first rank on the tree at root, with the stand-in ib_write_bw printing the real capture."""
    on_node(tmp_path, monkeypatch, root, CAPTURE)
    return first_rank({"devices": devices or []})


def _empty_ports(root: Path, dev: str) -> Path:
    ports = root / "class" / "infiniband" / dev / "ports"
    shutil.rmtree(ports)
    ports.mkdir()
    return ports


def test_a_node_whose_only_rdma_device_lists_no_port_fails_naming_node_and_device_never_skips(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """It read as a node without RDMA: Skip "no RDMA port is ACTIVE/LinkUp on n1 (0 port(s) in sysfs)"."""
    root = connectx3_sys(tmp_path)
    shutil.rmtree(root / "class" / "infiniband" / "mlx4_1")
    ports = _empty_ports(root, "mlx4_0")
    _, verdicts = judge(_answers(_rank(tmp_path, monkeypatch, root)), Rules({}))
    assert [(v.subject, v.metric, v.passed, v.detail) for v in verdicts] == [
        ("mlx4_0", "device", False, f"on n1: mlx4_0: {ports} lists no port")]


def test_a_device_with_no_port_beside_a_measured_one_fails_beside_its_pass(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """mlx4_1 listing no port was in the rank's `problems`, which the judge never read: the item passed."""
    root = connectx3_sys(tmp_path)
    ports = _empty_ports(root, "mlx4_1")
    _, verdicts = judge(_answers(_rank(tmp_path, monkeypatch, root)), Rules({}))
    assert [(v.subject, v.metric, v.passed) for v in verdicts] == [
        ("mlx4_1", "device", False), ("mlx4_0/1", "bw_gbps", True), ("mlx4_0/2", "bw_gbps", True)]
    assert verdicts[0].detail == f"on n1: mlx4_1: {ports} lists no port"


def test_ports_whose_state_files_cannot_be_read_are_not_judged_naming_them_never_skipped(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every port's state unreadable: a skip as if the node had no active port."""
    root = connectx3_sys(tmp_path)
    states = [root / "class" / "infiniband" / d / "ports" / n / "state" for d in ("mlx4_0", "mlx4_1") for n in "12"]
    for state in states:  # a file the kernel would let read, made one that cannot be (a directory)
        state.unlink()
        state.mkdir()
    with pytest.raises(HarnessError, match=rf"ib_write_bw on n1 \(mlx4_0/1\): not judged: mlx4_0/1: "
                                           rf"{states[0]} cannot be read"):
        judge(_answers(_rank(tmp_path, monkeypatch, root)), Rules({}))


def test_a_port_whose_state_file_cannot_be_read_is_not_judged_never_passed_on_the_others(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """It went unmeasured (not ACTIVE as read) and the item passed on the other three ports."""
    root = connectx3_sys(tmp_path / "one")
    state = root / "class" / "infiniband" / "mlx4_1" / "ports" / "2" / "state"
    state.unlink()
    state.mkdir()
    with pytest.raises(HarnessError, match=rf"^ib_write_bw on n1 \(mlx4_1/2\): not judged: mlx4_1/2: {state} "
                                           rf"cannot be read$"):
        judge(_answers(_rank(tmp_path / "one", monkeypatch, root)), Rules({}))


def test_beside_a_failed_device_what_could_not_be_read_is_the_items_note(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = connectx3_sys(tmp_path)
    _empty_ports(root, "mlx4_1")
    state = root / "class" / "infiniband" / "mlx4_0" / "ports" / "2" / "state"
    state.unlink()
    state.mkdir()
    m, verdicts = judge(_answers(_rank(tmp_path, monkeypatch, root)), Rules({}))
    assert [(v.subject, v.passed) for v in verdicts] == [("mlx4_1", False), ("mlx4_0/1", True)]
    assert m.notes == (f"ib_write_bw on n1 (mlx4_0/2): not judged: mlx4_0/2: {state} cannot be read",)


def test_a_device_directory_that_cannot_be_listed_is_not_judged_naming_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = connectx3_sys(tmp_path)
    ib = root / "class" / "infiniband"
    shutil.rmtree(ib)
    ib.write_text("not a directory\n")
    with pytest.raises(HarnessError, match=rf"^ib_write_bw on n1: not judged: {ib}: cannot be listed"):
        judge(_answers(_rank(tmp_path, monkeypatch, root)), Rules({}))


def test_a_node_with_no_rdma_device_at_all_still_skips(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = connectx3_sys(tmp_path)
    shutil.rmtree(root / "class" / "infiniband")
    with pytest.raises(Skip, match=r"no RDMA port is ACTIVE/LinkUp on n1 \(0 port\(s\) in sysfs\)"):
        judge(_answers(_rank(tmp_path, monkeypatch, root)), Rules({}))


def test_a_named_device_that_lists_no_port_fails_as_unusable_not_as_absent(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = connectx3_sys(tmp_path)
    ports = _empty_ports(root, "mlx4_1")
    params = {"devices": ["mlx4_1"]}
    _, verdicts = judge(_answers(_rank(tmp_path, monkeypatch, root, ["mlx4_1"]), params), Rules({}))
    assert [(v.subject, v.measured, v.passed, v.detail) for v in verdicts] == [
        ("mlx4_1", "unusable", False, f"on n1: mlx4_1: {ports} lists no port")]


def test_only_the_rdma_devices_problems_are_the_checks(tmp_path: Path) -> None:
    """fabric/rdma.py marks each problem where it finds it: the PCI tree's, and a device's missing PCI function,
    are the placement checks' and the ib probe's; the rest name the device or port, or the device directory."""
    from clustercheck.fabric import rdma
    from clustercheck.kinds.ib_write_bw import rdma_problems

    root = connectx3_sys(tmp_path)
    pci = root / "bus" / "pci" / "devices"
    shutil.rmtree(pci)
    pci.write_text("not a directory\n")                              # the PCI tree cannot be listed
    function = root / "devices" / "pci0000:00" / "0000:1a:00.0"
    function.mkdir(parents=True)
    os.symlink(function, root / "class" / "infiniband" / "mlx4_0" / "device")  # a function not in the tree
    ports = _empty_ports(root, "mlx4_1")                              # and no PCI device behind mlx4_1 at all
    port = root / "class" / "infiniband" / "mlx4_0" / "ports"
    (port / "1" / "phys_state").write_text("2: Polling\n")            # ACTIVE without LinkUp
    (port / "2" / "phys_state").unlink()
    (port / "2" / "phys_state").mkdir()                               # a file that cannot be read
    net = rdma.read(root, tmp_path / "proc", kernel="6.8.0")
    said = {p.text: (p.subject, p.unread, p.nic) for p in net.findings}
    assert said == {
        f"{pci}: cannot be listed (Not a directory)": (None, True, False),
        f"mlx4_0/1: state ACTIVE but physical state Polling: the sysfs tree contradicts itself": ("mlx4_0/1", False, True),
        f"mlx4_0/2: {port / '2' / 'phys_state'} cannot be read": ("mlx4_0/2", True, True),
        f"mlx4_1: {ports} lists no port": ("mlx4_1", False, True),
        f"mlx4_1: no PCI device behind it ({root / 'class' / 'infiniband' / 'mlx4_1' / 'device'} is not a link to one)":
            ("mlx4_1", False, False),
        "mlx4_0: its PCI function 0000:1a:00.0 is not under /sys/bus/pci/devices": ("mlx4_0", False, False)}
    assert rdma_problems(net.findings) == [p for p in net.findings if p.nic] and len(rdma_problems(net.findings)) == 3
    ib = root / "class" / "infiniband"
    shutil.rmtree(ib)
    ib.write_text("not a directory\n")
    assert [(p.subject, p.text, p.unread) for p in rdma_problems(rdma.read(root, kernel="6.8.0").findings)] == [
        (None, f"{ib}: cannot be listed (Not a directory)", True)]


def test_a_state_whose_words_say_cannot_be_read_is_a_failed_device_not_an_unread_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The judge classified the facts' problems by their wording: a state file that READ as "cannot be read"
    ("mlx4_0/1: state 'cannot be read' is not 'N: WORD' ...") was taken for an unread file, and the item was the
    harness's error (not judged) instead of mlx4_0/1 failing as unusable. rdma.py's field says it was read."""
    root = connectx3_sys(tmp_path)
    (root / "class" / "infiniband" / "mlx4_0" / "ports" / "1" / "state").write_text("cannot be read\n")
    _, verdicts = judge(_answers(_rank(tmp_path, monkeypatch, root)), Rules({}))
    assert [(v.subject, v.metric, v.measured, v.passed) for v in verdicts] == [
        ("mlx4_0/1", "device", "unusable", False), ("mlx4_0/2", "bw_gbps", 92.4, True),
        ("mlx4_1/1", "bw_gbps", 92.4, True), ("mlx4_1/2", "bw_gbps", 92.4, True)]
    assert verdicts[0].detail == "on n1: mlx4_0/1: state 'cannot be read' is not 'N: WORD' as the kernel writes it"


@pytest.mark.parametrize("entry", [{"subject": "mlx4_1", "text": "mlx4_1: lists no port", "unread": False},
                      {"subject": "mlx4_1", "text": "mlx4_1: lists no port", "unread": "no", "nic": True}])
def test_a_problem_entry_not_as_rdma_writes_it_is_the_harness_error_naming_it(entry: Any) -> None:
    """A rank's problem with a field missing or of another type: never dropped, never classified from its words
    (text alone is how records before 2026-11-29 hold it: tests/test_rdma_problems_written_before.py)."""
    result = {"host": "n1", "binary": "ib_write_bw", "outcome": "ran", "runs": [], "problems": [entry]}
    with pytest.raises(HarnessError, match=r"^ib_write_bw on n1: network facts: problem .*mlx4_1.* is not \{subject"):
        judge(_answers(result), Rules({}))


# -- the loopback's server side ---------------------------------------------------------------------------

@pytest.mark.parametrize("returncode", [None, False, "0"])
def test_a_server_without_an_exit_status_fails_its_nics_run_verdict(returncode: Any) -> None:
    """A server returncode of None, False or text was taken for a clean exit, as the client's was before 60afdd6."""
    client = {"outcome": "ran", "stdout": CAPTURE.read_text(), "returncode": 0, "timed_out": False}
    server = {"outcome": "ran", "returncode": returncode, "timed_out": False, "timeout": 10.0, "stdout": "",
              "stderr_tail": ""}
    run = {"device": "mlx5_0", "port": 1, "rate_gbps": 100.0, "up": True, "client": client, "server": server}
    result = {"host": "n1", "binary": "ib_write_bw", "outcome": "ran", "runs": [run]}
    _, verdicts = judge(_answers(result), Rules({}))
    assert [(v.subject, v.metric, v.passed, v.detail) for v in verdicts if v.metric == "run"] == [
        ("mlx5_0", "run", False, f"server: no exit status ({returncode!r})")]


def test_a_server_still_running_after_its_client_is_killed_and_fails_the_run_saying_so() -> None:
    """The rank's own _start/_finish on a real process that outlives its wait."""
    from clustercheck.measure.native_io import _finish, _start

    server = _finish(_start([sys.executable, "-c", "import time; time.sleep(60)"], dict(os.environ)), 0.2)
    assert server["timed_out"] is True and server["returncode"] is not None and server["returncode"] < 0
    client = {"outcome": "ran", "stdout": CAPTURE.read_text(), "returncode": 0, "timed_out": False}
    run = {"device": "mlx5_0", "port": 1, "rate_gbps": 100.0, "up": True, "client": client, "server": server}
    _, verdicts = judge(_answers({"host": "n1", "binary": "ib_write_bw", "outcome": "ran", "runs": [run]}), Rules({}))
    assert [(v.metric, v.passed, v.detail) for v in verdicts if v.metric == "run"] == [
        ("run", False, "server: still running 0.2 s after its client ended (killed by SIGKILL)")]


def test_a_server_that_exited_cleanly_adds_nothing() -> None:
    server = _finish_of([sys.executable, "-c", "pass"])
    assert server["returncode"] == 0 and server["timed_out"] is False
    client = {"outcome": "ran", "stdout": CAPTURE.read_text(), "returncode": 0, "timed_out": False}
    run = {"device": "mlx5_0", "port": 1, "rate_gbps": 100.0, "up": True, "client": client, "server": server}
    _, verdicts = judge(_answers({"host": "n1", "binary": "ib_write_bw", "outcome": "ran", "runs": [run]}), Rules({}))
    assert [(v.metric, v.passed) for v in verdicts] == [("bw_gbps", True)]


def _finish_of(argv: list[str]) -> dict[str, Any]:
    from clustercheck.measure.native_io import _finish, _start

    return _finish(_start(argv, dict(os.environ)), 30.0)
