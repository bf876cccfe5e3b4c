"""Soak: the cpu-smoke checks repeated for a given time in ONE controller with ONE rank pool.

    .venv/bin/python benchmarks/soak.py --minutes 30 [--ranks 2] [--interval 10] [--out DIR]

What it runs is what a long burn-in runs: one pytest session (the clustercheck plugin, the same
arguments `clustercheck run` passes) with clustercheck's own burn-in loop, `--duration` (run/repeat.py):
the suite (the three node checks of cpu-smoke) is run again and again until the time is up, each
repetition whole, with one rank pool reused by every check and the run record growing by one line per
check. The run ends as a burn-in ends, by itself: nothing is left unrun, so a healthy soak exits 0 (an
exit 2, INCOMPLETE, means the run was stopped: it fails the soak). A small plugin only watches: it starts
the sampler when the run loop starts and counts the checks.

Every --interval seconds a sampler thread records: controller RSS (/proc/self/status VmRSS) and
threads, each rank's RSS, open file descriptors (/proc/PID/fd) of controller and ranks, the
controller's child and descendant processes, sorted by what they are: the ranks (the pids the run
record's `pool` line names; ranks are forked from the zygote, so they are the zygote's children, not the
controller's), the zygote (`cc-zygote`), the pool's store (`cc-store`) and anything else (extra); the
clustercheck rank, zygote and store processes on the whole machine (any run's, not judged); checks done.

After the warm-up (max(2 min, 10% of the time), at most half of it) the verdict requires:
- RSS of the controller and of each rank within +-10% of the post-warm-up baseline, judged on medians
  of windows of k samples (k = 10% of the samples after warm-up, >= 3; the first window is the
  baseline), not on single samples: a rank sampled while it holds a check's buffers (tens of MiB at
  16 MiB sizes, partly kept by glibc between checks) swings by +-20% without leaking anything;
- no steady growth: a least-squares trend over the run after warm-up (also printed per check) that
  adds up to 5% of the baseline or more, with the last window 5% or more above the first, fails even
  inside the band;
- fd counts of controller and ranks not above the baseline (+2 on the controller for the sampler's
  own transient fds); the same rank pids throughout (one pool start), each of them a process of this
  controller; no controller threads added; no process of the controller's but the ranks, at most one
  zygote and at most one store.
- after the session: the controller's exit is what ends its zygote (the kernel closes the controller's end
  of the zygote's socket; cli.entry does not wait, and the pool's close() already waited for the ranks),
  so the soak, whose controller lives on, hangs up the zygote's socket as that exit would and waits up to
  LEFTOVER_WAIT s for every process of the session (ranks, zygote, store, anything else seen) to end. One
  still there after that is left over: FAIL.
A sample the sampler could not read (/proc/PID/status or /proc/PID/fd) is not judged and fails the soak:
never RSS 0 or an fd count of -1, which read as healthy. Samples go to soak.csv (an unreadable value `NA`;
on every row the session's end: processes left over, pool starts, pytest's exit code, checks in error) and
pytest's own output to pytest.log in the work dir; `--rejudge CSV` judges saved samples and that end
again (a CSV without them is not judged: FAIL); `--tracemalloc` (diagnosis only) prints where the controller's Python heap grew
between the end of the warm-up and the last check. Exit 0 when all hold, 1 otherwise.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import os
import re
import statistics
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Generator

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
TOLERANCE = 0.10
TREND_LIMIT = 0.05  # fitted growth over the run after warm-up, as a fraction of the baseline
CONTROLLER_FD_SLACK = 2  # the sampler lists /proc/self/fd and reads /proc files while pytest runs
LEFTOVER_WAIT = 10.0  # seconds after the hang-up for the session's processes to end (the pool's own bound on its ranks)
ZYGOTE, STORE = "cc-zygote", "cc-store"  # the names (/proc/PID/comm) run/zygote_serve.py gives them


# -- /proc --------------------------------------------------------------------------------------
def _status(pid: int | str) -> dict[str, str]:
    out = {}
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                out[key] = value.strip()
    except OSError:
        pass
    return out


def rss_mib(pid: int | str) -> float | None:
    """VmRSS in MiB; None when /proc/PID/status could not be read or has no VmRSS (never 0: a sample that
    cannot be read is not judged healthy, it fails the soak)."""
    try:
        return int(_status(pid)["VmRSS"].split()[0]) / 1024
    except (KeyError, IndexError, ValueError):
        return None


def fd_count(pid: int | str) -> int | None:
    """Open descriptors; None when /proc/PID/fd could not be listed (never -1, which is never growth)."""
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None


def threads(pid: int | str) -> int | None:
    try:
        return int(_status(pid)["Threads"])
    except (KeyError, ValueError):
        return None


def _stat(pid: int | str) -> tuple[str, int, int] | None:
    """(comm, parent pid, start time in clock ticks) from /proc/PID/stat; None when it cannot be read."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            stat = fh.read()
    except OSError:
        return None
    comm = stat[stat.index("(") + 1:stat.rindex(")")]
    rest = stat.rpartition(")")[2].split()
    return comm, int(rest[1]), int(rest[19])


