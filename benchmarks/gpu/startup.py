"""Issue 32's GPU start-up goals as whole processes: `clustercheck run gpu-smoke -k gemm` against the bare
script measuring the same GEMM (goal: at most 1.3x), and the whole `gpu-smoke` against the bare script
measuring the same figures (goal: at most 8 s on one H100), alternated pair by pair (the order flips each
round, so drift between the two evens out), from an empty directory, as a user would type them.

    python3 benchmarks/gpu/startup.py [--rounds 5] [--before DIR]

With --before DIR (an earlier clustercheck installed there with `pip install --target DIR`), that version
runs in each round too (`python3 -m clustercheck` with PYTHONPATH=DIR), and the ratio now / before is printed:
a change measured against the code before it on the same machine, minutes apart.

Each command runs once first, uncounted (the page cache holds torch afterwards for both alike). A
clustercheck run that does not exit 0 with a PASS verdict stops the benchmark: a failed run's time says
nothing about start-up.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
PAIRS = {
    "one check (gemm)": (["run", "gpu-smoke", "-k", "gemm"], ["--only", "gemm"]),
    "gpu-smoke": (["run", "gpu-smoke"], []),
}


def timed(argv: list[str], cwd: Path, env: dict[str, str] | None = None) -> tuple[float, str]:
    start = time.perf_counter()
    proc = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"{' '.join(argv)} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return wall, proc.stdout


def clustercheck(args: list[str], cwd: Path, before: str | None = None) -> tuple[float, str]:
    out = cwd / "out"
    shutil.rmtree(out, ignore_errors=True)
    command = [shutil.which("clustercheck") or "clustercheck"]
    env = None
    if before is not None:
        command, env = [sys.executable, "-m", "clustercheck"], {**os.environ, "PYTHONPATH": before}
    wall, _ = timed([*command, *args, "--out", str(out), "-q"], cwd, env)
    data = json.loads((out / "latest" / "results.json").read_text())
    if data["verdict"] != "PASS":
        sys.exit(f"clustercheck {' '.join(args)}: verdict {data['verdict']}")
    figures = [f"{r['check']}: " + ", ".join(f"{k} {m['value']:.4g}" for k, m in r["metrics"].items())
               for r in data["results"] if r.get("outcome") == "passed"]
    return wall, "; ".join(figures)


def bare(args: list[str], cwd: Path) -> tuple[float, str]:
    wall, out = timed([sys.executable, str(HERE / "bare_smoke.py"), *args], cwd)
    return wall, out.strip()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--before", metavar="DIR", help="an earlier clustercheck, installed with pip --target DIR")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cwd = Path(tmp)
        for name, (cc, bs) in PAIRS.items():
            runs = {"clustercheck": lambda: clustercheck(cc, cwd), "bare": lambda: bare(bs, cwd)}
            if args.before:
                runs["before"] = lambda: clustercheck(cc, cwd, args.before)
            for run in runs.values():
                run()  # uncounted: the page cache
            walls: dict[str, list[float]] = {who: [] for who in runs}
            ratios: dict[str, list[float]] = {"clustercheck / bare": [], "before / bare": [], "clustercheck / before": []}
            for i in range(args.rounds):
                order = list(runs)
                order = order[i % len(order):] + order[:i % len(order)]  # each command first in turn
                got = {who: runs[who]() for who in order}
                for who, (wall, _) in got.items():
                    walls[who].append(wall)
                for ratio in ratios:
                    top, bottom = ratio.split(" / ")
                    if top in got and bottom in got:
                        ratios[ratio].append(got[top][0] / got[bottom][0])
                print(f"{name} round {i + 1}: " + " | ".join(f"{who} {got[who][0]:.2f} s" for who in runs), flush=True)
                if i == 0:
                    for who in runs:
                        print(f"  {who}: {got[who][1]}", flush=True)
            for who, w in walls.items():
                print(f"{name}: {who} min {min(w):.2f} / median {statistics.median(w):.2f} / max {max(w):.2f} s")
            for ratio, r in ratios.items():
                if r:
                    print(f"{name}: ratio {ratio}, round by round: median {statistics.median(r):.3f} "
                          f"(min {min(r):.3f}, max {max(r):.3f})", flush=True)


if __name__ == "__main__":
    main()
