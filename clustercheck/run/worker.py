"""Rank process: `python -m clustercheck.run.worker`. Joins the process group once, then runs tasks
posted by the controller on the c10d store until told to exit. Imports no pytest."""

from __future__ import annotations

import argparse
import os
import socket
import sys
import time
import traceback
from datetime import timedelta
from typing import Any

from clustercheck.run import wire
from clustercheck.run.reaper import LIBC, die_with_parent

# The controller's liveness is the store connection; a short wait lets us notice its death quickly.
_POLL = timedelta(seconds=5)
_CONNECT = timedelta(seconds=180)  # the pool's own START_TIMEOUT


# a rank forked from a zygote: seconds from the pool's request to the fork, mostly the zygote's own
# torch import for a pool that asked before it was done (zygote_serve._become_rank sets it)
ZYGOTE_WAIT: float | None = None


def _refused(host: str, port: int, window: float = 5.0) -> bool:
    """Whether the store's address refuses connections for `window` seconds. The pool binds its
    listening socket before it starts any rank (run/pool.py spawn), so a refusal means the address is
    wrong as seen from here (a loopback address sent to another host): fail in seconds rather than
    wait out the start timeout. Anything else (no route yet, a slow answer) is left to TCPStore."""
    deadline = time.monotonic() + window
    while True:
        try:
            with socket.create_connection((host, port), timeout=2.0):
                return False
        except ConnectionRefusedError:
            if time.monotonic() >= deadline:
                return True
            time.sleep(0.2)
        except OSError:
            return False


def main() -> int:
    die_with_parent()  # SIGTERMed when the process that started it (its reaper, the zygote) dies: no strays
    from clustercheck.run.wire import read_env
    from clustercheck.run.timings import process_age

    startup = {} if ZYGOTE_WAIT is None else {"zygote_wait": ZYGOTE_WAIT}
    startup["to_main"] = process_age()  # interpreter and imports (forked: since the fork), then each step
    clock = time.monotonic()

    def step(name: str) -> None:
        nonlocal clock
        startup[name], clock = time.monotonic() - clock, time.monotonic()

    env = os.environ
    args = _args()
    # the pool's HMAC key: the first line on stdin, never in the environment (a check's code could read it)
    key = sys.stdin.readline().strip()
    try:  # a node agent's second line: the variables the pool set for this rank
        env.update(read_env(sys.stdin.readline()))
    except ValueError as exc:
        print(f"clustercheck rank: refusing the environment on stdin: {exc}", file=sys.stderr, flush=True)
        return 2
    import torch  # after the environment is complete: torch and OpenMP read some variables at import
    import torch.distributed as dist

    step("import_torch")

    from clustercheck.measure.binding import device_index
    from clustercheck.errors import UserError
    from clustercheck.measure import RankContext, cuda_bus_id, run_task
    from clustercheck.measure.nccl_log import NcclLog, log_name

    rank, local_rank, node = args.rank, args.local_rank, args.node or socket.gethostname()
    world = args.world_size or int(env["CC_WORLD_SIZE"])
    host, _, port = (args.store or f"{env['CC_STORE_HOST']}:{env['CC_STORE_PORT']}").rpartition(":")
    backend = args.backend or env["CC_BACKEND"]
    if _refused(host, int(port)):  # one line, quoted by the pool as this rank's last output
        print(f"clustercheck rank {rank} ({node}): the store at {host}:{port} refused the connection: nothing "
              f"listens there as this host sees it", file=sys.stderr, flush=True)
        return 2
    # the store may not be served yet when this rank connects (its process is forked after the zygote's
    # import; a controller that serves it imports torch first): wait as long as the pool waits for us
    tcp = dist.TCPStore(host, int(port), is_master=False, timeout=_CONNECT)
    tcp.set_timeout(_POLL)
    store: dist.Store = tcp
    if prefix := env.get("CC_STORE_PREFIX"):  # a pool on a store it shares with others (run/join.py)
        store = dist.PrefixStore(prefix, tcp)
    _heartbeat(host, int(port), prefix, rank, key)
    step("store")
    device = torch.device("cpu")
    nccl_log, bus = None, ""
    if backend == "nccl":  # before NCCL initialises: it reads its debug settings once
        nccl_log = NcclLog.configure(os.environ, env.get("CC_NCCL_LOG", "off"), env.get("CC_LOG_DIR", ""),
                                     log_name(env.get("CC_POOL_NUMBER", "0"), rank))
        try:  # by CUDA's count, not NVML's: CUDA_VISIBLE_DEVICES (the user's, or the job step's) renumbers
            index = device_index(env.get("CUDA_VISIBLE_DEVICES"), local_rank, torch.cuda.device_count())
        except UserError as exc:  # one line, quoted by the pool as this rank's last output
            print(f"clustercheck rank {rank} ({node}): {exc}", file=sys.stderr, flush=True)
            return 2
        torch.cuda.set_device(index)
        device, bus = torch.device("cuda", index), cuda_bus_id(index)
        torch.cuda.init()
    step("device")
    pg_timeout = timedelta(seconds=float(env.get("CC_PG_TIMEOUT", "600")))
    dist.init_process_group(backend, store=dist.PrefixStore("pg", store), rank=rank, world_size=world,
                            timeout=pg_timeout)
    step("process_group")
    ctx = RankContext(rank=rank, world_size=world, local_rank=local_rank, backend=backend, device=device, host=node,
                      nccl_log=nccl_log, bus_id=bus, progress=lambda text: store.set(wire.PROGRESS_KEY, text[:120]))
    store.set(f"ready/{rank}", wire.seal(key, {**ctx.describe(), "startup": startup}))
    seq = 0
    while True:
        seq += 1
        task = _next_task(store, seq, key)
        if task is None or task.get("op") == "exit":
            break
        if seq > 1:  # the controller read every answer to the last task before it posted this one
            store.delete_key(wire.result_key(seq - 1, rank))
        payload: dict[str, Any]
        try:
            payload = {"ok": True, "result": run_task(ctx, task)}
        except Exception as exc:  # a harness error; the traceback goes to this rank's log, which the pool quotes
            payload = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
            print(traceback.format_exc(), file=sys.stderr, flush=True)
        release_free_memory()  # before answering, so the controller never times it
        groups = task.get("groups")
        idle = groups is not None and not any(rank in g for g in groups)
        if idle and payload["ok"]:
            continue  # in no group: the controller expects nothing from this rank (pool.py)
        _answer(store, seq, rank, int(task.get("answering", world)), wire.seal(key, payload),
                failed=not payload["ok"], counted=not idle)
    dist.destroy_process_group()
    # Leave without the interpreter's teardown of torch (most of a second, which the controller would
    # wait for at the end of every run): the task loop has answered everything it was given.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _answer(store: Any, seq: int, rank: int, answering: int, sealed: str, failed: bool, counted: bool = True) -> None:
    """Post this rank's result and count it among the task's `answering` ranks (wire.py: the controller
    polls the counts, not N keys). An idle rank that failed posts its error uncounted: the count is
    the busy ranks' alone, and `errors` sends the controller to read it."""
    store.set(wire.result_key(seq, rank), sealed)
    if failed:
        store.add(wire.errors_key(seq), 1)
    if counted and store.add(wire.answers_key(seq), 1) == answering:
        store.set(wire.complete_key(seq), "1")