def _table() -> dict[int, tuple[str, int, int]]:
    """pid -> (comm, parent pid, start time) of every process on the machine."""
    out = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            st = _stat(name)
            if st is not None:
                out[int(name)] = st
    return out


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def processes(me: int, rank_pids: list[int], table: dict[int, tuple[str, int, int]] | None = None) -> dict[str, Any]:
    """The controller's processes, sorted: children, descendants (pids), how many of `rank_pids` (the ranks
    the run record names) are among the descendants, zygotes (`cc-zygote`), stores (`cc-store`) and extra
    (any other descendant); and cc_machine, the clustercheck rank, zygote and store processes on the whole
    machine, any run's (a forked rank's command line is its zygote's)."""
    table = _table() if table is None else table
    kids: dict[int, list[int]] = {}
    for p, (_, pp, _) in table.items():
        kids.setdefault(pp, []).append(p)
    descendants: set[int] = set()
    frontier = list(kids.get(me, []))
    while frontier:
        p = frontier.pop()
        if p not in descendants:
            descendants.add(p)
            frontier += kids.get(p, [])
    ranks = set(rank_pids) & descendants
    zygotes = {p for p in descendants - ranks if table[p][0] == ZYGOTE}
    stores = {p for p in descendants - ranks if table[p][0] == STORE}
    machine = sum(1 for p, (comm, _, _) in table.items() if comm in (ZYGOTE, STORE) or any(
        m in _cmdline(p) for m in ("clustercheck.run.worker", "clustercheck.run.zygote_serve")))
    return {"children": len(kids.get(me, [])), "descendants": sorted(descendants), "ranks_ours": len(ranks),
            "zygotes": len(zygotes), "stores": len(stores), "extra": len(descendants - ranks - zygotes - stores),
            "cc_machine": machine}


def alive(pid: int, started: int | None = None) -> bool:
    """The process is there and not a zombie (and, given `started`, the same process: not a reused pid)."""
    st = _status(pid).get("State", "")
    if not st or st.startswith("Z"):
        return False
    return started is None or (_stat(pid) or ("", 0, -1))[2] == started


def wait_gone(pids: dict[int, int], bound: float) -> tuple[list[int], float]:
    """Wait up to `bound` s for the processes `pids` (pid -> start time) to end: (those still there, seconds waited)."""
    t0 = time.monotonic()
    while True:
        left = sorted(p for p, started in pids.items() if alive(p, started))
        waited = time.monotonic() - t0
        if not left or waited >= bound:
            return left, waited
        time.sleep(0.05)


