"""What one polling round of the controller costs while a task runs, by number of ranks.

    python benchmarks/store_poll.py

The controller's c10d TCPStore holds every rank's answer. Looking for each rank's result key, one
lookup each (what the pool did before the answer count of wire.py), costs a round trip per rank per
round; the pool now looks up two keys (`complete/<seq>`, `errors/<seq>`) whatever the number of ranks.
Prints the milliseconds of one round both ways, with all but one of N answers in the store."""

from __future__ import annotations

import time
from datetime import timedelta

import torch.distributed as dist

from clustercheck.run import wire

ROUNDS = 5


def main() -> None:
    server = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=10))
    rank = dist.TCPStore("127.0.0.1", server.port, is_master=False, timeout=timedelta(seconds=10))
    print(f"{'ranks':>6}{'per-key round (ms)':>20}{'two-key round (ms)':>20}")
    for n in (8, 64, 512, 4096, 8192):
        keys = [wire.result_key(1, r) for r in range(n)]
        for k in keys[:-1]:  # one rank still working: the round finds the task not done
            rank.set(k, b"x" * 300)
        t = time.perf_counter()
        for _ in range(ROUNDS):
            any(not server.check([k]) for k in keys)
        per_key = (time.perf_counter() - t) / ROUNDS
        t = time.perf_counter()
        for _ in range(ROUNDS):
            server.check([wire.complete_key(1)]) or server.check([wire.errors_key(1)])
        two = (time.perf_counter() - t) / ROUNDS
        print(f"{n:>6}{per_key * 1e3:>20.2f}{two * 1e3:>20.3f}")
        for k in keys[:-1]:
            rank.delete_key(k)


if __name__ == "__main__":
    main()
