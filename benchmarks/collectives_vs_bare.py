"""clustercheck's gloo busbw against a bare torch.distributed loop (nccl-tests method), 2 ranks.

    python benchmarks/collectives_vs_bare.py [--repeats 20] [--smoke]

One `clustercheck run` of all_reduce, all_gather and broadcast at 4 and 64 MiB, each repeated
--repeats times, with this module loaded as a pytest plugin: beside clustercheck's two ranks it keeps
two bare ranks (bare_collectives.py --serve, started by the same controller, so the scheduler treats
both alike) and asks them for the same measurement right before every check (even repeats) or right
after it (odd repeats). The pairs are seconds apart, so the VM's slow drifts fall on both sides
alike; one side's ranks sleep in a blocking read while the other side measures. Prints the median
busbw of each side, their ratio and the quartiles of the paired ratios. Acceptance bound (issue 3):
every ratio within +-10%.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent
CELLS = [(c, s) for c in ("all_reduce", "all_gather", "broadcast") for s in (4 << 20, 64 << 20)]
OUT_ENV = "CC_BENCH_BARE_OUT"  # where the plugin writes the bare side's measurements


# -- the bare side, driven from the controller (this module as a pytest plugin) --------------------
class BareRanks:
    """Two bare_collectives.py --serve ranks; `measure` sends one request to both, returns busbw."""

    def __init__(self) -> None:
        with socket.socket() as s:  # a free port for the bare job's own rendezvous
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.procs = []
        for rank in range(2):
            env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": str(rank),
                   "LOCAL_RANK": str(rank), "WORLD_SIZE": "2", "OMP_NUM_THREADS": "1"}  # as torchrun and clustercheck
            self.procs.append(subprocess.Popen([sys.executable, str(HERE / "bare_collectives.py"), "--serve"],
                                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env))

    def measure(self, coll: str, size: int, iters: int) -> float:
        for p in self.procs:
            p.stdin.write(f"{coll} {size} {iters}\n")
            p.stdin.flush()
        line = self.procs[0].stdout.readline()
        if not line:
            raise RuntimeError(f"bare rank 0 ended (exit {self.procs[0].wait()})")
        return json.loads(line)["busbw"]

    def close(self) -> None:
        for p in self.procs:
            p.stdin.write("exit\n")
            p.stdin.close()
        for p in self.procs:
            p.wait(timeout=60)


_bare: BareRanks | None = None
_measured: list[dict[str, Any]] = []


def _pair(item: Any, before: bool) -> None:
    check = getattr(item, "check", None)
    if check is None or _bare is None:
        return
    repeat = int(check.id.rsplit("-", 1)[1])
    if (repeat % 2 == 0) == before:
        size, iters = check.params["sizes"][0], check.params["iters"]
        _measured.append({"check": check.id, "collective": check.measure, "size": size,
                          "busbw": _bare.measure(check.measure, size, iters)})


def pytest_configure(config: Any) -> None:
    global _bare
    if os.environ.get(OUT_ENV):
        _bare = BareRanks()


def pytest_runtest_setup(item: Any) -> None:
    _pair(item, before=True)


def pytest_runtest_teardown(item: Any) -> None:
    _pair(item, before=False)


def pytest_unconfigure(config: Any) -> None:
    if _bare is not None:
        _bare.close()
        Path(os.environ[OUT_ENV]).write_text(json.dumps(_measured))


# -- the driver ------------------------------------------------------------------------------------
def write_suite(tmp: Path, repeats: int, smoke: bool = False) -> tuple[Path, Path]:
    """The interleaved suite (cells in turn, `repeats` times) and its benchmark-only limits."""
    from bare_collectives import ITERS  # beside this script (on sys.path when run as one)

    checks, limits = [], {}
    for k in range(repeats):
        for coll, size in CELLS:
            cid = f"{coll}-{size >> 20}MiB-{k}"
            warmup, iters = (1, 2) if smoke else (5, ITERS[coll][size])
            params = {"sizes": [size], "warmup": warmup, "iters": iters, "check_iters": 0}
            if coll == "all_gather":
                params["placements"] = ["out"]
            checks.append({"id": cid, "measure": coll, "params": params})
            limits[cid] = {"busbw": {"limit": ">= 0.001", "unit": "GB/s", "source": "benchmark only"}}
    suite, thresholds = tmp / "collectives-vs-bare.yaml", tmp / "thresholds"
    suite.write_text(yaml.safe_dump({"suite": "collectives-vs-bare", "checks": checks}, sort_keys=False))
    thresholds.mkdir()
    (thresholds / "cpu.yaml").write_text(yaml.safe_dump(
        {"platform": "cpu", "description": "benchmark profile", "detect": {"gpu_count": 0}, "checks": limits}))
    return suite, thresholds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=20, help="measurements of each collective and size per side")
    ap.add_argument("--smoke", action="store_true",
                    help="1 warm-up and 2 iterations a measurement: runs every step, its figures mean nothing")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        suite, thresholds = write_suite(tmp, args.repeats, args.smoke)
        env = {**os.environ, OUT_ENV: str(tmp / "bare.json"),
               "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))}
        proc = subprocess.run([str(BIN / "clustercheck"), "run", str(suite), "--thresholds", str(thresholds),
                               "--out", str(tmp / "out"), "-q", "-p", "collectives_vs_bare"],
                              capture_output=True, text=True, env=env)
        if proc.returncode != 0:
            print(f"clustercheck run failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}", file=sys.stderr)
            sys.exit(2)  # 1 means: measured, and a ratio is out of bounds
        results = json.loads((tmp / "out" / "latest" / "results.json").read_text())["results"]
        cc = {r["check"]: r["rows"][0]["busbw"] for r in results}
        bare = {m["check"]: m["busbw"] for m in json.loads((tmp / "bare.json").read_text())}
    iters = "2 (--smoke: not figures to keep)" if args.smoke else "bare_collectives.ITERS"
    print(f"busbw (GB/s), 2 gloo ranks a side, {args.repeats} interleaved measurements of each collective and size"
          f" (iterations: {iters})")
    print(f"{'collective':<12}{'size':>8}{'bare':>10}{'clustercheck':>14}{'ratio':>8}   paired ratios: quartiles")
    ok = True
    for coll, size in CELLS:
        ids = [f"{coll}-{size >> 20}MiB-{k}" for k in range(args.repeats)]
        b, c = statistics.median(bare[i] for i in ids), statistics.median(cc[i] for i in ids)
        q1, q2, q3 = statistics.quantiles([cc[i] / bare[i] for i in ids], n=4)
        ok &= abs(c / b - 1) <= 0.10
        print(f"{coll:<12}{size >> 20:>6}Mi{b:>10.3f}{c:>14.3f}{c / b:>8.3f}   {q1:.3f} {q2:.3f} {q3:.3f}")
    print("every ratio within +-10%:", "yes" if ok else "NO")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
