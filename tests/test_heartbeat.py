"""A hang names its cause: every rank says it is alive on a connection of its own, once a second, whatever
collective it is blocked in, so a check that times out tells the ranks that stopped answering (a node
whose link went down, a dead host) from those alive and waiting for them; the first are named as the
likely cause, and the exclusion list names their nodes only. Over network namespaces, one host's link
is cut in the middle of a check across all nodes."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from netns import IFNAME, netbed, unavailable  # noqa: E402
from helpers import cpu_profile  # noqa: E402

from clustercheck.run.failure import silent_story  # noqa: E402

pytestmark = pytest.mark.pool  # starts real rank pools or whole runs: `pytest -m 'not pool'` leaves it out

PROFILE = cpu_profile("""\
  across:
    busbw: {limit: ">= 0.000001", unit: GB/s, source: "any working link"}
""")
# long enough that the cut lands inside it: a cluster-wide all_reduce sweep, then a wait. The timeout stays
# below gang.SILENCE (10 s): the hosts' agents beat too, and a host's agent silent that long takes its ranks
# with it (tests/test_join.py); here the ranks' own heartbeats tell the story
SUITE = """\
checks:
  - id: across
    measure: all_reduce
    scope: cluster
    timeout: 6
    params: {sizes: [1MiB, 4MiB], iters: 4000, warmup: 1, check_iters: 0, per_iteration: false}
"""


def test_the_story_names_the_silent_first_and_the_waiting_after() -> None:
    """Without a network: ranks whose heartbeat stood still are the cause, the others only wait."""
    def names(ranks: list[int]) -> str:
        return ", ".join(f"rank {r} (h{r + 1})" for r in ranks)

    text, culprits = silent_story([0, 1, 2], {0: "7", 1: "9", 2: "4"}, {0: "8", 1: "10", 2: "4"}, names, 2.5)
    assert culprits == frozenset({2})
    assert text.startswith("rank 2 (h3) stopped answering (no heartbeat in 2.5 s: unreachable or dead)")
    assert text.endswith("alive and waiting: rank 0 (h1), rank 1 (h2)")
    text, culprits = silent_story([0, 1], {0: "3", 1: "3"}, {0: "4", 1: "5"}, names, 2.5)
    assert culprits == frozenset() and text.startswith("no answer from rank 0 (h1), rank 1 (h2), each still alive")
    text, culprits = silent_story([0, 1], {}, {0: "4"}, names, 2.5)  # rank 1 never beat at all
    assert culprits == frozenset({1}) and text.startswith("rank 1 (h2) stopped answering")
    text, culprits = silent_story([0], {0: "9"}, {0: "8"}, names, 2.5)  # an older beat replayed: no beat
    assert culprits == frozenset({0}) and text.startswith("rank 0 (h1) stopped answering")


def test_a_beat_counts_only_sealed_with_the_pools_key_for_its_own_rank() -> None:
    """Anything that reaches the store's port can write a rank's heartbeat key; only a beat sealed with the
    pool's key, naming that rank, is read as one (a forged or copied beat would make a dead rank look alive,
    and the timeout would name the wrong node first). Read through the pool's own reader, on a real store."""
    from types import SimpleNamespace

    import torch.distributed as dist

    from clustercheck.run import wire
    from clustercheck.run.pool import WorkerPool

    key, other = wire.new_key(), wire.new_key()
    assert wire.beat_of(key, wire.seal(key, {"rank": 3, "beat": 5}), rank=3) == 5
    assert wire.beat_of(key, wire.seal(other, {"rank": 3, "beat": 5}), rank=3) is None  # another key
    assert wire.beat_of(key, wire.seal(key, {"rank": 2, "beat": 5}), rank=3) is None  # rank 2's, copied
    assert wire.beat_of(key, "5", rank=3) is None and wire.beat_of(key, wire.seal(key, {"rank": 3, "beat": "5"}), rank=3) is None
    store = dist.HashStore()
    store.set(wire.alive_key(0), wire.seal(key, {"rank": 0, "beat": 7}))
    store.set(wire.alive_key(1), "8")  # unsealed, as beats were before
    store.set(wire.alive_key(2), wire.seal(other, {"rank": 2, "beat": 9}))
    pool = SimpleNamespace(store=store, key_hex=key)
    assert WorkerPool._beats(pool, [0, 1, 2, 3]) == {0: "7"}  # type: ignore[arg-type]


@pytest.mark.skipif(unavailable() is not None, reason=str(unavailable()))
def test_a_host_whose_link_is_cut_mid_check_is_named_and_excluded_alone(tmp_path: Path) -> None:
    (tmp_path / "thresholds").mkdir()
    (tmp_path / "thresholds" / "cpu.yaml").write_text(PROFILE)
    (tmp_path / "s.yaml").write_text(SUITE)
    with netbed(3) as bed:
        a, b, c = bed.hosts
        template = f"ip netns exec {{host}} env GLOO_SOCKET_IFNAME={IFNAME} PYTHONPATH={os.pathsep.join(sys.path)} {{python}}"
        argv = [sys.executable, "-m", "clustercheck", "run", "s.yaml", "--thresholds", "thresholds", "--out", "out",
                "--launcher", "hosts", "--hosts", ",".join(bed.hosts), "--host-command", template,
                "--store-addr", bed.root_addr, "--ranks", "1"]
        proc = subprocess.Popen(argv, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

        def cut_when_measuring() -> None:  # the pool line is written when the check's pool has started
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                runs = list((tmp_path / "out").glob("*/run.jsonl"))
                if runs and '"type": "pool"' in runs[0].read_text():
                    time.sleep(1.5)
                    bed.cut(c)
                    break
                time.sleep(0.2)
            # once the run's record has ended, what runs on c is killed (the host is gone): else the controller's
            # goodbye waits 5 s for c's agent, which cannot hear it, to leave, then kills it itself
            while time.monotonic() < deadline + 120:
                if runs and '"type": "end"' in runs[0].read_text():
                    listed = subprocess.run(["ip", "netns", "pids", c], capture_output=True, text=True, timeout=30)
                    for pid in map(int, listed.stdout.split()):
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(pid, signal.SIGKILL)
                    return
                time.sleep(0.1)

        cutter = threading.Thread(target=cut_when_measuring, daemon=True)
        cutter.start()
        out, _ = proc.communicate(timeout=240)
        cutter.join(5)
    assert proc.returncode == 3, out  # an error: the harness could not finish the check
    run = (tmp_path / "out" / "latest").resolve()
    (result,) = [r for r in json.loads((run / "results.json").read_text())["results"]]
    message = result["message"]
    assert message.startswith(f"timed out after 6 s during all_reduce: rank 2 ({c}) stopped answering"), message
    assert f"alive and waiting: rank 0 ({a}), rank 1 ({b})" in message.splitlines()[0], message
    assert result["unreachable"] == [c]
    assert (run / "exclude.txt").read_text().split() == [c], out
    (exclusion,) = [json.loads(ln) for ln in (run / "run.jsonl").read_text().splitlines() if '"type": "exclude"' in ln]
    assert exclusion["reasons"] == {c: "across: stopped answering (no heartbeat: unreachable or dead)"}
