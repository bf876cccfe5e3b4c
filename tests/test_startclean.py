"""What a run stopped while it starts leaves behind: nothing. The hosts launcher's agent directory, an
agent's work directory, a run directory two runs picked at once, and a .starting-<pid> directory of a
controller that was SIGKILLed (tests for the faults an audit found, one each)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from joining import project  # noqa: E402
from test_hosts_agents import run as hosts_run  # noqa: E402


def descendants_named(root: int, word: bytes) -> list[int]:
    """The live processes under `root` whose command line holds the argument `word`."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if word not in (proc / "cmdline").read_bytes().split(b"\0"):
                continue
            pid = int(proc.name)
            while pid > 1:
                pid = int((Path("/proc") / str(pid) / "stat").read_text().rpartition(")")[2].split()[1])
                if pid == root:
                    found.append(int(proc.name))
                    break
        except (OSError, ValueError):
            continue
    return found


def stopped_while_agents_start(tmp_path: Path) -> tuple[str, Path]:
    """A hosts run SIGTERMed once an agent process exists (the agents import torch, then try to reach the
    controller: no pool yet): its output, and the $TMPDIR it and its agents had."""
    project(tmp_path)
    tmp = tmp_path / "t"
    tmp.mkdir()
    ctl = hosts_run(tmp_path, env={"TMPDIR": str(tmp)})
    end = time.monotonic() + 120
    while not descendants_named(ctl.pid, b"agent") and time.monotonic() < end and ctl.poll() is None:
        time.sleep(0.05)
    assert descendants_named(ctl.pid, b"agent"), "no agent started"
    ctl.send_signal(signal.SIGTERM)
    out, _ = ctl.communicate(timeout=120)
    assert ctl.returncode == 2, out
    assert "stopped before any check ran" in out, out
    return out, tmp


@pytest.mark.pool
def test_a_hosts_run_stopped_while_its_agents_start_keeps_no_agent_directory(tmp_path: Path) -> None:
    """Failed before: out of SIGTERM during the agents' start, close() counted every agent's non-zero exit
    (killed by close itself) as a failure and kept $TMPDIR/clustercheck-hosts-*, naming it nowhere."""
    out, tmp = stopped_while_agents_start(tmp_path)
    assert not list(tmp.glob("clustercheck-hosts-*")), (out, os.listdir(tmp))


@pytest.mark.pool
def test_agents_stopped_while_they_start_end_at_once_and_leave_no_work_directory(tmp_path: Path) -> None:
    """Failed before: an agent acted on SIGTERM only once torch's import (and a try to reach the controller)
    was over, seconds on a busy host: the launcher's close SIGKILLed it first, and its $TMPDIR/clustercheck-
    agent-* stayed on the host. Now SIGTERM before it reached the controller ends it at once, cleanly."""
    out, tmp = stopped_while_agents_start(tmp_path)
    assert not os.listdir(tmp), out


def test_an_agent_stopped_before_any_pool_leaves_no_work_directory(tmp_path: Path) -> None:
    """Failed before: warm() makes an empty zygote.log, and the agent kept its directory whenever it held a
    file, saying that 'the ranks' output and NCCL's logs stay in' a directory with one 0-byte file."""
    tmp = tmp_path / "t"
    tmp.mkdir()
    said = tmp_path / "agent.log"
    with said.open("wb") as log:
        agent = subprocess.Popen([sys.executable, "-m", "clustercheck", "agent", "--index", "0", "--node", "x",
                                  "--controller", "127.0.0.1:9", "--token-stdin", "--join-timeout", "30"],
                                 stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT,
                                 env={**os.environ, "TMPDIR": str(tmp)})
    assert agent.stdin is not None
    agent.stdin.write(b"tok-" + b"5" * 60 + b"\n")
    agent.stdin.close()
    end = time.monotonic() + 120  # past its start (warm: the zygote's log is made), trying the controller
    while not list(tmp.glob("*/zygote.log")) and time.monotonic() < end and agent.poll() is None:
        time.sleep(0.05)
    assert list(tmp.glob("*/zygote.log")), said.read_text()
    agent.send_signal(signal.SIGTERM)
    assert agent.wait(120) == 128 + signal.SIGTERM, said.read_text()
    assert "stay in" not in said.read_text(), said.read_text()
    assert not os.listdir(tmp), said.read_text()


