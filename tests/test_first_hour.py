"""A first hour without surprises: what a new user hit, each as a test that failed before the fix.
Commands run as a user types them (`python -m clustercheck ...` in a fresh directory); external commands
(scontrol, srun, ssh) are absent from PATH or stand-ins that say what the real ones say when they fail."""

from __future__ import annotations

import io
import json
import math
import fnmatch
import os
import re
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import CPU_THRESHOLDS, small_check

from clustercheck.progress import Progress
from clustercheck.units import fmt, fmt_unit, format_bytes, plural


def cc(*args: str, cwd: Path, path: str | None = None, env: dict[str, str] | None = None,
       timeout: float = 300) -> subprocess.CompletedProcess[str]:
    environ = {**os.environ, **(env or {})}
    if path is not None:
        environ["PATH"] = path
    return subprocess.run([sys.executable, "-m", "clustercheck", *args], capture_output=True, text=True, cwd=cwd,
                          env=environ, timeout=timeout)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    (tmp_path / "th").mkdir()
    (tmp_path / "th" / "cpu.yaml").write_text(CPU_THRESHOLDS)
    (tmp_path / "s.yaml").write_text("checks:\n" + small_check("too-fast"))
    (tmp_path / "bin").mkdir()  # a PATH without scontrol, srun or ssh
    return tmp_path


def tool(tree: Path, name: str, script: str) -> None:
    """A stand-in for an external command on the test's PATH."""
    exe = tree / "bin" / name
    exe.write_text("#!/bin/sh\n" + script)
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)


