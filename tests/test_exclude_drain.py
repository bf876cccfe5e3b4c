"""--drain against what `scontrol show node -o` says of a node before draining it: an admin's drain or down
is left alone, Slurm's own DOWN (its slurmd stopped answering) is drained, so that the node stays out when
its slurmd registers again. scontrol is a script on PATH here (tests/slurm drains on a real Slurm)."""

from __future__ import annotations

from pathlib import Path

import pytest

from clustercheck.record import exclude

# `scontrol show node -o ccnode3` on the test cluster (tests/slurm/cluster.sh, slurm-wlm 22.05.8, SlurmUser
# root) once ccnode3's slurmd was SIGSTOPped past SlurmdTimeout, some fields cut; --drain on it made it
# DOWN+DRAIN+NOT_RESPONDING, which stays out when slurmd answers again
NOT_RESPONDING = ("NodeName=ccnode3 Arch=x86_64 CoresPerSocket=4  CPUAlloc=0 CPUEfctv=4 CPUTot=4 CPULoad=3.17 "
                  "RealMemory=2048 AllocMem=0 FreeMem=18206 Sockets=1 Boards=1 State=DOWN+NOT_RESPONDING "
                  "ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A Partitions=debug  "
                  "BootTime=2026-11-28T09:35:59 SlurmdStartTime=2026-11-28T21:09:10 LastBusyTime=2026-11-28T21:10:52 "
                  "CfgTRES=cpu=4,mem=2G,billing=4 AllocTRES= Reason=Not responding [root@2026-11-28T21:12:36]")


def scontrol(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, show: str, show_rc: int = 0,
             config: str = "SlurmUser               = root(0)") -> Path:
    """An scontrol on PATH: `show node` prints `show` and exits `show_rc`, `show config` prints `config`,
    and `update` succeeds; every call is logged, one a line, in the file returned."""
    log = tmp_path / "calls"
    (tmp_path / "show").write_text(show + "\n")
    (tmp_path / "config").write_text(config + "\n")
    (tmp_path / "scontrol").write_text(
        f'#!/bin/sh\necho "$@" >> {log}\n'
        f'case "$1 $2" in "show node") cat {tmp_path / "show"}; exit {show_rc};;\n'
        f'"show config") cat {tmp_path / "config"};; esac\nexit 0\n')
    (tmp_path / "scontrol").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    return log


def updates(log: Path) -> list[str]:
    return [line for line in log.read_text().splitlines() if line.startswith("update")] if log.exists() else []


@pytest.mark.parametrize("line", [
    "NodeName=n1 State=DOWN*+NOT_RESPONDING Reason=Not responding [slurm@2026-11-28T21:14:02]",
    "NodeName=n1 State=DOWN* Reason=Not responding [root@2026-11-28T21:14:02]",
    "NodeName=n1 State=DOWN Reason=Not responding [slurm@2026-11-28T21:14:02]",  # slurmd back, not yet returned
])
def test_slurms_own_down_is_no_one_elses(line: str) -> None:
    """slurmctld's DOWN of a node whose slurmd stopped answering was taken for an admin's: the node that
    failed was never drained, and came back to service when its slurmd registered again."""
    assert exclude._held_by_others(line) is None


@pytest.mark.parametrize(("line", "held"), [
    ("NodeName=n1 State=DOWN* Reason=replacing its PSU [root@2026-11-28T21:14:02]", ("down", "replacing its PSU")),
    ("NodeName=n1 State=DOWN Reason=maintenance [alice@2026-11-28T21:14:02]", ("down", "maintenance")),
    ("NodeName=n1 State=DOWN*+DRAIN Reason=Not responding [root@2026-11-28T21:14:02]", ("drained", "Not responding")),
    ("NodeName=n1 State=IDLE+DRAIN Reason=hw [root@2026-11-28T21:14:02]", ("drained", "hw")),
])
def test_an_admins_down_or_any_drain_stays_theirs(line: str, held: tuple[str, str]) -> None:
    assert exclude._held_by_others(line) == held


def test_a_down_set_by_the_slurm_user_is_slurms_own() -> None:
    """Under a SlurmUser of its own (Debian's `slurm`), a DOWN that user set is slurmctld's ("Node unexpectedly
    rebooted"); under root, as admins act too, only Slurm's own words ("Not responding") tell."""
    line = "NodeName=n1 State=DOWN Reason=Node unexpectedly rebooted boot_time=1 last response=2 [slurm@2026-11-28T21:14:02]"
    assert exclude._held_by_others(line, lambda: "slurm") is None
    assert exclude._held_by_others(line.replace("[slurm@", "[root@"), lambda: "root") is not None
    assert exclude._held_by_others(line, lambda: None) is not None  # the config unread: left alone


def test_drain_drains_a_node_slurm_set_down_as_not_responding(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = scontrol(tmp_path, monkeypatch, NOT_RESPONDING)
    [entry] = exclude.drain({"ccnode3": "ar-node: stopped answering"}, dry_run=False)
    assert entry["rc"] == 0, entry
    assert updates(log) == ["update NodeName=ccnode3 State=DRAIN Reason=clustercheck: ar-node: stopped answering"]


def test_drain_leaves_an_admins_down_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = scontrol(tmp_path, monkeypatch, "NodeName=ccnode3 State=DOWN Reason=PSU swap [root@2026-11-28T21:14:02]")
    [entry] = exclude.drain({"ccnode3": "ar-node: stopped answering"}, dry_run=False)
    assert entry["rc"] is None and entry["output"] == "left alone: already down by someone else (PSU swap)", entry
    assert updates(log) == []


@pytest.mark.parametrize("rc", [1, 124])
def test_a_node_whose_state_cannot_be_read_is_not_drained(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          rc: int) -> None:
    """`scontrol show node` failing (slurmctld not answering, a timeout) left --drain blind and it drained
    anyway, overwriting an admin's drain reason it could not see. Now: no update, and an entry whose
    status is the read's, said on the terminal as `drain failed`."""
    log = scontrol(tmp_path, monkeypatch, "slurm_load_node error: Unable to contact slurm controller", show_rc=rc)
    [entry] = exclude.drain({"ccnode3": "ar-node: stopped answering"}, dry_run=False)
    assert updates(log) == [], log.read_text()
    assert entry["rc"] == rc and entry["output"] == (
        "not drained: its state could not be read (slurm_load_node error: Unable to contact slurm controller)"), entry
