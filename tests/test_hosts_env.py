"""`--launcher hosts`: what the pool sets for its ranks (the check's `env:`, clustercheck's CC_*) reaches
every rank even when the host command passes no environment, as ssh does. The template here is
`env -i PYTHONPATH=<dir> {python}`: each host's agent starts with nothing but what a remote login would
give it, through the real HostsLauncher, agent, pool and worker; the run's secret reaches the agent on its
stdin, and the pool's variables reach the ranks in the agent's spawn message."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from clustercheck.run.hosts import HostsLauncher
from clustercheck.run.launch import rank_env
from clustercheck.run.wire import env_line, read_env
from clustercheck.run.pool import PoolKey
from clustercheck.run.pools import PoolManager

pytestmark = pytest.mark.pool  # starts real rank pools or whole runs: `pytest -m 'not pool'` leaves it out

RANK_SIDE = '''\
import os


def measure(ctx, params):
    return {"env": {k: os.environ.get(k) for k in params["names"]}, "host": ctx.host}
'''

NAMES = ["NCCL_ALGO", "CC_POOL_NUMBER", "CC_LOG_DIR", "OMP_NUM_THREADS", "CONTROLLER_ONLY", "CC_POOL_KEY"]


@pytest.fixture
def rank_module(tmp_path: Path) -> Path:
    (tmp_path / "envreport.py").write_text(RANK_SIDE)
    return tmp_path


def test_the_checks_env_and_cc_variables_reach_every_remote_rank(rank_module: Path, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONTROLLER_ONLY", "stays here")  # in the controller's environment, not the pool's
    monkeypatch.setenv("PYTHONPATH", str(rank_module))  # the controller resolves the runner path too
    template = f"env -i PYTHONPATH={rank_module} CC_HOST={{host}} {{python}}"  # a bare login, like ssh's
    launcher = HostsLauncher(["h1", "h2"], template)
    launcher.begin()  # one agent per host, joined
    manager = PoolManager(tmp_path / "logs", launcher=launcher)
    try:
        pool = manager.get(PoolKey("gloo", 4, env=(("NCCL_ALGO", "Ring"),)))
        answers = pool.run("envreport", {"names": NAMES}, 60, runner="envreport:measure")
    finally:
        manager.close(kill=True)
        launcher.close()  # the hosts' agents leave
    assert [a["host"] for a in answers] == ["h1", "h1", "h2", "h2"]
    for a in answers:
        env = a["env"]
        assert env["NCCL_ALGO"] == "Ring"  # the check's env:
        # the log directory is the host's agent's own (the controller's is not on that host)
        assert env["CC_POOL_NUMBER"] == "1" and "clustercheck-agent-" in env["CC_LOG_DIR"]
        assert env["OMP_NUM_THREADS"]  # the pool's thread count for 2 ranks per node
        assert env["CONTROLLER_ONLY"] is None  # the rest of the controller's environment stays there
        assert env["CC_POOL_KEY"] is None  # the key came on stdin and never sits in the environment


def test_without_the_env_line_a_bare_rank_would_miss_the_checks_env(rank_module: Path) -> None:
    """The template really strips the environment: the same rank code, started by it directly, sees
    no NCCL_ALGO although the controller has one (what ssh did to the Ring check before)."""
    import subprocess
    import sys

    template = f"env -i PYTHONPATH={rank_module} CC_HOST={{host}} {{python}}"
    argv = HostsLauncher(["h1"], template).argv("h1")
    code = "import os, envreport; print(os.environ.get('NCCL_ALGO'))"
    out = subprocess.run([*argv, "-c", code], env={**os.environ, "NCCL_ALGO": "Ring"}, capture_output=True,
                         text=True, check=True, timeout=60)
    assert out.stdout.strip() == "None"
    assert argv[0] == "env" and sys.executable in argv


def test_only_what_the_pool_set_travels() -> None:
    base = {"HOME": "/root", "NCCL_DEBUG": "WARN", "PATH": "/bin"}
    pool = {**base, "NCCL_ALGO": "Ring", "NCCL_DEBUG": "INFO", "CC_WORLD_SIZE": "4", "OMP_NUM_THREADS": "1"}
    assert rank_env(pool, base) == {"CC_WORLD_SIZE": "4", "NCCL_ALGO": "Ring", "NCCL_DEBUG": "INFO",
                                    "OMP_NUM_THREADS": "1"}
    # the check's env: travels even where the controller happens to hold the same value
    same = {**base, "NCCL_ALGO": "Ring"}
    assert "NCCL_ALGO" not in rank_env(same, same)
    assert rank_env(same, same, check_env={"NCCL_ALGO": "Ring"}) == {"NCCL_ALGO": "Ring"}


def test_the_env_line_round_trips_values_a_shell_would_split() -> None:
    env = {"NCCL_IB_HCA": "=mlx5_0:1,mlx5_1:1", "CC_LOG_DIR": "/runs/a b/'quoted' $HOME `x`;"}
    line = env_line(env)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert read_env(line.decode()) == env
    assert read_env("") == {} and read_env("\n") == {}  # local ranks get no such line


@pytest.mark.parametrize("line", ['["NCCL_ALGO"]', '{"NCCL_ALGO": 1}', '{"A=B": "x"}', '{"A": "x\\u0000"}',
                                  '{"": "x"}'])
def test_a_malformed_env_line_is_refused(line: str) -> None:
    with pytest.raises(ValueError):
        read_env(line)


def test_under_ssh_the_words_clustercheck_adds_are_quoted_for_the_remote_shell_and_elsewhere_left_alone(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """ssh hands the words after the host to a shell on that host (tests/test_hosts_ssh.py runs it through a
    real sshd); srun and env take them as they are. (An executable named ssh stands in for it here.)"""
    import sys

    ssh = tmp_path / "ssh"
    ssh.write_text("#!/bin/sh\n")
    ssh.chmod(0o755)
    monkeypatch.setattr(sys, "executable", "/opt/py env/bin/python")
    argv = HostsLauncher(["h1"], f"{ssh} -p 2222 {{host}} {{python}}").argv("h1", "--node", "h1", "--x", "a b")
    assert argv == [str(ssh), "-p", "2222", "h1", "'/opt/py env/bin/python'", "--node", "h1", "--x", "'a b'"]
    assert HostsLauncher(["h1"], f"{ssh} {{host}} 'cd /w && {{python}}'").argv("h1")[-1] == \
        "cd /w && '/opt/py env/bin/python'"
    env = HostsLauncher(["h1"], "env CC_HOST={host} {python}").argv("h1", "--x", "a b")
    assert env == ["env", "CC_HOST=h1", "/opt/py env/bin/python", "--x", "a b"]
