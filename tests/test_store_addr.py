"""--store-addr: where ranks on other machines reach the controller's store. The flag wins over
$CC_STORE_ADDR, which wins over what the hostname resolves to; a loopback answer is named when no host's
agent could reach it (tests/test_netns.py drives that on namespaced hosts, and the flag reaching real ranks)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from clustercheck.exitcodes import Exit
from clustercheck.run.hosts import HostsLauncher
from clustercheck.run.launch import advertised, loopback

pytestmark = pytest.mark.pool  # starts real rank pools or whole runs: `pytest -m 'not pool'` leaves it out


def test_the_flag_wins_over_the_environment_which_wins_over_the_hostname(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("socket.gethostbyname", lambda name: "10.1.2.3")
    monkeypatch.delenv("CC_STORE_ADDR", raising=False)
    assert advertised() == "10.1.2.3"
    monkeypatch.setenv("CC_STORE_ADDR", "10.9.9.9")
    assert advertised() == "10.9.9.9" and advertised("ctl-ib0") == "ctl-ib0"
    # where the hosts' agents are told to reach the controller (no agent starts before begin())
    assert HostsLauncher(["n1", "n2"], "ssh {host} {python}", "192.168.7.1").host == "192.168.7.1"
    assert HostsLauncher(["n1", "n2"], "ssh {host} {python}").host == "10.9.9.9"


@pytest.mark.parametrize("addr, expected", [("127.0.1.1", True), ("127.0.0.1", True), ("::1", True),
                                            ("localhost", True), ("10.0.0.5", False), ("fe80::1", False),
                                            ("head-node", False)])
def test_loopback_is_an_address_only_this_machine_reaches(addr: str, expected: bool) -> None:
    assert loopback(addr) is expected


@pytest.mark.parametrize("args, said", [
    (["--store-addr", "10.0.0.1"], "--store-addr is for the multi-node launchers (slurm, hosts, join, k8s)"),
    (["--launcher", "hosts", "--hosts", "n1", "--store-addr", "10.0.0.1 10.0.0.2"], "takes one address"),
    (["--launcher", "hosts", "--hosts", "n1", "--store-addr", " "], "takes one address"),
])
def test_a_store_addr_that_cannot_apply_is_one_line_exit_4(tmp_path: Path, args: list[str], said: str) -> None:
    res = subprocess.run([sys.executable, "-m", "clustercheck", "run", "cpu-smoke", "--out", "out", *args],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    out = res.stdout + res.stderr
    assert res.returncode == Exit.BAD_INPUT and said in out and "Traceback" not in out, out
