"""--launcher hosts with its default template, `ssh {host} {python}`, through a real OpenSSH server: an sshd
of this test's own on a loopback port (its own host key, one authorized key, no PAM), and ssh told by a
config file that every "host" of the run is that server. What ssh adds to the stand-in of
test_hosts_agents.py is real: the secret crosses on ssh's stdin, the agent starts in a login session that
has none of the controller's environment, and a host ssh cannot reach is named with what ssh printed.

The second test kills the controller (SIGKILL) mid-check. Across ssh no parent-death signal reaches the
agent, and ssh itself is not told: each agent must see its controller gone and take its ranks with it.

Needs root (sshd) and OpenSSH (.ci/run installs it); skipped otherwise."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest

from clustercheck.exitcodes import Exit

sys.path.insert(0, str(Path(__file__).resolve().parent))
from joining import alive, free_port, parent, project, results, wait_for  # noqa: E402

pytestmark = pytest.mark.pool  # starts real rank pools or whole runs: `pytest -m 'not pool'` leaves it out

SSHD = "/usr/sbin/sshd"


@pytest.fixture(scope="module")
def ssh_config(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """An sshd listening on 127.0.0.1, and an ssh config naming it for every host but `node-down`, whose
    port nothing listens on. Yields the config file; sshd's log is `sshd.log` beside it."""
    if os.geteuid() != 0 or not Path(SSHD).is_file() or not shutil.which("ssh") or not shutil.which("ssh-keygen"):
        pytest.skip("needs root and OpenSSH (openssh-server, openssh-client)")
    d = tmp_path_factory.mktemp("ssh")
    for key in ("host_key", "user_key"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / key)], check=True)
    (d / "authorized_keys").write_text((d / "user_key.pub").read_text())
    port, closed = free_port(), free_port()
    (d / "sshd_config").write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {d / 'host_key'}\nAuthorizedKeysFile {d / 'authorized_keys'}\n"
        f"PidFile {d / 'sshd.pid'}\nStrictModes no\nUsePAM no\nPasswordAuthentication no\n"
        "KbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\nLogLevel INFO\n")
    config = d / "ssh_config"
    config.write_text(
        f"Host node-down\n  Port {closed}\n"  # ssh's first value wins: this one's port is closed
        f"Host *\n  HostName 127.0.0.1\n  Port {port}\n  User root\n  IdentityFile {d / 'user_key'}\n"
        "  IdentitiesOnly yes\n  BatchMode yes\n  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n"
        "  LogLevel ERROR\n")
    Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege-separation directory
    sshd = subprocess.Popen([SSHD, "-D", "-f", str(d / "sshd_config"), "-E", str(d / "sshd.log")])
    try:
        end = time.monotonic() + 10
        while subprocess.run(["ssh", "-F", str(config), "node-1", "true"], capture_output=True).returncode != 0:
            assert time.monotonic() < end and sshd.poll() is None, (d / "sshd.log").read_text()
            time.sleep(0.2)
        yield config
    finally:
        sshd.terminate()
        sshd.wait(10)


