"""`clustercheck run`'s start-up: the first rank pool starts before pytest (run/prestart.py) and is the
pool the checks run on; `--timings` says where the seconds went; input refused before pytest starts
leaves no rank and no directory behind. Real processes: the CLI as a user runs it, gloo ranks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from clustercheck.exitcodes import Exit

REPO = Path(__file__).resolve().parent.parent


def cli(tmp: Path, *args: str, **extra_env: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CLUSTERCHECK_", "CC_"))} | extra_env
    return subprocess.run([sys.executable, "-m", "clustercheck", "run", *args], cwd=tmp, env=env,
                          capture_output=True, text=True, timeout=300)


def processes_naming(text: str) -> list[int]:
    """Live processes whose environment or command line holds `text` (a rank carries its log directory)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            seen = (entry / "environ").read_bytes() + (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if text.encode() in seen:
            found.append(int(entry.name))
    return found


@pytest.mark.pool
def test_the_prestarted_pool_runs_the_checks_and_timings_say_where_the_seconds_went(tmp_path: Path) -> None:
    res = cli(tmp_path, "cpu-smoke", "--out", "out", "--timings")
    assert res.returncode == Exit.PASSED, res.stdout[-3000:] + res.stderr[-3000:]
    timings = res.stdout[res.stdout.index("clustercheck timings"):]
    for part in ("interpreter and clustercheck's imports", "suites and profiles checked", "pytest start-up and plugins",
                 "collection", "checks", "reports", "pool 1 started (2 rank(s)); slowest rank:", "import_torch", "zygote_wait",
                 "check allreduce-sweep", "in all"):
        assert part in timings, timings
    record = [json.loads(ln) for ln in (tmp_path / "out" / "latest" / "run.jsonl").read_text().splitlines()]
    (end,) = [e for e in record if e["type"] == "end"]
    assert end["pool_starts"] == 1  # the pool started before pytest is the one every check ran on
    # every check that ran (the across-nodes one says it needs two nodes and starts nothing)
    assert {e["pool"]["number"] for e in record if e["type"] == "result" and e["outcome"] != "skipped"} == {1}
    assert sorted(p.name for p in (tmp_path / "out" / "latest" / "logs").glob("pool1-rank*.log")) == \
        ["pool1-rank0.log", "pool1-rank1.log"]  # its logs moved into the run directory
    assert not list((tmp_path / "out").glob(".starting-*"))


def test_a_suite_refused_before_pytest_leaves_no_rank_and_no_directory(tmp_path: Path) -> None:
    """The first pool's ranks start at once, but a suite that does not read ends them with the run: no
    process carrying the run's directory lives on, and no --out directory is left behind."""
    (tmp_path / "bad.yaml").write_text("checks:\n  - id: x\n    measure: all_reducee\n")
    out = tmp_path / "deep" / "out"
    res = cli(tmp_path, "bad.yaml", "--out", str(out))
    assert res.returncode == Exit.BAD_INPUT and res.stderr.startswith("clustercheck: error: bad.yaml:3:"), res.stderr
    assert "Traceback" not in res.stdout + res.stderr
    assert processes_naming(str(out)) == []
    assert not (tmp_path / "deep").exists()


STARTED = """import os

with open(os.environ["STARTED_LOG"], "ab") as f:  # every Python process started: its command line
    f.write(open("/proc/self/cmdline", "rb").read().replace(b"\\0", b" ") + b"\\n")
"""


@pytest.mark.parametrize("why, args", [
    ("none", ["cpu-smoke", "-k", "small-latency"]),  # the control: a run that starts, so a zygote
    ("a missing --sign key", ["cpu-smoke", "--sign", "no-such.pem"]),
    ("a latest clustercheck did not make", ["cpu-smoke"]),
    ("--store-addr with local ranks", ["cpu-smoke", "--store-addr", "10.0.0.1:29500"]),
    ("--nodes with local ranks", ["cpu-smoke", "--nodes", "2"]),  # said by the launcher, not the options
])
def test_options_that_will_be_refused_start_no_rank_first(tmp_path: Path, why: str, args: list[str]) -> None:
    """The first pool starts before pytest, but not for a run whose options or --out will be refused:
    its zygote's and ranks' torch imports would be seconds of CPU for nothing. A sitecustomize on
    PYTHONPATH logs every Python process the run starts."""
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(STARTED)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "latest").write_text("not a link clustercheck made")
    out = "out" if why.startswith("a latest") else "out2"
    res = cli(tmp_path, *args, "--out", out, PYTHONPATH=str(tmp_path / "site"), STARTED_LOG=str(tmp_path / "started"))
    assert res.returncode == (Exit.PASSED if why == "none" else Exit.BAD_INPUT), res.stdout + res.stderr
    assert "Traceback" not in res.stdout + res.stderr
    started = (tmp_path / "started").read_text().splitlines()
    assert any("-m clustercheck run" in line for line in started), started
    ranks = [line for line in started if "clustercheck.run.zygote_serve" in line or "clustercheck.run.worker" in line]
    assert bool(ranks) == (why == "none"), (why, started)


# -- pytest isolated under `clustercheck run` (issue 32): a plugin installed beside clustercheck, and an ini
# file beside the suite, are the machine's, not the run's

PLUGIN = """import os

with open(os.environ["FAKEPLUG_SEEN"], "a") as f:
    f.write("imported\\n")


def pytest_addoption(parser):
    parser.addoption("--fake-flag", action="store_true")


def pytest_configure(config):
    with open(os.environ["FAKEPLUG_SEEN"], "a") as f:
        f.write(f"unraisable={config.pluginmanager.has_plugin('unraisableexception')} "
                f"assert={config.option.assertmode}\\n")
"""


