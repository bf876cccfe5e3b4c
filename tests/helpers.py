"""What several test modules share: a CPU threshold profile and suite snippets, and the small readers the
tests need that clustercheck itself does not (a profile by name from a directory, every limit of a
profile, a kind's memory need by name, a report re-render from a record path). A plain module: test files
import it; conftest.py keeps only the fixtures and hooks pytest must find there."""

from __future__ import annotations

import contextlib
import fcntl
import io
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any, Iterator, Mapping

import pytest

from clustercheck import yamlfile
from clustercheck.counters.allowances import DEFAULTS, Allowance, parse
from clustercheck.errors import UserError
from clustercheck.judging.limits import Limit
from clustercheck.judging.specs import SPECS
from clustercheck.judging.thresholds import Profile, load_profile
from clustercheck.paths import display
from clustercheck.report import read, render_record
from clustercheck.run.fit import needs

CPU_THRESHOLDS = """\
platform: cpu
description: test profile
detect:
  gpu_count: 0
checks:
  ok:
    busbw: {limit: ">= 0.000001", unit: GB/s, source: "any working loopback"}
  too-fast:
    busbw: {limit: ">= 1000000", unit: GB/s, source: "impossible on purpose"}
"""


def cpu_profile(checks: str, description: str = "test profile") -> str:
    """A profile for platform cpu (detected by no GPU) with `checks` (YAML lines under `checks:`)."""
    return f"platform: cpu\ndescription: {description}\ndetect:\n  gpu_count: 0\nchecks:\n{checks}"


def small_check(check_id: str, **extra: str) -> str:
    lines = [f"  - id: {check_id}", "    measure: all_reduce", "    params: {sizes: [1KiB, 64KiB], iters: 3, warmup: 1}"]
    lines += [f"    {k}: {v}" for k, v in extra.items()]
    return "\n".join(lines) + "\n"


def write_suite(p: pytest.Pytester, body: str, name: str = "s.yaml") -> Path:
    path = p.path / "suites" / name
    path.write_text(textwrap.dedent(body))
    return path


def profile_names(directory: Path) -> list[str]:
    return sorted(p.stem for p in directory.glob("*.yaml"))


def load_named(directory: Path, platform: str) -> Profile:
    path = directory / f"{platform}.yaml"
    if not path.is_file():
        known = ", ".join(profile_names(directory)) or "none"
        raise UserError(f"no threshold profile {platform!r} in {directory} (known: {known})")
    return load_profile(path, display(path))


def all_limits(profile: Profile) -> Iterator[Limit]:
    """Every limit the profile sets: checks first, then defaults."""
    for metrics in profile.limits.values():
        yield from metrics.values()
    for default in profile.defaults.values():
        yield from default.limits.values()


def memory_need(measure: str, params: Mapping[str, Any], nranks_per_node: int, backend: str = "nccl") -> int:
    """Peak bytes one rank's task holds in the memory it measures (run.fit.needs)."""
    return needs(measure, params, nranks_per_node, backend)[0]


def host_need(measure: str, params: Mapping[str, Any], nranks_per_node: int, backend: str = "nccl") -> int:
    """Peak host bytes of the whole node for this check (run.fit.needs)."""
    return needs(measure, params, nranks_per_node, backend)[1]


def pcie_unidirectional(gen: int, width: int) -> float:
    """Payload GB/s per direction of a PCIe link of `gen` and `width` lanes."""
    entry = SPECS.get(f"pcie{gen}_x16")
    if entry is None:
        raise KeyError(f"no PCIe generation {gen} in the spec table (known: 3-7)")
    return entry["per_lane_unidirectional"].value * width


def allowances_of(path: Path) -> dict[str, Allowance]:
    """The counter allowances of a threshold profile file (DEFAULTS when it has no `counters:` block)."""
    doc = yamlfile.load(path, str(path))
    if not isinstance(doc, dict) or "counters" not in doc:
        return dict(DEFAULTS)
    line = doc.line_of("counters") if isinstance(doc, yamlfile.Mapping) else 0
    return parse(doc["counters"], str(path), line)


def render_all(record: Path, out_dir: Path) -> dict[str, Path]:
    """Render every report from `record` into `out_dir` (what `clustercheck report` does)."""
    return render_record(read(record), out_dir)


def clustercheck_here(*args: str, cwd: Path, env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`python -m clustercheck ARGS` from `cwd`, run in this process by the command's own `cli.main`: the run
    is as real (its ranks, store, reports and exit code), but it borrows this worker's interpreter, torch
    and zygote instead of importing torch twice more, for its controller and its zygote (2.4-5 CPU-s less
    per run on a 2-vCPU VM; docs/benchmarks.md). For runs whose process itself is not under test: its
    signals, its environment at start, a failed import and its exit by `os._exit` still need `subprocess`."""
    from clustercheck import cli

    out, err = io.StringIO(), io.StringIO()
    with contextlib.ExitStack() as stack:
        mp = stack.enter_context(pytest.MonkeyPatch.context())
        mp.chdir(cwd)
        # a run records its argv from sys.argv (plugin.py): here that is pytest's own, whose `-k` or node id
        # would read as the run's item selection (and verify would refuse the run as the whole suite)
        mp.setattr(sys, "argv", ["clustercheck", *args])
        for name, value in (env or {}).items():
            mp.setenv(name, value)
        stack.enter_context(contextlib.redirect_stdout(out))
        stack.enter_context(contextlib.redirect_stderr(err))
        try:
            code = int(cli.main(list(args)))
        except SystemExit as exc:  # argparse's own exits
            code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
    return subprocess.CompletedProcess(["clustercheck", *args], code, out.getvalue(), err.getvalue())


@contextlib.contextmanager
def one_kernel_log() -> Iterator[None]:
    """Held by every test whose run reads the counters (--counters): the machine has one kernel log
    (/dev/kmsg), and an Xid a test writes there lands in the window of any --counters run on another
    xdist worker at the time. The holders take turns; other tests never read the kernel log."""
    with open(Path(tempfile.gettempdir()) / "clustercheck-tests-kernel-log.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def marked(mark: str, token: str) -> dict[int, str]:
    """Live processes (pid: command line) whose environment carries `mark`=`token` (a test's own marker on what
    its ranks start), zombies left out: what a test finds still running after it ended them."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if f"{mark}={token}".encode() not in (entry / "environ").read_bytes().split(b"\0"):
                continue
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # ended meanwhile, or not ours to read
            continue
        if stat[stat.rindex(")") + 2] != "Z":
            found[int(entry.name)] = cmdline
    return found


def prom_samples(prom: Path) -> dict[str, list]:
    """A Prometheus textfile's samples by metric name, as prometheus_client's own parser reads it."""
    from prometheus_client.parser import text_string_to_metric_families

    by_name: dict[str, list] = {}
    for family in text_string_to_metric_families(prom.read_text()):
        for s in family.samples:
            by_name.setdefault(s.name, []).append(s)
    return by_name

