"""Issue 32's GPU start-up goals as whole processes: `clustercheck run gpu-smoke -k gemm` against the bare
script measuring the same GEMM (goal: at most 1.3x), and the whole `gpu-smoke` against the bare script
measuring the same figures (goal: at most 8 s on one H100), alternated pair by pair (the order flips each
round, so drift between the two evens out), from an empty directory, as a user would type them.

    python3 benchmarks/gpu/startup.py [--rounds 5]

Each command runs once first, uncounted (the page cache holds torch afterwards for both alike). A
clustercheck run that does not exit 0 with a PASS verdict stops the benchmark: a failed run's time says
nothing about start-up.
"""

from __future__ import annotations

import argparse
import json
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


def timed(argv: list[str], cwd: Path) -> tuple[float, str]:
    start = time.perf_counter()
    proc = subprocess.run(argv, cwd=cwd, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"{' '.join(argv)} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return wall, proc.stdout


def clustercheck(args: list[str], cwd: Path) -> tuple[float, str]:
    out = cwd / "out"
    shutil.rmtree(out, ignore_errors=True)
    wall, _ = timed([shutil.which("clustercheck") or "clustercheck", *args, "--out", str(out), "-q"], cwd)
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
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cwd = Path(tmp)
        for name, (cc, bs) in PAIRS.items():
            clustercheck(cc, cwd), bare(bs, cwd)  # uncounted: the page cache
            walls: dict[str, list[float]] = {"clustercheck": [], "bare": []}
            ratios = []
            for i in range(args.rounds):
                order = [("clustercheck", clustercheck, cc), ("bare", bare, bs)]
                got = {}
                for who, fn, a in order if i % 2 == 0 else order[::-1]:
                    got[who] = fn(a, cwd)
                    walls[who].append(got[who][0])
                ratios.append(got["clustercheck"][0] / got["bare"][0])
                print(f"{name} round {i + 1}: clustercheck {got['clustercheck'][0]:.2f} s | bare "
                      f"{got['bare'][0]:.2f} s | ratio {ratios[-1]:.3f}", flush=True)
                if i == 0:
                    print(f"  clustercheck: {got['clustercheck'][1]}\n  bare: {got['bare'][1]}", flush=True)
            for who, w in walls.items():
                print(f"{name}: {who} min {min(w):.2f} / median {statistics.median(w):.2f} / max {max(w):.2f} s")
            print(f"{name}: ratio clustercheck / bare, pair by pair: median {statistics.median(ratios):.3f} "
                  f"(min {min(ratios):.3f}, max {max(ratios):.3f})", flush=True)


if __name__ == "__main__":
    main()