def one_line(out: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in out.stderr + out.stdout
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    return lines[0]


# 1. --drain and resume without Slurm: refused before anything is measured, one line, exit 4

def test_drain_without_scontrol_is_refused_before_measuring(tree: Path) -> None:
    out = cc("run", "s.yaml", "--thresholds", "th", "--out", "o", "--drain", cwd=tree, path=str(tree / "bin"))
    assert out.returncode == 4
    assert one_line(out) == ("ERROR: --drain runs scontrol, which is not on the PATH here (no Slurm on "
                             "this machine?); --drain-dry-run prints the commands it would run")
    assert not (tree / "o").exists()  # nothing measured, nothing written


@pytest.mark.parametrize("act", ["drain", "taint"])
def test_acting_and_its_dry_run_together_are_refused_before_measuring(tree: Path, act: str) -> None:
    """--drain --drain-dry-run drained for real (and --taint --taint-dry-run tainted) while the options read
    it as a dry run: which was meant is not known, and acting on a dry run's word is the worse guess."""
    out = cc("run", "s.yaml", "--thresholds", "th", "--out", "o", f"--{act}", f"--{act}-dry-run", cwd=tree)
    assert out.returncode == 4
    assert one_line(out) == (f"ERROR: --{act} and --{act}-dry-run together: give --{act} to act on the excluded "
                             f"nodes, or --{act}-dry-run to print what it would do")
    assert not (tree / "o").exists()


@pytest.mark.parametrize("args", [("resume",), ("resume", "--dry-run"), ("resume", "node[1-2]", "--dry-run")])
def test_resume_without_scontrol_is_one_line(tree: Path, args: tuple[str, ...]) -> None:
    out = cc(*args, cwd=tree, path=str(tree / "bin"))
    assert out.returncode == 4
    assert one_line(out).startswith("clustercheck: error: clustercheck resume runs scontrol, which is not on the PATH")


@pytest.mark.parametrize("args", [("resume", "n[1-"), ("resume", "--k8s", "n[1-", "--dry-run"), ("resume", "")])
def test_resume_of_a_malformed_or_empty_hostlist_is_one_line(tree: Path, args: tuple[str, ...]) -> None:
    """A malformed hostlist was a BadHostlist traceback, exit 3; an empty one meant every node."""
    out = cc(*args, cwd=tree)
    assert out.returncode == 4 and "Traceback" not in out.stderr
    assert one_line(out).startswith("clustercheck resume: error: argument HOSTLIST: ")
    assert ("unbalanced brackets" if args[-1] != "" else "needs a value") in one_line(out)


def test_resume_says_each_node_it_was_asked_for_and_did_not_resume(tree: Path) -> None:
    """`resume n9` for a node Slurm does not know, or one that is not drained, printed nothing, exit 0."""
    tool(tree, "scontrol", """[ "$1" = show ] || exit 0
echo 'NodeName=n1 Arch=x86_64 State=IDLE+DRAIN Reason=clustercheck: ok busbw 0.01 < 0.05 [root@2026-11-28T00:00:00]'
echo 'NodeName=n2 Arch=x86_64 State=IDLE Reason=(null)'
""")
    out = cc("resume", "n[1-2,9]", "--dry-run", cwd=tree, path=f"{tree / 'bin'}:/usr/bin:/bin")
    assert out.returncode == 4, out.stdout + out.stderr  # n9: no such node
    assert out.stdout.splitlines() == ["would run: scontrol update NodeName=n1 State=RESUME",
                                       "left alone n2: not drained", "left alone n9: no such node in scontrol show node"]
    known = cc("resume", "n2", "--dry-run", cwd=tree, path=f"{tree / 'bin'}:/usr/bin:/bin")
    assert known.returncode == 0 and "left alone n2: not drained" in known.stdout


@pytest.mark.parametrize("hosts, said", [
    ("n1,n/1", "--hosts 'n1,n/1': 'n/1' is no host name"),  # it was an agent log's path: INTERNALERROR, exit 3
    ("n[1-2],n2", "--hosts names n2 more than once: one agent per host"),  # the duplicate was dropped, silently
    ("-n1", "--hosts '-n1': '-n1' is no host name"),  # pytest read it as an option: a four-line usage error
])
def test_hosts_that_name_no_host_once_are_one_line(tree: Path, hosts: str, said: str) -> None:
    out = cc("run", "s.yaml", "--thresholds", "th", "--out", "o", "--launcher", "hosts", f"--hosts={hosts}",
             "--host-command", "{python}", "--store-addr", "127.0.0.1", cwd=tree)
    assert out.returncode == 4, out.stdout + out.stderr
    assert one_line(out).startswith(f"ERROR: {said}"), out.stderr


@pytest.mark.parametrize("addr, said", [
    ("-x", "--store-addr -x: '-x' names no address this controller can resolve"),
    ("192.0.2.1", "--store-addr 192.0.2.1:*: this controller cannot reach its own store at the address the agents "
                  "are told"),  # TEST-NET-1 (RFC 5737): no host here has it; a 30 s wait, then a torch traceback
])
def test_a_store_address_the_controller_cannot_reach_is_one_line_at_once(tree: Path, addr: str, said: str) -> None:
    out = cc("run", "s.yaml", "--thresholds", "th", "--out", "o", "--launcher", "hosts", "--hosts", "n1",
             "--host-command", "{python}", f"--store-addr={addr}", cwd=tree, timeout=25)
    assert out.returncode == 4, out.stdout + out.stderr
    assert fnmatch.fnmatch(one_line(out), f"ERROR: {said}*"), out.stderr


def test_ranks_that_crash_while_the_nodes_are_asked_for_their_facts_are_a_harness_error(tree: Path) -> None:
    """One host's ranks die as they start (a broken Python there: its sitecustomize exits 7), while the run
    asks each node for its platform facts: exit 3, not 4 (usage or bad input), with the ranks' words."""
    crash = tree / "crash"
    crash.mkdir()
    (crash / "sitecustomize.py").write_text(
        "import os\nif b'clustercheck.run.worker' in open('/proc/self/cmdline', 'rb').read().split(b'\\0'):\n"
        "    print('this rank crashes on start', flush=True)\n    os._exit(7)\n")
    wrap = tree / "wrap.sh"
    wrap.write_text(f'#!/bin/sh\nh=$1; shift\ncase $h in bad*) export CLUSTERCHECK_ZYGOTE=0 PYTHONPATH={crash};; esac\n'
                    'exec "$@"\n')
    wrap.chmod(0o755)
    out = cc("run", "s.yaml", "--thresholds", "th", "--out", "o", "--launcher", "hosts", "--hosts", "n1,bad2",
             "--host-command", f"{wrap} {{host}} {{python}}", "--store-addr", "127.0.0.1", cwd=tree)
    assert out.returncode == 3, out.stdout + out.stderr
    assert "Traceback" not in out.stdout + out.stderr
    # ranks 2 and 3 (both bad2's) die at once: either may be named first
    assert re.search(r"ERROR: could not read the nodes' platform facts: rank [23] \(bad2\) exited with code 7",
                     out.stdout), out.stdout
    assert "this rank crashes on start" in out.stdout and "nothing was measured" in out.stdout


def test_slurm_launcher_without_srun_is_refused_at_once(tree: Path) -> None:
    out = cc("run", "s.yaml", "--thresholds", "th", "--out", "o", "--launcher", "slurm", cwd=tree,
             path=str(tree / "bin"), env={"SLURM_JOB_NODELIST": "n[1-2]", "SLURM_JOB_ID": "7"})
    assert out.returncode == 4
    assert one_line(out) == ("ERROR: --launcher slurm starts its node agents with srun, which is not on the PATH here")


def test_a_host_command_not_on_the_path_is_refused_at_once(tree: Path) -> None:
    out = cc("run", "s.yaml", "--thresholds", "th", "--out", "o", "--launcher", "hosts", "--hosts", "n1",
             "--host-command", "nossh {host} {python}", cwd=tree, path=str(tree / "bin"))
    assert out.returncode == 4
    assert one_line(out) == "ERROR: --host-command 'nossh {host} {python}': 'nossh' is not on the PATH here"


def test_a_host_command_whose_program_is_the_host_and_cannot_start_is_one_line(tree: Path) -> None:
    out = cc("run", "s.yaml", "--thresholds", "th", "--out", "o", "--launcher", "hosts", "--hosts", "n1",
             "--host-command", "{host} {python}", cwd=tree)
    assert out.returncode == 4 and "Traceback" not in out.stdout + out.stderr
    assert one_line(out) == "ERROR: --host-command: cannot start 'n1': No such file or directory"


def test_a_scheduler_command_that_cannot_run_is_a_status_not_an_exception() -> None:
    from clustercheck.record.exclude import run

    assert run(["clustercheck-no-such-scontrol", "update"]) == (127, "clustercheck-no-such-scontrol: not found on "
                                                                     "the PATH")
    assert run(["sleep", "5"], timeout=0.2) == (124, "sleep: no answer in 0.2 s")


def test_drain_leaves_alone_a_node_an_admin_drained_or_took_down(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--drain ran `scontrol update ... State=DRAIN Reason=clustercheck: ...` without reading the node: an
    admin's reason was overwritten, and `clustercheck resume` would then bring back the node they drained."""
    from clustercheck.record.exclude import drain

    tool(tree, "scontrol", f"""echo "$@" >> {tree / 'scontrol.log'}
[ "$1" = show ] || exit 0
case "$4" in
  n1) echo 'NodeName=n1 Arch=x86_64 State=IDLE+DRAIN Reason=bad DIMM, ticket 42 [admin@2026-11-28T00:00:00]';;
  n2) echo 'NodeName=n2 Arch=x86_64 State=IDLE Reason=(null)';;
  n3) echo 'NodeName=n3 Arch=x86_64 State=IDLE+DRAIN Reason=clustercheck: old [root@2026-11-28T00:00:00]';;
  n4) echo 'NodeName=n4 Arch=x86_64 State=DOWN+NOT_RESPONDING Reason=Not responding [slurm@2026-11-28T00:00:00]';;
esac
""")
    monkeypatch.setenv("PATH", f"{tree / 'bin'}:/usr/bin:/bin")
    why = "node-ar busbw 0 < 1 GB/s"
    out = drain({n: why for n in ("n1", "n2", "n3", "n4")}, dry_run=False)
    assert [(e["command"][2], e["rc"], e["output"]) for e in out] == [
        ("NodeName=n1", None, "left alone: already drained by someone else (bad DIMM, ticket 42)"),
        ("NodeName=n2", 0, ""), ("NodeName=n3", 0, ""),
        ("NodeName=n4", 0, "")]  # Slurm's own DOWN is no admin's: drained, it stays out when slurmd answers again
    updates = [line for line in (tree / "scontrol.log").read_text().splitlines() if line.startswith("update")]
    assert updates == [f"update NodeName={n} State=DRAIN Reason=clustercheck: {why}" for n in ("n2", "n3", "n4")]
    (tree / "scontrol.log").unlink()
    dry = drain({"n1": why}, dry_run=True)  # a dry run reads nothing and says the command
    assert [(e["rc"], e["output"]) for e in dry] == [(None, "dry run")] and not (tree / "scontrol.log").exists()
    # the run's end says which were left alone, and why (it said "would run" of every rc None)
    from clustercheck.report.terminal import exclusion_lines

    said = [line for line, _ in exclusion_lines({"hostlist": "n[1-4]", "reasons": {n: why for n in ("n1", "n2")},
                                                 "drain": [*out, *dry]}, 4)]  # type: ignore[typeddict-item]
    assert "  drain left alone: already drained by someone else (bad DIMM, ticket 42): scontrol update NodeName=n1 " \
           f"State=DRAIN 'Reason=clustercheck: {why}'" in said, said
    assert any(line.startswith("  drain would run: scontrol update NodeName=n1") for line in said), said


@pytest.mark.pool
def test_a_drain_that_fails_never_costs_the_run_its_reports(tree: Path) -> None:
    tool(tree, "scontrol", '[ "$1" = show ] && { echo "NodeName=$4 State=IDLE Reason=(null)"; exit 0; }\n'
         'echo "slurm_update error: Invalid user id" >&2\nexit 1\n')  # the node is read; its drain fails
    out = cc("run", "s.yaml", "--thresholds", "th", "--out", "o", "--drain", cwd=tree,
             path=f"{tree / 'bin'}:{os.environ['PATH']}")
    assert out.returncode == 1, out.stdout[-2000:] + out.stderr[-2000:]  # the check failed; the drain is a note
    assert "Traceback" not in out.stdout + out.stderr
    # "failed", with scontrol's words: it said "drain ran (exit 1)", which read as done
    assert "drain failed (exit 1: slurm_update error: Invalid user id): scontrol update" in out.stdout
    latest = tree / "o" / "latest"
    assert {"results.json", "junit.xml", "report.html", "sla.json"} <= {p.name for p in latest.iterdir()}
    assert cc("report", str(latest), cwd=tree).returncode == 1  # finished, not INCOMPLETE


# 5. the hosts launcher names the launcher's own error first, and runs on one machine without ssh

@pytest.mark.pool
def test_the_hosts_launcher_quotes_the_launchers_own_error_first(tree: Path) -> None:
    tool(tree, "ssh", 'echo "ssh: connect to host $1 port 22: Connection refused" >&2\nexit 255\n')
    out = cc("run", "s.yaml", "--thresholds", "th", "--out", "o", "--launcher", "hosts", "--hosts", "localhost",
             cwd=tree, path=f"{tree / 'bin'}:{os.environ['PATH']}")
    assert out.returncode == 3  # nothing measured, and no input at fault (tests/test_hosts_none_joined.py)
    first = out.stderr.strip().splitlines()[0]  # in clustercheck's words, not pytest.exit's `Exit: `
    assert first.startswith("clustercheck: ERROR: no host's agent joined (localhost: its agent exited with 255 before joining: "
                            "ssh: connect to host localhost port 22: Connection refused); check --hosts and "
                            "--host-command; the agents' output: "), first
    assert "advertised at" not in out.stderr  # loopback reaches an agent on this machine: not the cause
    assert not (tree / "o").exists()  # refused before any record: there is no node to measure


@pytest.mark.pool
def test_the_one_machine_hosts_example_runs(tree: Path) -> None:
    """docs/multi-node.md's example that runs on one machine: the hosts launcher without ssh."""
    (tree / "s.yaml").write_text("checks:\n" + small_check("ok"))
    out = cc("run", "s.yaml", "--thresholds", "th", "--out", "o", "--launcher", "hosts", "--hosts", "localhost",
             "--host-command", "{python}", cwd=tree)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert "ok[localhost]" in out.stdout


# 6. misspelled options: the closest known one, in one line, exit 4

@pytest.mark.parametrize(("typo", "meant"), [("--platfrom", "--platform"), ("--duraton", "--duration"),
                                             ("--thresholdz", "--thresholds"), ("--junitxm=x.xml", "--junitxml")])
def test_a_misspelled_option_gets_the_closest_known_one(tree: Path, typo: str, meant: str) -> None:
    out = cc("run", typo, "90s" if "=" not in typo else "s.yaml", cwd=tree)
    assert out.returncode == 4
    assert one_line(out) == f"clustercheck: error: unknown option {typo.split('=')[0]}; did you mean {meant}?"


def test_pytest_options_close_to_ours_still_reach_pytest(tree: Path) -> None:
    out = cc("run", "s.yaml", "--thresholds", "th", "--durations=1", "--collect-only", "-q", cwd=tree)
    assert out.returncode == 0, out.stderr
    assert "too-fast" in out.stdout


# 7. --out's `latest`: never unlinked or followed unless clustercheck made it

@pytest.mark.parametrize("kind", ["file", "outside-link", "directory"])
def test_a_latest_clustercheck_did_not_make_is_refused(tree: Path, kind: str) -> None:
    out_dir = tree / "o"
    out_dir.mkdir()
    precious = tree / "precious.txt"
    precious.write_text("keep me")
    latest = out_dir / "latest"
    if kind == "file":
        latest.write_text("mine")
    elif kind == "directory":
        latest.mkdir()
    else:
        latest.symlink_to(precious)
    out = cc("run", "s.yaml", "--thresholds", "th", "--out", "o", "--platform", "cpu", cwd=tree)
    assert out.returncode == 4
    assert one_line(out).startswith(f"ERROR: --out o: o/latest ")
    assert "clustercheck replaces only the link it made" in out.stderr
    assert precious.read_text() == "keep me" and os.path.lexists(latest)
    assert (latest.read_text() == "mine") if kind == "file" else True
    assert [p.name for p in out_dir.iterdir()] == ["latest"]  # no run started


# 8. lenient input refused in one line, exit 4

@pytest.mark.parametrize(("args", "message"), [
    (("--out", ""), "argument --out: --out needs a value, got an empty one"),
    (("--platform", ""), "argument --platform: --platform needs a value, got an empty one"),
    (("--ranks", "1024"), "--ranks 1024: this machine has"),
])
def test_empty_and_oversized_run_options_are_refused(tree: Path, args: tuple[str, ...], message: str) -> None:
    out = cc("run", "s.yaml", "--thresholds", "th", *args, cwd=tree)
    assert out.returncode == 4
    assert message in one_line(out)
    assert not (tree / "clustercheck-out").exists()


def test_ranks_beyond_the_machine_name_force() -> None:
    from clustercheck.errors import UserError
    from clustercheck.run.options import RANKS_PER_CORE, _fits_here

    with pytest.raises(UserError, match=r"room for at most \d+ local rank\(s\) .*; --force runs them anyway"):
        _fits_here(RANKS_PER_CORE * (os.cpu_count() or 1) + 1)
    _fits_here(2)


@pytest.mark.parametrize("expect", ["busbw_min=-1", "ib_rate_gbps=-400", "nvlinks_per_gpu=-2", "gpu_count=-8",
                                    "busbw_min={all_reduce: -5}"])
def test_negative_expectations_are_refused(tree: Path, expect: str) -> None:
    out = cc("probe", "env", "--expect", expect, cwd=tree)
    assert out.returncode == 4
    # a rate (ib_rate_gbps) must be above 0: 0 would turn the check off, so its refusal says "above 0"
    assert "expected a number >= 0" in one_line(out) or "above 0, got -400" in one_line(out)


def test_binary_null_is_refused(tree: Path) -> None:
    (tree / "n.yaml").write_text("checks:\n  - id: t\n    measure: nccl_tests\n    params: {binary: null}\n")
    out = cc("run", "n.yaml", "--thresholds", "th", cwd=tree)
    assert out.returncode == 4
    assert one_line(out) == ("clustercheck: error: n.yaml:4: checks[0].params.binary: no program named (null); give "
                             "the program's name (an nccl-tests binary such as all_reduce_perf) or leave the key out") \
        or "binary: no program named (null)" in out.stderr


def test_the_hosts_launcher_starts_connections_in_waves(monkeypatch: pytest.MonkeyPatch) -> None:
    from clustercheck.run import hosts

    started: list[float] = []
    monkeypatch.setattr(hosts, "start_agent", lambda *a, **k: started.append(time.monotonic()))
    monkeypatch.setattr(hosts, "HOSTS_WAVE_PAUSE", 0.05)
    launcher = hosts.HostsLauncher([f"n{i}" for i in range(200)], "env {python}", "10.0.0.1")
    try:
        launcher.launch()  # one agent per host, through the template
    finally:
        shutil.rmtree(launcher.agent_dir)
    gaps = [b - a for a, b in zip(started, started[1:])]
    assert len(started) == 200
    assert sum(g >= 0.05 for g in gaps) == 200 // hosts.HOSTS_WAVE  # a pause after each wave of 64


# 2. progress under repetition: repetition, item within it, time to the deadline; never past the total

def test_progress_under_duration_counts_repetitions_and_time_to_the_deadline() -> None:
    log = io.StringIO()
    p = Progress(3, log, per_repetition=3, deadline=time.monotonic() + 90)
    for _ in range(7):
        p.start("hostmem-burn", "vm")
        p.finished_one()
    p.deadline = time.monotonic() - 5  # past the deadline: the last repetition finishes
    p.start("hostmem-burn", "vm")
    lines = log.getvalue().splitlines()
    assert lines[0].startswith("clustercheck [repetition 1, 1/3] hostmem-burn on vm, elapsed 0:00, 1:2")
    assert lines[6].startswith("clustercheck [repetition 3, 1/3]")
    assert lines[7].startswith("clustercheck [repetition 3, 2/3]") and "time is up: finishing this repetition" in lines[7]
    assert not any("-" in line.split("elapsed")[1] for line in lines)  # never negative time


def test_progress_under_repeat_counts_each_repetition() -> None:
    log = io.StringIO()
    p = Progress(4, log, per_repetition=2)
    for _ in range(4):
        p.start("c", None)
        p.finished_one()
    assert [line.split("]")[0] for line in log.getvalue().splitlines()] == [
        "clustercheck [repetition 1/2, 1/2", "clustercheck [repetition 1/2, 2/2", "clustercheck [repetition 2/2, 1/2",
        "clustercheck [repetition 2/2, 2/2"]


# 9. numbers by their unit, in one place

def test_numbers_are_formatted_by_their_unit() -> None:
    assert fmt_unit(90.89299999999999, "s") == "90.89 s" and fmt_unit(2.6310000000000002, "s") == "2.631 s"
    assert fmt_unit(24398852096, "B") == "22.7 GiB" and format_bytes(512) == "512 B"
    assert fmt_unit(-11.2, "%") == "-11.2%"
    assert plural(1, "row") == "1 row" and plural(3, "row") == "3 rows"
    assert fmt(float("inf")) == "inf" and fmt(float("-inf")) == "-inf"


def test_the_html_shows_memory_in_gib_and_rows_in_words() -> None:
    from clustercheck.report.html import _env, environment

    rows = dict(environment({"facts": {"host_memory": 24398852096, "gpu_count": 0}}))
    assert rows["host_memory"] == "22.7 GiB" and rows["gpu_count"] == "0"
    assert _env.from_string("{{ 1|plural('row') }}, {{ 90.89299999999999|unit('s') }}").render() == "1 row, 90.89 s"


# 3, 4, 9, 10 on a real run of the shipped suite, twice, as the user did

@pytest.mark.pool
def test_two_runs_of_the_shipped_suite_back_to_back(tmp_path: Path) -> None:
    prom = tmp_path / "cc.prom"
    first = cc("run", "--out", "o", "-p", "clustercheck_prometheus", f"--prometheus-textfile={prom}", cwd=tmp_path)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    second = cc("run", "--out", "o", cwd=tmp_path)
    assert second.returncode == 0, second.stdout[-3000:]
    out = first.stdout
    # progress in a log: a whole line per item, no terminal codes, never past the total
    progress = [line for line in out.splitlines() if line.startswith("clustercheck [")]
    assert [line.split("]")[0] for line in progress] == [f"clustercheck [{i}/4" for i in (1, 2, 3, 4)]
    assert "\r" not in out + first.stderr and "\x1b[" not in out + first.stderr
    # every file, by absolute path, and where the Prometheus text went
    runs = sorted(p.name for p in (tmp_path / "o").iterdir() if p.name != "latest")
    run_dir = (tmp_path / "o" / runs[0]).resolve()
    for name in ("run.jsonl", "results.json", "sla.json", "junit.xml", "ctrf.json", "report.html", "exclude.txt"):
        assert f" {run_dir / name}" in out
    assert f"  prometheus       {prom}" in out and prom.is_file()
    # shipped suites by name: no venv or checkout path in node ids
    results = json.loads((run_dir / "results.json").read_text())
    assert {r["nodeid"].split("::")[0] for r in results["results"]} == {"suites/cpu-smoke.yaml"}
    # two identical runs: noise within the baseline's own spread is never a regression, nor is latency at 8
    # bytes. A run slowed beyond that spread (the other test worker took the cores) is a real change of the
    # machine and may be named, and one within its own spread, wider than 25%, is not judged (exit 3);
    # tests/test_compare_rules.py and test_compare_audit.py hold the rule on fixed records
    cmp = cc("compare", runs[0], "--out", "o", cwd=tmp_path)
    regressions = [line for line in cmp.stdout.splitlines() if line.startswith("REGRESSION")]
    unjudged = [line for line in cmp.stdout.splitlines() if line.startswith("NOT JUDGED")]
    assert cmp.returncode == (1 if regressions else 3 if unjudged else 0), cmp.stdout
    assert "metric(s) compared at tolerance 5%" in cmp.stdout.splitlines()[-1], cmp.stdout
    for line in regressions:
        change = float(re.search(r"  ([-+][0-9.]+)%  ", line).group(1))  # type: ignore[union-attr]
        own = re.search(r"baseline's own spread \+-([0-9.]+)%", line)
        band = min(float(own.group(1)) / 100, 0.25) if own else 0.0  # the baseline's, counted up to 25%
        beyond = abs(math.log1p(change / 100)) > math.log1p(band)  # as a factor
        assert "time_us" not in line and abs(change) >= 5 and beyond, line
    bad = cc("compare", "no-such-run", "--out", "o", cwd=tmp_path)
    assert bad.returncode == 4 and f"runs in o: {runs[0]}, {runs[1]}" in bad.stderr
