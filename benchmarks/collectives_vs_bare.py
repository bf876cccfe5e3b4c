"""clustercheck's gloo busbw against a bare torch.distributed loop (nccl-tests method), 2 ranks.

    python benchmarks/collectives_vs_bare.py [--rounds 5]

Alternates one bare torchrun job and one `clustercheck run benchmarks/three-collectives.yaml` per
round; prints the median busbw of each at 4 and 64 MiB for all_reduce, all_gather and broadcast and
their ratio. Acceptance bound (issue 3): every ratio within +-10%.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent
KEYS = [(c, s) for c in ("all_reduce", "all_gather", "broadcast") for s in (4 << 20, 64 << 20)]


def bare() -> dict[tuple[str, int], float]:
    out = subprocess.run([str(BIN / "torchrun"), "--nproc-per-node", "2", "--master-port", "29518",
                          str(HERE / "bare_collectives.py")], check=True, capture_output=True, text=True).stdout
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    return {(r["collective"], r["size"]): r["busbw"] for r in rows}


def clustercheck(out_dir: Path) -> dict[tuple[str, int], float]:
    proc = subprocess.run([str(BIN / "clustercheck"), "run", str(HERE / "three-collectives.yaml"), "--thresholds",
                           str(HERE / "thresholds"), "--out", str(out_dir), "-q"], capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"clustercheck run failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    results = json.loads((out_dir / "latest" / "results.json").read_text())["results"]
    return {(r["measure"], row["size"]): row["busbw"] for r in results for row in r["rows"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    runs: list[tuple[dict, dict]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.rounds):
            runs.append((bare(), clustercheck(Path(tmp) / f"r{i}")))
            print(f"round {i + 1} done", flush=True)
    print(f"\nmedian busbw (GB/s) of {args.rounds} alternating rounds, 2 gloo ranks, iterations per size as in bare_collectives.ITERS")
    print(f"{'collective':<12}{'size':>8}{'bare':>10}{'clustercheck':>14}{'ratio':>8}   per-round ratios (min..max)")
    ok = True
    for coll, size in KEYS:
        b = statistics.median(r[0][(coll, size)] for r in runs)
        c = statistics.median(r[1][(coll, size)] for r in runs)
        ok &= abs(c / b - 1) <= 0.10
        paired = [r[1][(coll, size)] / r[0][(coll, size)] for r in runs]
        print(f"{coll:<12}{size >> 20:>6}Mi{b:>10.3f}{c:>14.3f}{c / b:>8.3f}   {min(paired):.3f}..{max(paired):.3f}")
    print("every ratio within +-10%:", "yes" if ok else "NO")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