@pytest.fixture
def machine(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A pytest plugin installed as a distribution (an entry point in group pytest11, found on PYTHONPATH),
    which writes what it saw when pytest loads it; a suite with a pytest.ini beside it that no run can
    start with (its addopts name an option nobody defines)."""
    site = tmp_path / "site"
    (site / "fakeplug-1.0.dist-info").mkdir(parents=True)
    (site / "fakeplug.py").write_text(PLUGIN)
    (site / "fakeplug-1.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: fakeplug\nVersion: 1.0\n")
    (site / "fakeplug-1.0.dist-info" / "entry_points.txt").write_text("[pytest11]\nfakeplug = fakeplug\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "pytest.ini").write_text("[pytest]\naddopts = --no-such-option\n")
    (tmp_path / "sub" / "s.yaml").write_text((REPO / "suites" / "cpu-smoke.yaml").read_text())
    (tmp_path / "test_x.py").write_text("def test_x():\n    pass\n")
    env = {**os.environ, "PYTHONPATH": str(site), "FAKEPLUG_SEEN": str(tmp_path / "seen")}
    return tmp_path, env


def _seen(tmp: Path) -> list[str]:
    seen = tmp / "seen"
    lines = seen.read_text().splitlines() if seen.exists() else []
    seen.unlink(missing_ok=True)
    return lines


def test_an_installed_plugin_is_loaded_only_when_named(machine: tuple[Path, dict[str, str]]) -> None:
    tmp, env = machine
    plain = subprocess.run([sys.executable, "-m", "pytest", "test_x.py", "-p", "no:cacheprovider", "-q"], cwd=tmp,
                           env=env, capture_output=True, text=True, timeout=120)
    assert plain.returncode == 0, plain.stdout  # pytest as usual: loaded
    assert _seen(tmp) == ["imported", "unraisable=True assert=rewrite"]
    run = [sys.executable, "-m", "clustercheck", "run", "sub/s.yaml", "--co", "-q"]
    res = subprocess.run(run, cwd=tmp, env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and "4 tests collected" in res.stdout, res.stdout + res.stderr
    assert _seen(tmp) == []  # not loaded, not even imported to read its options
    res = subprocess.run([*run, "-p", "fakeplug", "--fake-flag"], cwd=tmp, env=env, capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    # named: loaded, with its option; pytest's hunt for unraisable exceptions off, assertions not rewritten
    assert _seen(tmp) == ["imported", "unraisable=False assert=plain"]
    res = subprocess.run([*run, "--fake-flag"], cwd=tmp, env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == Exit.BAD_INPUT and res.stdout == ""
    assert res.stderr.strip() == ("clustercheck: error: unknown option --fake-flag: it is an option of the installed "
                                  "pytest plugin 'fakeplug', which clustercheck run loads only when named: add -p "
                                  "fakeplug")


def test_no_ini_file_or_rootdir_comes_from_the_suites_folder_unless_asked(machine: tuple[Path, dict[str, str]]) -> None:
    tmp, env = machine
    res = subprocess.run([sys.executable, "-m", "clustercheck", "run", "sub/s.yaml", "--co"], cwd=tmp, env=env,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"rootdir: {tmp}\n" in res.stdout  # the working directory, not sub/
    # the header says no ini file was read, not pytest's "configfile: ../../dev/null" for the -c that does it
    assert "configfile: none (clustercheck run reads no ini file; -c FILE names one)\n" in res.stdout, res.stdout
    assert "dev/null" not in res.stdout
    res = subprocess.run([sys.executable, "-m", "clustercheck", "run", "sub/s.yaml", "--co", "-c", "sub/pytest.ini"],
                         cwd=tmp, env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == Exit.BAD_INPUT  # the user's -c wins: that file's addopts are read, and refused
    assert "unrecognized arguments: --no-such-option" in res.stderr, res.stdout + res.stderr
    res = subprocess.run([sys.executable, "-m", "clustercheck", "run", "sub/s.yaml", "--co", "--rootdir=sub"], cwd=tmp,
                         env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr  # the user's rootdir, and still no ini file read
    assert f"rootdir: {tmp / 'sub'}\n" in res.stdout and "configfile: none" in res.stdout, res.stdout
    plain = subprocess.run([sys.executable, "-m", "pytest", "sub/s.yaml", "--co", "-p", "no:cacheprovider"], cwd=tmp,
                           env=env, capture_output=True, text=True, timeout=120)
    assert plain.returncode != 0 and "unrecognized arguments: --no-such-option" in plain.stderr  # pytest as usual


@pytest.mark.parametrize("gpus, launcher, suite", [(0, "local", "cpu-smoke"), (8, "hosts", "quick-gate-nvlink8"),
                                                   (0, "hosts", None), (0, "slurm", None)])
def test_with_no_suite_named_a_gpu_less_controller_of_remote_nodes_asks_for_one(
        monkeypatch: pytest.MonkeyPatch, gpus: int, launcher: str, suite: str | None) -> None:
    """The default suite is chosen from the controller's hardware, before any node is read: a login node without
    GPUs driving GPU nodes picked cpu-smoke, which the nodes' profile then judged by what it had (an audit's
    run: h100-sxm-8x nodes, a lost GPU never named). A remote launcher on a GPU-less controller now asks for a
    suite (exit 4); a local run, or a controller with GPUs (inside the allocation), picks as before."""
    from clustercheck.errors import UserError
    from clustercheck.judging import platform
    from clustercheck.run import command

    monkeypatch.setattr(platform, "read_facts", lambda *a, **k: platform.Facts(host="c", gpu_count=gpus))
    if suite is None:
        with pytest.raises(UserError, match=f"no suite named: with --launcher {launcher} .* name one: "):
            command.default_suite(launcher)
    else:
        assert command.default_suite(launcher) == suite
