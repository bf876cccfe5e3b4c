"""Installed like a real package: the wheel (and the sdist) carry the shipped suites and profiles, and a
non-editable install in a fresh virtual environment runs from an unrelated directory, lists every shipped
profile, and judges a user's own check with a user's profile through a per-kind default (issue 15).

The fresh environment gets clustercheck from the wheel alone; its dependencies (torch, pytest, ...) come
from this test's environment through a path entry, not from a package index: this machine has none
but PyPI, and reinstalling torch would take minutes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.pool  # starts real rank pools or whole runs: `pytest -m 'not pool'` leaves it out

REPO = Path(__file__).resolve().parent.parent
SHIPPED_SUITES = sorted(p.name for p in (REPO / "suites").glob("*.yaml"))
SHIPPED_PROFILES = sorted(p.stem for p in (REPO / "thresholds").glob("*.yaml"))

USER_PROFILE = """\
platform: cpu
description: our CPU runners, judged by our own floor
detect:
  gpu_count: 0
defaults:
  all_reduce:
    busbw: {limit: ">= 0.000001", unit: GB/s, source: "our CI runners: any working loopback"}
"""
USER_SUITE = """\
checks:
  - id: my-allreduce
    measure: all_reduce
    params: {sizes: [4KiB], iters: 2, warmup: 1}
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", str(REPO), "--no-deps", "--no-build-isolation",
                           "-q", "-w", str(out)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return out


def test_the_wheel_carries_every_shipped_suite_and_profile(built: Path):
    (wheel,) = built.glob("clustercheck-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {f"clustercheck/data/suites/{s}" for s in SHIPPED_SUITES} <= names
    assert {f"clustercheck/data/thresholds/{p}.yaml" for p in SHIPPED_PROFILES} <= names
    assert "clustercheck/report/templates/report.html.j2" in names


def test_the_sdist_carries_them_too(tmp_path: Path):
    proc = subprocess.run([sys.executable, "-c", "from setuptools import build_meta as b; import sys; "
                           "print(b.build_sdist(sys.argv[1]))", str(tmp_path)], cwd=REPO, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    (sdist,) = tmp_path.glob("clustercheck-*.tar.gz")
    with tarfile.open(sdist) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
        links = [m.name for m in tar.getmembers() if m.issym()]
    assert {f"clustercheck/data/suites/{s}" for s in SHIPPED_SUITES} <= names, sorted(names)[:20]
    assert not links  # the files themselves, never the checkout's links


def test_installed_non_editable_it_runs_lists_and_takes_a_users_profile(built: Path, tmp_path: Path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    (Path(site) / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")  # torch & co., not clustercheck
    (wheel,) = built.glob("clustercheck-*.whl")
    proc = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps",
                           "--no-index", "-q", str(wheel)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    work = tmp_path / "elsewhere"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "CLUSTERCHECK_THRESHOLDS")}
    clustercheck = str(venv / "bin" / "clustercheck")

    where = subprocess.run([str(python), "-c", "import clustercheck; print(clustercheck.__file__)"], cwd=work,
                           env=env, capture_output=True, text=True, check=True).stdout
    assert where.startswith(site), where  # the installed copy, not the checkout

    listed = subprocess.run([clustercheck, "platforms"], cwd=work, env=env, capture_output=True, text=True, timeout=120)
    assert listed.returncode == 0, listed.stderr
    names = {line.split()[0] for line in listed.stdout.splitlines() if line and not line.startswith(" ")}
    assert set(SHIPPED_PROFILES) <= names
    assert any(line.split()[:4] == ["cpu", "no", "GPU", "shipped"] for line in listed.stdout.splitlines())

    run = subprocess.run([clustercheck, "run"], cwd=work, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    latest = work / "clustercheck-out" / "latest"
    assert {"junit.xml", "report.html", "results.json", "run.jsonl"} <= {p.name for p in latest.iterdir()}

    (work / "mine").mkdir()
    (work / "mine" / "cpu.yaml").write_text(USER_PROFILE)
    (work / "my.yaml").write_text(USER_SUITE)
    mine = subprocess.run([clustercheck, "run", "my.yaml", "--thresholds", "mine"], cwd=work, env=env,
                          capture_output=True, text=True, timeout=600)
    assert mine.returncode == 0, mine.stdout[-3000:] + mine.stderr[-3000:]
    record = [json.loads(line) for line in (latest / "run.jsonl").read_text().splitlines()]
    (result,) = [r for r in record if r["type"] == "result"]
    busbw = next(v for v in result["verdicts"] if v["metric"] == "busbw")
    assert result["outcome"] == "passed" and "defaults.all_reduce.busbw" in busbw["origin"]
    assert busbw["origin"].startswith("mine/cpu.yaml:")  # the user's profile hid the shipped one of that name
