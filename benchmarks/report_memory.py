"""Peak memory and time of `clustercheck report` over large run records: what writing the reports of a long
burn-in or a large cluster's gate costs the controller at the end of the run.

One real `clustercheck run cpu-smoke` gives the record's header, plan and result lines; a record of N results
is then made by copying its node-scope results over N/3 nodes (each a node of its own, as a gate of many nodes
would record them), and `clustercheck report` renders it in a child process, whose wall time and peak RSS
(getrusage of that child) are printed.

    .venv/bin/python benchmarks/report_memory.py --results 1000 5000 20000

Figures: docs/benchmarks.md. Run it on a quiet machine; it times whole processes."""

from __future__ import annotations

import argparse
import copy
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def real_record(work: Path) -> list[dict[str, Any]]:
    """The lines of a real cpu-smoke run's record."""
    done = subprocess.run([sys.executable, "-m", "clustercheck", "run", "cpu-smoke", "--out", str(work / "seed"),
                           "--no-progress"], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"the seed run failed ({done.returncode}): {done.stdout[-2000:]}{done.stderr[-2000:]}")
    return [json.loads(line) for line in (work / "seed" / "latest" / "run.jsonl").read_text().splitlines()]


def scaled(lines: list[dict[str, Any]], n: int, out: Path) -> None:
    """A record of `n` results: the seed's node-scope results, each copied onto node n00000, n00001, ..."""
    head = next(x for x in lines if x["type"] == "run")
    seeds = [x for x in lines if x["type"] == "result" and x.get("scope", "node") == "node" and x.get("node")]
    if not seeds:
        raise SystemExit("the seed record has no node-scope result to copy")
    nodes = [f"n{i:05d}" for i in range(-(-n // len(seeds)))]
    out.mkdir(parents=True)
    with (out / "run.jsonl").open("w") as f:
        f.write(json.dumps({**head, "nodes": nodes}) + "\n")
        results = []
        for i in range(n):
            r, node = copy.deepcopy(seeds[i % len(seeds)]), nodes[i // len(seeds)]
            r["name"], r["node"], r["nodes"] = f"{r['check']}[{node}]", node, [node]
            r["nodeid"] = f"{r['nodeid'].split('::')[0]}::{r['name']}"
            results.append(r)
        keys = ("check", "measure", "scope", "suite_file", "line", "name", "node", "nodes", "nodeid")
        f.write(json.dumps({"type": "plan", "items": [{k: r[k] for k in keys if k in r} for r in results]}) + "\n")
        for r in results:
            f.write(json.dumps(r) + "\n")
        tail = [x for x in lines if x["type"] in ("exclude", "end")]
        for x in tail:
            if x["type"] == "end":
                x = {**x, "counts": {"passed": sum(r["outcome"] == "passed" for r in results),
                                     "failed": sum(r["outcome"] == "failed" for r in results),
                                     "error": sum(r["outcome"] == "error" for r in results),
                                     "skipped": sum(r["outcome"] == "skipped" for r in results)}}
            f.write(json.dumps(x) + "\n")


def report(run_dir: Path) -> tuple[int, float, float]:
    """(exit code, wall seconds, peak RSS MiB) of `clustercheck report RUN_DIR` in a child process."""
    t0 = time.monotonic()
    child = subprocess.Popen([sys.executable, "-m", "clustercheck", "report", str(run_dir)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.monotonic() - t0
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode != 0 and child.stderr is not None:
        print(child.stderr.read().decode(errors="replace")[-1500:], file=sys.stderr)
    return child.returncode, wall, usage.ru_maxrss / 1024  # KiB on Linux


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--results", type=int, nargs="+", default=[1000, 5000, 20000], help="record sizes (results)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="cc-report-mem-") as tmp:
        work = Path(tmp)
        lines = real_record(work)
        print(f"{'results':>8} {'record MiB':>11} {'exit':>5} {'wall s':>8} {'peak RSS MiB':>13}")
        for n in args.results:
            run_dir = work / f"r{n}"
            scaled(lines, n, run_dir)
            size = (run_dir / "run.jsonl").stat().st_size / 2**20
            code, wall, peak = report(run_dir)
            print(f"{n:>8} {size:>11.1f} {code:>5} {wall:>8.1f} {peak:>13.0f}", flush=True)


if __name__ == "__main__":
    main()