class RecordTail:
    """The run record (run.jsonl) read as it grows, whole lines only: the rank pids of the last `pool` line,
    the pool starts."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.rank_pids: list[int] = []
        self.pool_starts = 0

    def read(self) -> list[int]:
        try:
            with self.path.open("rb") as fh:
                fh.seek(self.offset)
                data = fh.read()
        except OSError:  # not there yet: `latest` points at the run once it started
            return self.rank_pids
        whole = data[:data.rfind(b"\n") + 1]
        self.offset += len(whole)
        for line in whole.splitlines():
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(entry, dict) and entry.get("type") == "pool":
                self.pool_starts += 1
                self.rank_pids = [int(p) for p in entry.get("pids", [])]
        return self.rank_pids


# -- the suite ----------------------------------------------------------------------------------
def write_inputs(work: Path) -> Path:
    """The cpu-smoke suite less its across-nodes check (it needs two nodes and would be skipped in every
    repetition here); the shipped thresholds (thresholds/cpu.yaml) judge it."""
    smoke = (ROOT / "suites" / "cpu-smoke.yaml").read_text()
    head, _, body = smoke.partition("\nchecks:\n")
    blocks = [b for b in re.split(r"(?m)^(?=  - id: )", body) if b.strip() and "min_nodes:" not in b]
    suite = work / "soak.yaml"
    suite.write_text("".join([head.replace("suite: cpu-smoke", "suite: soak"), "\nchecks:\n", *blocks]))
    return suite


# -- sampling -----------------------------------------------------------------------------------
FIELDS = ["t_s", "controller_rss_mib", "controller_fds", "controller_threads", "rank_pids", "ranks_ours",
          "rank_rss_mib", "rank_fds", "children", "descendants", "zygotes", "stores", "extra", "cc_machine",
          "checks_done"]
PROCESS_KINDS = ("ranks_ours", "zygotes", "stores", "extra")  # judged; a CSV without them is not
# what the session's end tells, on every row (known once it ended), so that --rejudge judges it too
SESSION = ["leftover", "pool_starts", "exit_code", "errors", "end_t"]  # end_t: the run loop's end (s)
UNREAD = "NA"  # a value the sampler could not read, in the CSV


def _round(v: float | None) -> float | None:
    return None if v is None else round(v, 1)


class Sampler(threading.Thread):
    def __init__(self, interval: float, printer: Callable[[dict], None], record: RecordTail) -> None:
        super().__init__(daemon=True, name="soak-sampler")
        self.interval = interval
        self.printer = printer
        self.record = record
        self.samples: list[dict] = []
        self.checks_done = 0
        self.t0 = time.monotonic()
        self.stop_event = threading.Event()
        self.lock = threading.Lock()
        self.seen: dict[int, int] = {}  # every process of the controller's sampled: pid -> start time

    def sample(self) -> dict:
        with self.lock:
            me = os.getpid()
            table = _table()
            ranks = self.record.read()
            procs = processes(me, ranks, table)
            for p in procs["descendants"]:
                if p in table:
                    self.seen.setdefault(p, table[p][2])
            s = {"t_s": round(time.monotonic() - self.t0, 1), "controller_rss_mib": _round(rss_mib(me)),
                 "controller_fds": fd_count(me), "controller_threads": threads(me),
                 "rank_pids": list(ranks), "ranks_ours": procs["ranks_ours"],
                 "rank_rss_mib": [_round(rss_mib(p)) for p in ranks], "rank_fds": [fd_count(p) for p in ranks],
                 "children": procs["children"], "descendants": len(procs["descendants"]),
                 **{k: procs[k] for k in ("zygotes", "stores", "extra", "cc_machine")},
                 "checks_done": self.checks_done}
            self.samples.append(s)
            return s

    def run(self) -> None:
        self.printer(self.sample())
        while not self.stop_event.wait(self.interval):
            self.printer(self.sample())


class SoakPlugin:
    """Watches the run loop (clustercheck's burn-in, --duration): starts the sampler with it, counts the
    checks, takes the --tracemalloc snapshots. It runs nothing and stops nothing."""

    def __init__(self, sampler: Sampler, warmup: float, trace: bool) -> None:
        self.sampler = sampler
        self.warmup = warmup
        self.trace = trace
        self.snapshots: list = []
        self.outcomes: dict[str, int] = {}
        self.loop_started = 0.0
        self.loop_ended = 0.0

    @pytest.hookimpl(wrapper=True)
    def pytest_runtestloop(self, session: pytest.Session) -> Generator[None, object, object]:
        self.sampler.t0 = self.loop_started = time.monotonic()
        self.sampler.start()
        if self.trace:
            import tracemalloc

            tracemalloc.start(6)
        try:
            return (yield)
        finally:
            self.loop_ended = time.monotonic()
            if self.trace:
                self.snapshots.append(tracemalloc.take_snapshot())
                tracemalloc.stop()

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "call" or report.when == "setup" and not report.passed:
            key = "error" if report.when == "setup" and report.failed else report.outcome
            self.outcomes[key] = self.outcomes.get(key, 0) + 1
            self.sampler.checks_done += 1
        if self.trace and not self.snapshots and report.when == "teardown" and \
                time.monotonic() - self.loop_started >= self.warmup:
            import tracemalloc

            self.snapshots.append(tracemalloc.take_snapshot())


# -- verdict ------------------------------------------------------------------------------------
def _slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of ys over xs (0 when xs do not vary)."""
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    var = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / var if var else 0.0


def judge(samples: list[dict], warmup: float, end_t: float, leftover: list[int], pool_starts: int,
          nranks: int) -> tuple[list[str], list[str]]:
    """(summary lines, problems).

    RSS is judged on medians of windows of k samples (k = 10% of the samples after warm-up, at least 3),
    not on single samples: a rank sampled while it holds a check's buffers (the 16 MiB sweep allocates
    tens of MiB and glibc keeps some of it between checks) is not a leak. Every window median must be
    within +-10% of the first one, and the fitted trend over the run must stay under 5% of it."""
    window = [s for s in samples if warmup <= s["t_s"] <= end_t]
    lines: list[str] = []
    problems: list[str] = []
    if len(window) < 6:
        return lines, [f"only {len(window)} samples after the warm-up: run longer"]
    problems += unreadable(window)
    base = window[:3]
    k = max(3, len(window) // 10)
    run_h = (window[-1]["t_s"] - window[0]["t_s"]) / 3600
    lines.append(f"RSS in MiB; windows of {k} samples ({k * (window[1]['t_s'] - window[0]['t_s']):.0f} s), "
                 f"first window = baseline; trend = least-squares slope over all {len(window)} samples")

    def band(name: str, samples: list[dict], read: list[float | None]) -> None:
        picked = [s for s, v in zip(samples, read) if v is not None]  # an unreadable one failed already
        values = [v for v in read if v is not None]
        if len(values) < k:
            problems.append(f"{name}: only {len(values)} readable sample(s) after the warm-up: not judged")
            return
        medians = [statistics.median(values[i:i + k]) for i in range(0, len(values) - k + 1, k)]
        baseline = medians[0]
        dev = max(abs(m - baseline) for m in medians) / baseline
        times = [s["t_s"] for s in picked]
        checks = [s["checks_done"] for s in picked]
        per_h = _slope(times, values) * 3600
        per_check = _slope(checks, values) * 1024  # KiB
        grown = per_h * run_h / baseline
        lines.append(f"{name:<22} baseline {baseline:6.1f}  last window {medians[-1]:6.1f} ({(medians[-1] / baseline - 1) * 100:+5.1f}%)"
                     f"  windows {min(medians):.1f}..{max(medians):.1f} (max dev {dev * 100:4.1f}%)"
                     f"  samples {min(values):.1f}..{max(values):.1f}  trend {per_h:+6.1f} MiB/h = {per_check:+6.2f} KiB/check")
        if dev > TOLERANCE:
            problems.append(f"{name}: a window median moved {dev * 100:.1f}% from the baseline {baseline:.1f} MiB "
                            f"(windows {min(medians):.1f}..{max(medians):.1f})")
        if grown > TREND_LIMIT and medians[-1] / baseline - 1 > TREND_LIMIT:  # both: not one noisy window
            problems.append(f"{name}: grows steadily, {per_h:+.1f} MiB/h ({per_check:+.2f} KiB per check), "
                            f"{grown * 100:+.1f}% of its baseline over the {run_h * 60:.0f} min after warm-up")

    band("controller RSS", window, [s["controller_rss_mib"] for s in window])
    pids = window[0]["rank_pids"]
    if len(pids) != nranks:
        problems.append(f"{len(pids)} rank processes after warm-up, expected {nranks}")
    strangers = [s["t_s"] for s in window if s.get("ranks_ours") is not None and s["ranks_ours"] != len(s["rank_pids"])]
    if strangers:
        problems.append(f"a rank pid the record names is not a process of this controller in {len(strangers)} "
                        f"sample(s) (first at t={strangers[0]} s)")
    for s in window:
        if s["rank_pids"] != pids:
            problems.append(f"rank pids changed at t={s['t_s']} s: {pids} -> {s['rank_pids']} (pool restarted?)")
            break
    same = [s for s in window if s["rank_pids"] == pids]
    for r, pid in enumerate(pids):
        band(f"rank {r} RSS (pid {pid})", same, [s["rank_rss_mib"][r] for s in same])
    # descriptors
    cfd = _known(s["controller_fds"] for s in window) or [0]
    cbase = max(_known(s["controller_fds"] for s in base) or [0])
    lines.append(f"{'controller fds':<22} baseline {cbase:6d}  min {min(cfd)}  max {max(cfd)}  last {cfd[-1]}")
    if max(cfd) > cbase + CONTROLLER_FD_SLACK:
        problems.append(f"controller fds grew from {cbase} to {max(cfd)} (last {cfd[-1]})")
    for r, pid in enumerate(pids):
        fds = _known(s["rank_fds"][r] for s in window if s["rank_pids"] == pids) or [0]
        rbase = max(_known(s["rank_fds"][r] for s in base if s["rank_pids"] == pids) or [0])
        lines.append(f"{f'rank {r} fds':<22} baseline {rbase:6d}  min {min(fds)}  max {max(fds)}  last {fds[-1]}")
        if max(fds) > rbase:
            problems.append(f"rank {r} fds grew from {rbase} to {max(fds)} (last {fds[-1]})")
    # processes
    kids = [s["children"] for s in window]
    desc = [s["descendants"] for s in window]
    nthreads = _known(s["controller_threads"] for s in window) or [0]
    base_threads = max(_known(s["controller_threads"] for s in base) or [0])
    lines.append(f"{'child processes':<22} min {min(kids)} max {max(kids)}; descendants min {min(desc)} max {max(desc)}; "
                 f"controller threads min {min(nthreads)} max {max(nthreads)}")
    if any(s.get(k) is None for s in window for k in PROCESS_KINDS):
        problems.append("the controller's processes by kind (ranks, zygote, store, extra) unknown (a soak.csv "
                        "without them): not judged")
    else:
        most = {k: max(s[k] for s in window) for k in ("zygotes", "stores", "extra")}
        lines.append(f"{'descendants by kind':<22} ranks {min(s['ranks_ours'] for s in window)}..{max(s['ranks_ours'] for s in window)}"
                     f", zygotes max {most['zygotes']}, stores max {most['stores']}, extra max {most['extra']}")
        if most["extra"] or most["zygotes"] > 1 or most["stores"] > 1:
            problems.append(f"extra processes: up to {most['extra']} besides the ranks, {most['zygotes']} zygote(s) and "
                            f"{most['stores']} store(s) (at most one of each)")
    if max(nthreads) > base_threads:
        problems.append(f"controller threads grew from {base_threads} to {max(nthreads)}")
    lines.append(f"{'pool starts':<22} {pool_starts}")
    if pool_starts != 1:
        problems.append(f"{pool_starts} pool starts; the soak expects the one pool to live throughout")
    lines.append(f"{'left after the session':<22} {len(leftover)} process(es) {leftover if leftover else ''}".rstrip())
    if leftover:
        problems.append(f"processes left after the session: {leftover}")
    return lines, problems


def _known(values: Any) -> list[Any]:
    return [v for v in values if v is not None]


def unreadable(window: list[dict]) -> list[str]:
    """A problem per quantity the sampler could not read in some sample after the warm-up: an unreadable
    /proc file is not judged, and never reads as a healthy sample (RSS 0, or fds -1, never growth)."""
    out = []
    for field, what in (("controller_rss_mib", "controller RSS (/proc/self/status VmRSS)"),
                        ("controller_fds", "controller fds (/proc/self/fd)"),
                        ("controller_threads", "controller threads (/proc/self/status Threads)"),
                        ("rank_rss_mib", "rank RSS (/proc/PID/status VmRSS)"), ("rank_fds", "rank fds (/proc/PID/fd)")):
        bad = [s["t_s"] for s in window
               if (None in s[field] if isinstance(s[field], list) else s[field] is None)]
        if bad:
            out.append(f"{what} could not be read in {len(bad)} sample(s) after the warm-up (first at t={bad[0]} s): "
                       "not judged")
    return out


def session_problems(code: int | None, errors: int | None, where: str) -> list[str]:
    """The session's own end: an exit code other than 0 or 1 (pytest's: passed, some check failed), a
    check that ended in error; either unknown (a CSV without them) is not judged, never a pass."""
    problems = []
    if code is None:
        problems.append("pytest exit code unknown (not in the samples): not judged")
    elif code not in (0, 1):
        problems.append(f"pytest exit code {code} (see {where})")
    if errors is None:
        problems.append("check errors unknown (not in the samples): not judged")
    elif errors:
        problems.append(f"{errors} check(s) ended in error (see {where})")
    return problems


def _cell(v: str | None, kind: Any) -> Any:
    return None if v is None or v in ("", UNREAD) else kind(v)


def rejudge(path: Path, warmup: float, nranks: int) -> int:
    samples = []
    with path.open() as fh:
        for row in csv.DictReader(fh):
            s: dict = {k: _cell(row.get(k), float) for k in ("t_s", "controller_rss_mib", "end_t")}
            for k in ("controller_fds", "controller_threads", "children", "descendants", *PROCESS_KINDS,
                      "cc_machine", "checks_done", "pool_starts", "exit_code", "errors"):
                s[k] = _cell(row.get(k), int)
            s["rank_pids"] = [int(v) for v in row["rank_pids"].split(";") if v]
            s["rank_rss_mib"] = [_cell(v, float) for v in row["rank_rss_mib"].split(";") if v]
            s["rank_fds"] = [_cell(v, int) for v in row["rank_fds"].split(";") if v]
            s["leftover"] = None if row.get("leftover") is None else [int(v) for v in row["leftover"].split(";") if v]
            samples.append(s)
    last = samples[-1]
    end_t = last.get("end_t")
    if end_t is None:  # a CSV from before end_t was kept: the last sample that named ranks
        end_t = max(s["t_s"] for s in samples if s["rank_pids"])
    problems = []
    if last.get("leftover") is None or last.get("pool_starts") is None:
        problems.append("leftover processes and pool starts unknown (a soak.csv without them): not judged")
    lines, judged = judge(samples, warmup, end_t, last.get("leftover") or [],
                          1 if last.get("pool_starts") is None else last["pool_starts"], nranks)
    problems = judged + problems + session_problems(last.get("exit_code"), last.get("errors"), str(path))
    print(f"{path}: after warm-up ({warmup:.0f} s) until the last check (t={end_t:.0f} s), "
          f"{sum(warmup <= s['t_s'] <= end_t for s in samples)} samples:")
    for line in lines:
        print("  " + line)
    print("VERDICT: FAIL" if problems else "VERDICT: PASS")
    for p in problems:
        print("  - " + p)
    return 1 if problems else 0


def write_csv(path: Path, samples: list[dict], session: dict[str, Any]) -> None:
    """The samples, one row each, with the session's end (SESSION) on every row; an unreadable value `NA`."""
    def cell(v: Any) -> Any:
        if isinstance(v, list):
            return ";".join(UNREAD if x is None else str(x) for x in v)
        return UNREAD if v is None else v

    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=FIELDS + SESSION)
        w.writeheader()
        for s in samples:
            w.writerow({k: cell(v) for k, v in {**s, **session}.items()})


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--interval", type=float, default=10.0, help="seconds between samples (default 10)")
    ap.add_argument("--print-every", type=float, default=60.0, help="seconds between table rows (default 60)")
    ap.add_argument("--out", type=Path, default=None, help="work dir (default /tmp/clustercheck-soak-<time>)")
    ap.add_argument("--tracemalloc", action="store_true",
                    help="diagnosis only (it costs memory itself): print the controller's top allocation growth "
                         "between the end of the warm-up and the last check, by file and line")
    ap.add_argument("--rejudge", type=Path, metavar="CSV", help="judge the samples of an earlier run's soak.csv "
                    "again (with that run's --minutes) instead of running: the samples, and the leftover processes, pool "
                    "starts, exit code and errored checks the CSV keeps")
    args = ap.parse_args()
    seconds = args.minutes * 60
    warmup = min(max(120.0, 0.1 * seconds), 0.5 * seconds)
    if args.rejudge:
        return rejudge(args.rejudge, warmup, args.ranks)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    work = (args.out or Path(f"/tmp/clustercheck-soak-{stamp}")).resolve()
    work.mkdir(parents=True, exist_ok=True)
    suite = write_inputs(work)
    # pytest captures fd 1 while each check runs; the table goes to a duplicate of the original stdout
    out = os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1)

    def say(text: str = "") -> None:
        print(text, file=out, flush=True)

    import torch

    say(f"soak: {args.minutes:g} min of cpu-smoke's node checks (clustercheck's burn-in, --duration {seconds:g}s), "
        f"{args.ranks} gloo ranks, one controller (pid {os.getpid()}); warm-up {warmup:.0f} s; "
        f"torch {torch.__version__}, {os.cpu_count()} CPUs; work dir {work}")
    header = f"{'t (s)':>7} {'ctrl RSS MiB':>12} {'ranks RSS MiB':>16} {'ctrl fds':>8} {'rank fds':>10} " \
             f"{'thr':>4} {'procs':>5} {'r/z/s/x':>8} {'cc':>4} {'checks':>7}"
    say(header)
    last_print = [-1e9]

    def row(s: dict) -> str:  # `?`: a value the sampler could not read
        ranks = "/".join("?" if v is None else f"{v:.0f}" for v in s["rank_rss_mib"]) or "-"
        fds = "/".join("?" if v is None else str(v) for v in s["rank_fds"]) or "-"
        rss = "?" if s["controller_rss_mib"] is None else f"{s['controller_rss_mib']:.1f}"
        kinds = f"{s['ranks_ours']}/{s['zygotes']}/{s['stores']}/{s['extra']}"
        return (f"{s['t_s']:>7.0f} {rss:>12} {ranks:>16} {s['controller_fds'] or '?':>8} {fds:>10} "
                f"{s['controller_threads'] or '?':>4} {s['descendants']:>5} {kinds:>8} {s['cc_machine']:>4} "
                f"{s['checks_done']:>7}")

    def printer(s: dict) -> None:
        if s["t_s"] - last_print[0] >= args.print_every - 0.5 * args.interval:
            last_print[0] = s["t_s"]
            say(row(s))

    record = work / "out" / "latest" / "run.jsonl"
    tail = RecordTail(record)
    sampler = Sampler(args.interval, printer, tail)
    plugin = SoakPlugin(sampler, warmup, args.tracemalloc)

    pytest_log = work / "pytest.log"
    t_start = time.monotonic()
    with pytest_log.open("w") as log, contextlib.redirect_stdout(log):
        code = pytest.main([str(suite), "--thresholds", str(ROOT / "thresholds"), "--platform", "cpu",
                            "--backend", "auto", "--ranks", str(args.ranks), "--cc-out", str(work / "out"),
                            "--duration", f"{seconds:g}s", "-p", "no:cacheprovider", "-q"], plugins=[plugin])
    finished = time.monotonic()
    end_t = plugin.loop_ended - sampler.t0 if plugin.loop_ended else 0.0
    sampler.stop_event.set()
    if sampler.is_alive():
        sampler.join()
    after = sampler.sample()  # after the session: pool closed (ranks waited for), reports written
    say(row(after) + "   <- after the session ended (pool closed, reports written)")
    # What `clustercheck run` does next is exit (cli.entry, at once): the kernel closes the controller's end of
    # the zygote's socket and the zygote leaves. This controller lives on, so it hangs up as that exit would
    # (retire: no more ranks; the zygote ends once the ranks it started have, which the pool already waited
    # for), then waits a bounded time for every process of the session to end.
    from clustercheck.run import zygote as zygote_mod

    zygote_mod.retire_shared()
    leftover, waited = wait_gone(sampler.seen, LEFTOVER_WAIT)
    gone = sampler.sample()
    say(row(gone) + f"   <- {waited:.2f} s after the zygote's hang-up ({len(sampler.seen)} process(es) of the "
        f"session, {len(leftover)} still there)")
    leftover = sorted(set(leftover) | set(processes(os.getpid(), [])["descendants"]))

    pool_starts, results = 0, 0
    if record.is_file():
        for line in record.read_text().splitlines():
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:
                continue
            pool_starts += entry.get("type") == "pool"
            results += entry.get("type") == "result"
    errors = plugin.outcomes.get("error", 0)
    csv_path = work / "soak.csv"
    write_csv(csv_path, sampler.samples, {"leftover": leftover, "pool_starts": pool_starts, "exit_code": int(code),
                                          "errors": errors, "end_t": round(end_t, 1)})

    say()
    say(f"pytest exit code {int(code)}; {sampler.checks_done} checks in {end_t / 60:.1f} min "
        f"({', '.join(f'{k} {v}' for k, v in sorted(plugin.outcomes.items()))}); {results} result lines in "
        f"{record}; start-up (collection, platform) took {plugin.loop_started - t_start:.1f} s, "
        f"session end (pool close, reports) {finished - plugin.loop_ended:.1f} s")
    lines, problems = judge(sampler.samples, warmup, end_t, leftover, pool_starts, args.ranks)
    say(f"after warm-up ({warmup:.0f} s) until the last check (t={end_t:.0f} s), "
        f"{sum(warmup <= s['t_s'] <= end_t for s in sampler.samples)} samples every {args.interval:g} s:")
    for line in lines:
        say("  " + line)
    problems += session_problems(int(code), errors, str(pytest_log))
    if len(plugin.snapshots) == 2:
        say(f"controller allocation growth after the warm-up (tracemalloc, {sampler.checks_done} checks in all):")
        stats = plugin.snapshots[1].compare_to(plugin.snapshots[0], "traceback")
        for stat in stats[:8]:
            frames = " > ".join(f"{Path(f.filename).name}:{f.lineno}" for f in stat.traceback)  # caller first
            say(f"  {stat.size_diff / 2**20:+8.2f} MiB {stat.count_diff:+8d} blocks  {frames}")
    say(f"samples: {csv_path}; pytest output: {pytest_log}")
    if problems:
        say("VERDICT: FAIL")
        for p in problems:
            say("  - " + p)
        return 1
    say(f"VERDICT: PASS (RSS within +-{TOLERANCE * 100:.0f}%, no fd growth, no extra or leftover processes, "
        f"pytest exit {int(code)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