def test_a_run_directory_another_run_makes_first_is_left_to_it(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Failed before: unique() looked whether the name existed, then opening() made it; another run that
    made it in between (two runs in one --out in one second) had this one refused, exit 4 '(File exists)'.
    Here the other run's mkdir comes just before this run's first mkdir of the name."""
    from clustercheck.run.rundir import opening, unique

    out = tmp_path / "out"
    out.mkdir()
    name = out / "20260101-000000-cpu"
    real_mkdir = Path.mkdir
    raced: list[bool] = []

    def mkdir(self: Path, *args: object, **kwargs: object) -> None:
        if self == name and not raced:
            raced.append(True)
            os.mkdir(name)  # the other run's
        real_mkdir(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "mkdir", mkdir)
    run_dir = unique(name)
    with opening(out, run_dir):
        (run_dir / "run.jsonl").write_text("{}\n")
    assert raced and run_dir.name == "20260101-000000-cpu-2"
    assert (run_dir / "run.jsonl").is_file() and not os.listdir(name)


def small_project(tmp: Path) -> None:
    """Two small CPU all_reduce checks, a and b, and their limits: a whole local run in seconds."""
    (tmp / "th").mkdir()
    (tmp / "th" / "cpu.yaml").write_text(
        "platform: cpu\ndetect: {gpu_count: 0}\ndefaults:\n  all_reduce:\n"
        "    busbw: {limit: '>= 0.000001', unit: GB/s, source: any working link}\n")
    (tmp / "s.yaml").write_text("checks:\n" + "".join(
        f"  - id: {c}\n    measure: all_reduce\n    params: {{sizes: [1KiB], iters: 2}}\n" for c in "ab"))


SIGINT_IN_B = ("import os, signal\n\n\ndef pytest_runtest_setup(item):\n"
               "    if 'b' in item.name:  # mid-run: a's result is in the record, b's not\n"
               "        os.kill(os.getpid(), signal.SIGINT)\n")


@pytest.mark.pool
def test_a_run_that_inherited_sigint_ignored_ignores_it_mid_run_too(tmp_path: Path) -> None:
    """Failed before: Stopper.install replaced an inherited SIG_IGN for SIGINT (a `cmd &` job of a script),
    so the Ctrl-C the run ignored while it started stopped it once it ran (INCOMPLETE, exit 2)."""
    small_project(tmp_path)
    (tmp_path / "sigint_in_b.py").write_text(SIGINT_IN_B)
    out = subprocess.run([sys.executable, "-m", "clustercheck", "run", "s.yaml", "--thresholds", "th", "--out", "out",
                          "--no-progress", "-p", "sigint_in_b"], capture_output=True, text=True, cwd=tmp_path,
                         timeout=300, env={**os.environ, "PYTHONPATH": os.pathsep.join(
                             [str(tmp_path), *filter(None, [os.environ.get("PYTHONPATH")])])},
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    assert out.returncode == 0, out.stdout + out.stderr
    results = json.loads((tmp_path / "out" / "latest" / "results.json").read_text())
    assert results["verdict"] == "PASS", results


def dead_pids(n: int) -> list[int]:
    """`n` pids that no process has now (os.kill says so), from the top of the range down."""
    found: list[int] = []
    pid = 999999
    while len(found) < n:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            found.append(pid)
        except PermissionError:
            pass
        pid -= 1
    return found


@pytest.mark.pool
def test_a_run_removes_the_starting_directory_a_killed_controller_left(tmp_path: Path) -> None:
    """Failed before: a controller SIGKILLed while it started left --out/.starting-<pid>/ for good. Now a run
    removes those of pids not alive here, untouched for an hour (a live run on another host sharing --out
    has a pid unknown here, and a fresh directory): only those."""
    small_project(tmp_path)
    left, fresh = dead_pids(2)
    old = time.time() - 2 * 3600
    for pid in (left, fresh, os.getpid()):
        (tmp_path / "out" / f".starting-{pid}" / "logs").mkdir(parents=True)
        (tmp_path / "out" / f".starting-{pid}" / "logs" / "pool1-rank0.log").write_text("rank 0\n")
        if pid != fresh:
            for path in ("logs/pool1-rank0.log", "logs", "."):
                os.utime(tmp_path / "out" / f".starting-{pid}" / path, (old, old))
    out = subprocess.run([sys.executable, "-m", "clustercheck", "run", "s.yaml", "--thresholds", "th", "--out", "out",
                          "--no-progress"], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert sorted(p.name for p in (tmp_path / "out").glob(".starting-*")) == \
        sorted([f".starting-{fresh}", f".starting-{os.getpid()}"]), out.stdout + out.stderr


def test_an_agent_stopped_inside_a_try_to_reach_the_controller_ends_without_finishing_it(tmp_path: Path) -> None:
    """Failed before: c10d's TCPStore client retries its connect inside C++ (5 s a try, no Python between),
    so an agent SIGTERMed while it tried the controller acted on the signal only once the try was over (c10d
    said it timed out): longer than the hosts launcher waits before SIGKILL, and its work directory stayed.
    Here the controller is a listener that accepts and never answers: the agent is inside its first try."""
    import socket
    import threading

    listener = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []
    threading.Thread(target=lambda: accepted.append(listener.accept()[0]), daemon=True).start()
    tmp = tmp_path / "t"
    tmp.mkdir()
    said = tmp_path / "agent.log"
    with said.open("wb") as log:
        agent = subprocess.Popen([sys.executable, "-m", "clustercheck", "agent", "--index", "0", "--node", "x",
                                  "--controller", f"127.0.0.1:{listener.getsockname()[1]}", "--token-stdin",
                                  "--join-timeout", "60"], stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT,
                                 env={**os.environ, "TMPDIR": str(tmp)})
    assert agent.stdin is not None
    agent.stdin.write(b"tok-" + b"5" * 60 + b"\n")
    agent.stdin.close()
    end = time.monotonic() + 120
    while not accepted and time.monotonic() < end and agent.poll() is None:
        time.sleep(0.02)
    assert accepted, said.read_text()
    agent.send_signal(signal.SIGTERM)
    assert agent.wait(120) == 128 + signal.SIGTERM, said.read_text()
    listener.close()
    assert "timed out" not in said.read_text(), said.read_text()
    assert not os.listdir(tmp), said.read_text()
