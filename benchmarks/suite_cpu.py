"""Where the test suite's CPU goes: each test's CPU seconds, its own and every process it started.

    python benchmarks/suite_cpu.py [--top 40] [PYTEST_ARGS...]      # e.g. tests/test_join.py

Runs pytest (one process: no -n) inside a new cgroup of its own and, with this module loaded as a
pytest plugin, reads the cgroup's CPU counter before and after each test. A cgroup counts the
processes a test started even when they were killed or left their parent (ranks, zygotes, agents,
chromium), which a process's own rusage misses. Needs root and a cgroup v1 `cpuacct` or a cgroup v2
hierarchy. Prints the tests that cost most, then the files. Figures: docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

OUT_ENV, GROUP_ENV = "CC_SUITE_CPU_OUT", "CC_SUITE_CPU_GROUP"


def _used(group: str) -> float:
    """CPU seconds the cgroup has used, v1 (cpuacct.usage, ns) or v2 (cpu.stat usage_usec)."""
    v1 = Path(group, "cpuacct.usage")
    if v1.exists():
        return int(v1.read_text()) / 1e9
    for line in Path(group, "cpu.stat").read_text().splitlines():
        if line.startswith("usage_usec "):
            return int(line.split()[1]) / 1e6
    raise RuntimeError(f"{group}: no CPU counter")


# -- the plugin, inside the measured pytest ---------------------------------------------------------
if os.environ.get(GROUP_ENV):  # only in the measured run: a stray `-p suite_cpu` adds no hook
    import pytest

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(item: Any, nextitem: Any) -> Any:
        cpu, wall = _used(os.environ[GROUP_ENV]), time.monotonic()
        yield
        with open(os.environ[OUT_ENV], "a") as out:
            out.write(f"{_used(os.environ[GROUP_ENV]) - cpu:.2f} {time.monotonic() - wall:.2f} {item.nodeid}\n")


# -- the driver -------------------------------------------------------------------------------------
def _new_group() -> str:
    name = f"cc-suite-cpu-{os.getpid()}"
    for root in ("/sys/fs/cgroup/cpuacct", "/sys/fs/cgroup/unified", "/sys/fs/cgroup"):
        if Path(root, "cgroup.procs").exists() or Path(root, "tasks").exists():
            group = Path(root, name)
            group.mkdir()
            return str(group)
    sys.exit("no cgroup hierarchy to count CPU in (needs root and cgroup v1 cpuacct or v2)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--top", type=int, default=40, help="how many tests to print (default 40)")
    args, pytest_args = ap.parse_known_args()
    group = _new_group()
    with tempfile.NamedTemporaryFile("r", suffix=".txt") as out:
        env = {**os.environ, OUT_ENV: out.name, GROUP_ENV: group,
               "PYTHONPATH": os.pathsep.join(filter(None, [str(Path(__file__).parent), os.environ.get("PYTHONPATH")]))}
        procs = Path(group, "cgroup.procs")
        # the child joins the group before it execs pytest: everything pytest starts is counted
        joined = f"echo $$ > {procs}; exec \"$@\""
        start = time.monotonic()
        rc = subprocess.call(["sh", "-c", joined, "sh", sys.executable, "-m", "pytest",
                              "-p", "suite_cpu", "-q", *pytest_args], env=env)
        wall = time.monotonic() - start
        time.sleep(0.5)  # processes a last test left behind are still counted in the total
        total = _used(group)
        rows = [line.split(maxsplit=2) for line in out.read().splitlines()]
    os.rmdir(group)
    tests = sorted(((float(c), float(w), n) for c, w, n in rows), reverse=True)
    files: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for cpu, w, name in tests:
        files[name.split("::")[0]][0] += cpu
        files[name.split("::")[0]][1] += w
    print(f"{'CPU s':>8} {'wall s':>8}  test (the {min(args.top, len(tests))} that cost most of {len(tests)})")
    for cpu, w, name in tests[:args.top]:
        print(f"{cpu:8.2f} {w:8.2f}  {name}")
    print(f"\n{'CPU s':>8} {'wall s':>8}  file")
    for name, (cpu, w) in sorted(files.items(), key=lambda kv: -kv[1][0]):
        print(f"{cpu:8.1f} {w:8.1f}  {name}")
    print(f"\n{sum(t[0] for t in tests):.1f} CPU-s in tests, {total:.1f} CPU-s in all (pytest's own start "
          f"and end too), {wall:.1f} s wall; pytest exit {rc}")
    sys.exit(rc)


if __name__ == "__main__":
    main()