def release_free_memory() -> None:
    """Hand free memory back between tasks (never inside a timed loop). glibc keeps freed buffers below
    its mmap threshold for reuse, so without this a rank that idles through a long burn-in holds the
    high-water mark of whichever checks came before (+13% over a 30-minute soak). torch's CUDA caching
    allocator likewise keeps every freed block: the pools of one node share its GPUs (a timed and a
    tuning pool per `env:`), so a pool that keeps its largest buffers cached starves the next one."""
    import gc

    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        # a task's tensors caught in reference cycles (tracebacks, closures) go first, so their device
        # memory can be returned; a full collection costs ~90 ms with torch loaded, so CPU ranks (whose
        # buffers the generational collector frees in time) skip it
        gc.collect()
        torch.cuda.empty_cache()
    trim = getattr(LIBC, "malloc_trim", None)  # glibc only
    if trim is not None:
        trim(0)


BEAT = 1.0  # seconds between two heartbeats of a rank


def _heartbeat(host: str, port: int, prefix: str | None, rank: int, key: str) -> None:
    """Say that this rank is alive, once a second, on a store connection of its own, whatever the main
    thread is blocked in (a collective whose peer is gone never returns to the task loop). When a check
    times out, the controller reads which ranks still beat: one that stopped is unreachable or dead, the
    likely cause; one that beats is alive and waiting for it (pool.py). Each beat is sealed with the pool's
    key and names its rank, so that nothing else on the store's port can make a dead rank look alive. A
    set costs microseconds a second; the thread holds the GIL only for that."""
    import threading

    import torch.distributed as dist

    def beat() -> None:
        try:
            tcp = dist.TCPStore(host, port, is_master=False, timeout=_CONNECT)
            tcp.set_timeout(timedelta(seconds=2))
        except Exception:  # no second connection: the controller then reads this rank as silent
            return
        store: dist.Store = dist.PrefixStore(prefix, tcp) if prefix else tcp
        count = 0
        while True:
            count += 1
            try:
                store.set(wire.alive_key(rank), wire.seal(key, {"rank": rank, "beat": count}))
            except Exception:  # the link is down or the controller gone: beat again, or end with the process
                pass
            time.sleep(BEAT)

    threading.Thread(target=beat, name="clustercheck-heartbeat", daemon=True).start()


def _args() -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m clustercheck.run.worker", description="a clustercheck rank (started by a launcher)")
    p.add_argument("--rank", type=int, default=0)
    p.add_argument("--local-rank", type=int, default=0)
    p.add_argument("--node", help="the node name this rank reports (default: the hostname)")
    p.add_argument("--world-size", type=int)
    p.add_argument("--store", metavar="HOST:PORT", help="the controller's c10d store")
    p.add_argument("--backend", choices=("gloo", "nccl"))
    return p.parse_args()


def _next_task(store: Any, seq: int, key: str) -> dict[str, Any] | None:
    import torch.distributed as dist

    while True:
        try:
            return wire.unseal(key, store.get(wire.task_key(seq)))
        except wire.Forged as exc:  # not from our controller: refuse to run anything and leave
            print(f"refusing task {seq}: {exc}", file=sys.stderr, flush=True)
            return None
        except dist.DistNetworkError:
            return None  # the controller is gone: leave quietly
        except dist.DistStoreError:
            continue  # no task yet


def _run() -> None:
    """main(), then leave with its code without the interpreter's teardown, on every path: the heartbeat
    thread may be inside a TCPStore call, and tearing torch down under it aborts the process ("terminate
    called without an active exception", SIGABRT), which would hide the rank's own exit code and line."""
    try:
        code = main()
    except KeyboardInterrupt:
        code = 130
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # noqa: BLE001 - said on stderr, which the pool quotes as the rank's last output
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    _run()
