"""The benchmark scripts still run end to end (their bounds are judged by hand: docs/benchmarks.md)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.pool  # starts real rank pools or whole runs: `pytest -m 'not pool'` leaves it out

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


def test_collectives_vs_bare_pairs_every_measurement_and_prints_six_ratios() -> None:
    proc = subprocess.run([sys.executable, str(BENCH / "collectives_vs_bare.py"), "--repeats", "2", "--smoke"],
                          capture_output=True, text=True, timeout=300)
    # two repeats of two iterations are too few for the +-10% bound (exit 1 is allowed); a broken script
    # exits otherwise
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    rows = re.findall(r"^(all_reduce|all_gather|broadcast)\s+(4|64)Mi\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)", proc.stdout, re.M)
    assert [(c, s) for c, s, *_ in rows] == [(c, s) for c in ("all_reduce", "all_gather", "broadcast") for s in ("4", "64")]
    for *_, bare, cc, ratio in rows:
        b, c, r = float(bare), float(cc), float(ratio)
        assert b > 0 and c > 0
        # each figure is printed to 3 decimals, so the ratio is bounded by what the rounded ones allow (a fixed
        # 0.01 failed a loaded machine's 0.088 / 0.041 printed as 2.134, well within the rounding)
        assert (c - 5e-4) / (b + 5e-4) - 5e-4 <= r <= (c + 5e-4) / (b - 5e-4) + 5e-4
    assert re.search(r"every ratio within \+-10%: (yes|NO)$", proc.stdout, re.M)


def test_the_quick_gate_estimate_reads_the_shipped_suite_and_adds_its_parts() -> None:
    """benchmarks/gpu/quick_gate_estimate.py: arithmetic over the suite's sizes and the measured parts; it
    must follow the suite (a check renamed or a parameter moved would otherwise break it unseen)."""
    out = subprocess.run([sys.executable, str(BENCH / "gpu" / "quick_gate_estimate.py")], capture_output=True,
                         text=True, check=True).stdout
    parts = [float(line.split()[0]) for line in out.splitlines()[:-1]]
    for name in ("allreduce-default: data", "allreduce-ring: data", "p2p-matrix", "host-device", "device-memory"):
        assert name in out
    total = float(out.splitlines()[-1].split()[0])
    assert total == pytest.approx(sum(parts), abs=0.01 * len(parts))
    # the data volume: 26 ops of 16 MiB + 256 MiB + 1 GiB + 4 GiB + 8 GiB, 2(n-1)/n of it on the wire, at 475 GB/s
    assert "1.36 s  allreduce-default: data at 475 GB/s" in out


CGROUP_ROOTS = ("/sys/fs/cgroup/cpuacct", "/sys/fs/cgroup/unified", "/sys/fs/cgroup")  # suite_cpu.py's, in order


def _cgroup_writable() -> bool:
    return os.geteuid() == 0 and any(os.access(root, os.W_OK) for root in CGROUP_ROOTS)


@pytest.mark.skipif(not _cgroup_writable(), reason="benchmarks/suite_cpu.py needs root and a cgroup hierarchy")
def test_suite_cpu_counts_the_processes_a_test_started(tmp_path: Path) -> None:
    """benchmarks/suite_cpu.py: a test whose child process burns CPU is charged for it (its own rusage
    would not show it) and comes first; a test that does nothing costs about nothing."""
    (tmp_path / "test_tiny.py").write_text(
        "import subprocess, sys\n"
        "def test_child_burns():\n"
        "    subprocess.run([sys.executable, '-c', 'import time\\nt = time.process_time()\\n"
        "while time.process_time() - t < 0.5: pass'], check=True)\n"
        "def test_idle():\n"
        "    pass\n")
    popen = subprocess.Popen([sys.executable, str(BENCH / "suite_cpu.py"), "--top", "2", "test_tiny.py"], cwd=tmp_path,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = popen.communicate(timeout=120)  # Popen, not run: its pid names the group it made
    assert popen.returncode == 0, out + err
    rows = re.findall(r"^\s*([\d.]+)\s+([\d.]+)\s+(test_tiny\.py::\w+)$", out, re.M)
    assert [name for *_, name in rows] == ["test_tiny.py::test_child_burns", "test_tiny.py::test_idle"], out
    assert float(rows[0][0]) >= 0.45 and float(rows[1][0]) < 0.1, out
    assert re.search(r"^\s*[\d.]+\s+[\d.]+\s+test_tiny\.py$", out, re.M)  # the file's sum
    for root in CGROUP_ROOTS:
        assert not Path(root, f"cc-suite-cpu-{popen.pid}").exists()  # its group removed


def test_report_memory_renders_a_scaled_real_record_and_prints_its_peak() -> None:
    """benchmarks/report_memory.py: a real cpu-smoke record copied over many nodes renders (exit 0) and each size
    prints its wall time and peak RSS."""
    out = subprocess.run([sys.executable, str(BENCH / "report_memory.py"), "--results", "12", "30"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    rows = re.findall(r"^\s+(\d+)\s+([\d.]+)\s+(\d+)\s+([\d.]+)\s+(\d+)$", out.stdout, re.M)
    assert [(n, code) for n, _, code, _, _ in rows] == [("12", "0"), ("30", "0")], out.stdout
    assert all(float(mib) > 0 and int(peak) > 0 for _, mib, _, _, peak in rows)