def _run(tmp: Path, config: Path, hosts: str, *args: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CLUSTERCHECK_", "CC_"))}
    cmd = [sys.executable, "-m", "clustercheck", "run", "s.yaml", "--thresholds", "th", "--out", "out",
           "--launcher", "hosts", "--hosts", hosts, "--host-command", f"ssh -F {config} {{host}} {{python}}",
           "--ranks", "2", *args]
    return subprocess.Popen(cmd, cwd=tmp, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _sessions(config: Path) -> int:
    return (config.parent / "sshd.log").read_text().count("Accepted publickey for root")


def _ancestors(pid: int) -> list[str]:
    """The command names from `pid`'s parent up to init."""
    names = []
    while pid > 1:
        try:
            pid = parent(pid)
            names.append(Path(f"/proc/{pid}/comm").read_text().strip())
        except OSError:  # the process (or, for init's parent, pid 0) is not there
            break
    return names


def _rank_pids(record: Path) -> list[int]:
    return [r["pid"] for line in record.read_text().splitlines() if '"type": "pool"' in line
            for r in json.loads(line)["ranks"]]


def test_the_default_template_runs_each_hosts_agent_through_sshd_and_a_host_ssh_cannot_reach_is_named(
        tmp_path: Path, ssh_config: Path) -> None:
    project(tmp_path)
    before = _sessions(ssh_config)
    ctl = _run(tmp_path, ssh_config, "node-1,node-2,node-down", "-k", "not node-late")
    out, _ = ctl.communicate(timeout=300)
    data = results(tmp_path)
    assert ctl.returncode == Exit.INCOMPLETE and data["verdict"] == "INCOMPLETE", out[-3000:]
    why = data["run"]["absent"]["node-down"]
    assert why.startswith("its agent exited with 255 before joining: ssh: connect to host 127.0.0.1 port ") and \
        why.endswith("Connection refused"), why
    assert list(data["run"]["absent"]) == ["node-down"] and data["untested"] == ["node-down"]
    assert {r["name"]: r["outcome"] for r in data["results"]} == {
        "cluster-ar": "passed", "node-ar[node-1]": "passed", "node-ar[node-2]": "passed"}
    assert _sessions(ssh_config) - before == 2  # one login per reachable host, not one per rank or pool
    assert "Traceback" not in out


def test_a_killed_controller_leaves_no_agent_or_rank_behind_ssh(tmp_path: Path, ssh_config: Path) -> None:
    """The ranks wait 2 s before the node check (a test-only delay) when the controller is SIGKILLed. Each
    agent's connection to it drops, and the agent stops its ranks and exits; ssh then ends too."""
    project(tmp_path)
    ctl = _run(tmp_path, ssh_config, "node-1,node-2", "-k", "node-ar", "--cc-inject-fault=node-ar:delay")
    record = tmp_path / "out" / "latest" / "run.jsonl"
    try:
        wait_for(record, '"type": "pool"', 180)
        pids = _rank_pids(record)
        assert len(pids) == 4 and all(alive(p) for p in pids)
        assert all("sshd" in _ancestors(p) for p in pids), [_ancestors(p) for p in pids]  # started through ssh
        # a rank is forked by its zygote, which the agent forked from itself: the agents are their grandparents
        agents = {parent(parent(p)) for p in pids}
        assert len(agents) == 2 and all(b"\0agent\0" in Path(f"/proc/{a}/cmdline").read_bytes() for a in agents)
        ctl.send_signal(signal.SIGKILL)
        ctl.wait()
    finally:
        ctl.kill()
    end = time.monotonic() + 30  # an agent waits at most 10 s for a silent controller, then stops its ranks
    while [p for p in [*pids, *agents] if alive(p)] and time.monotonic() < end:
        time.sleep(0.2)
    assert not [p for p in [*pids, *agents] if alive(p)], [_ancestors(p) for p in [*pids, *agents] if alive(p)]


def test_what_ssh_hands_the_remote_shell_arrives_word_for_word(tmp_path: Path, ssh_config: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """ssh joins the words after the host into one command line for the login shell there. The interpreter's
    path (here with a space in it) and each argument the launcher adds reach the host as the same words."""
    from clustercheck.run.hosts import HostsLauncher

    python = tmp_path / "py env" / "python"
    python.parent.mkdir()
    python.write_text(f"#!/bin/sh\nexec {sys.executable} \"$@\"\n")
    python.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(python))
    words = ["a b", "$HOME;echo x", "it's", "*"]
    argv = HostsLauncher(["node-1"], f"ssh -F {ssh_config} {{host}} {{python}}").argv(
        "node-1", "-c", "import json, sys; print(json.dumps(sys.argv[1:]))", *words)
    out = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == words
