"""clustercheck against a bare torchrun script doing the same 10 all_reduce measurements (2 gloo ranks).

    python benchmarks/pool_overhead.py [--rounds 3]

Runs the two alternately, prints each wall time (process start to exit, everything included),
the ratio clustercheck / bare, and both busbw figures at 16 MiB (median over the 10 checks).
Acceptance bounds (issue 2): wall ratio <= 1.5; busbw within +-15%.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent
SIZE = str(16 << 20)


def bare() -> tuple[float, float]:
    start = time.perf_counter()
    out = subprocess.run([str(BIN / "torchrun"), "--nproc-per-node", "2", "--master-port", "29517",
                          str(HERE / "bare_allreduce.py")], check=True, capture_output=True, text=True).stdout
    wall = time.perf_counter() - start
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert len(rows) == 10 and all(r["rows"][SIZE]["wrong"] == 0 for r in rows)
    return wall, statistics.median(r["rows"][SIZE]["busbw"] for r in rows)


def clustercheck(out_dir: Path) -> tuple[float, float]:
    start = time.perf_counter()
    proc = subprocess.run([str(BIN / "clustercheck"), "run", str(HERE / "ten-allreduce.yaml"), "--thresholds",
                           str(HERE / "thresholds"), "--out", str(out_dir), "-q"], capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"clustercheck run failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    data = json.loads((out_dir / "latest" / "results.json").read_text())
    results = data["results"]
    assert len(results) == 10 and data["end"]["pool_starts"] == 1
    busbw = [next(r["busbw"] for r in res["rows"] if r["size"] == int(SIZE)) for res in results]
    return wall, statistics.median(busbw)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.rounds):
            b = bare()
            c = clustercheck(Path(tmp) / f"r{i}")
            rows.append((b, c))
            print(f"round {i + 1}: bare {b[0]:.2f} s, {b[1]:.3f} GB/s | clustercheck {c[0]:.2f} s, {c[1]:.3f} GB/s",
                  flush=True)
    bw, bb = statistics.median(r[0][0] for r in rows), statistics.median(r[0][1] for r in rows)
    cw, cb = statistics.median(r[1][0] for r in rows), statistics.median(r[1][1] for r in rows)
    print(f"\nmedian of {args.rounds} rounds, 10 all_reduce checks x 3 sizes, 2 gloo ranks")
    print(f"{'':14}{'wall (s)':>10}{'busbw@16MiB (GB/s)':>22}")
    print(f"{'bare torchrun':14}{bw:>10.2f}{bb:>22.3f}")
    print(f"{'clustercheck':14}{cw:>10.2f}{cb:>22.3f}")
    print(f"{'ratio':14}{cw / bw:>10.2f}{cb / bb:>22.2f}")
    ok = cw / bw <= 1.5 and abs(cb / bb - 1) <= 0.15
    print("within bounds (wall <= 1.5x, busbw +-15%):", "yes" if ok else "NO")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
