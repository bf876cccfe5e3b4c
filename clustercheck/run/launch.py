"""Launchers start a pool's rank processes; rendezvous is torch.distributed's c10d store.

- `local`: this machine, one process per rank, the store on loopback.
- `slurm`: inside an allocation (salloc/sbatch): one srun step starts a node agent on every node of the
  allocation, which then starts that node's ranks as `join`'s agents do (run/slurm.py).
- `hosts`: an explicit host list and a command template such as `ssh {host} {python}`, through which
  one node agent per host is started, which then starts that host's ranks as `join`'s agents do
  (run/hosts.py).
- `join`: node agents (`clustercheck agent`) started by something else (an Indexed Job, JobSet, MPIJob,
  systemd) join the controller and start their node's ranks (run/join.py, run/agent.py).
- `k8s`: the same agents as an Indexed Job behind a headless Service, which this launcher creates and
  deletes through the Kubernetes API (clustercheck/k8s/launcher.py).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from clustercheck.errors import UserError
from clustercheck.run.launcher import Launcher, RankProcess, advertised, loopback, rank_env  # noqa: F401 (re-exported)
from clustercheck.run.reaper import Reaped, command as reaper_command
from clustercheck.run.zygote import shared as shared_zygote

WORKER = ["-m", "clustercheck.run.worker"]
STORE_TIMEOUT = 30.0  # the TCPStore server's own client (in the store process) uses nothing but its start


def _popen(argv: list[str], env: dict[str, str], log: Path, key: str) -> Reaped:
    """Start one local rank afresh, its key on its stdin, under a reaper of its own (run/reaper.py: what
    the rank leaves behind is killed once it ends; this controller is no subreaper). Ctrl-C at the
    terminal reaches the controller only, which ends the ranks itself: the reaper and the rank each get
    a process group of their own but stay in the controller's session. With the kernel's autogroup
    scheduling a session is a CPU-sharing group, and ranks in a session each share the cores differently
    from a bare torchrun's ranks (docs/benchmarks.md: gloo broadcast measured 10-18% below torchrun's on
    2 vCPUs that way)."""
    group: dict[str, Any] = {"process_group": 0} if sys.version_info >= (3, 11) else {"preexec_fn": os.setpgrp}
    with log.open("wb") as out:
        proc = subprocess.Popen(reaper_command(argv), env=env, stdin=subprocess.PIPE, stdout=out,
                                stderr=subprocess.STDOUT, **group)
    assert proc.stdin is not None
    try:
        proc.stdin.write(key.encode() + b"\n")
        proc.stdin.close()
    except BrokenPipeError:
        pass  # the rank died at once; the pool notices and reports its output
    return Reaped(proc)


class LocalLauncher(Launcher):
    kind = "local"

    def __init__(self) -> None:
        self.nodes = (socket.gethostname(),)

    def start(self, env: dict[str, str], nranks: int, key: str, logs: list[Path],
              check_env: Mapping[str, str] | None = None) -> list[RankProcess]:
        """Fork the ranks from this controller's zygote for `env` (run/zygote.py), which imported torch
        once; fresh processes with the zygote off, or where it cannot be asked."""
        args = [["--rank", str(r), "--local-rank", str(r), "--node", self.nodes[0]] for r in range(nranks)]
        zygote = shared_zygote(env, logs[0].parent / "zygote.log")
        forked = zygote.start_all([(args[r], env, logs[r]) for r in range(nranks)], key) if zygote else None
        if forked is not None:
            return list(forked)
        return [_popen([sys.executable, *WORKER, *args[r]], env, logs[r], key)
                for r in range(nranks)]

    def store_process(self, listener: socket.socket, host: str, port: int, env: Mapping[str, str],
                      log: Path) -> RankProcess | None:
        """The pool's store, forked by the zygote that forks its ranks (it imported torch for them): the
        controller's torch import was 2.5-3.2 CPU-s here, for nothing but the store. None with the zygote
        off or where it cannot be asked: the pool then serves the store itself."""
        zygote = shared_zygote(env, log.parent / "zygote.log")
        try:
            return zygote.serve_store(listener, host, port, STORE_TIMEOUT, env, log) if zygote else None
        except OSError:
            return None


def _slurm(o: Any) -> Launcher:
    from clustercheck.run.slurm import SlurmLauncher

    return SlurmLauncher(o.store_addr, timeout=o.join_timeout)


def _hosts(hosts: str | None, template: str, store_addr: str | None, timeout: float | None) -> Launcher:
    from clustercheck.run.hosts import HostsLauncher, host_names

    return HostsLauncher(host_names(hosts or "", "--hosts"), template, store_addr, timeout=timeout)


def _join(o: Any) -> Launcher:
    from clustercheck.run.join import JoinLauncher

    pods = None
    if o.k8s_job:  # inside a cluster: an agent that never joined is named by its pod, and why
        from clustercheck.run.k8s.launcher import job_pods

        pods = job_pods(o.k8s_job, o.namespace)
    return JoinLauncher(_nodes(o), o.store_addr, o.join_timeout, pods=pods)


def _k8s(o: Any) -> Launcher:
    from clustercheck.run.k8s.launcher import K8sLauncher

    return K8sLauncher.from_options(o, _nodes(o))


def _nodes(o: Any) -> int:
    if o.nodes is None:
        raise UserError(f"--launcher {o.launcher} needs --nodes N: how many nodes (node agents) the run waits for")
    return int(o.nodes)


@dataclass(frozen=True)
class Entry:
    """A launcher as `--launcher NAME` names it: how to make one from the run's options (options.Options;
    that module imports this one), whether its ranks may run on other machines (its `remote`), readable
    before one is made (a local run starts its first pool before the options are resolved), and the
    launcher options (Options fields) it reads: any other launcher's option given to it is refused."""

    make: Callable[[Any], Launcher]
    remote: bool
    reads: tuple[str, ...] = ()


LAUNCHERS: dict[str, Entry] = {
    "local": Entry(lambda o: LocalLauncher(), LocalLauncher.remote, ("force",)),
    "slurm": Entry(_slurm, True, ("store_addr", "join_timeout")),  # an srun step of node agents: run/slurm.py
    # node agents through --host-command: run/hosts.py
    "hosts": Entry(lambda o: _hosts(o.hosts, o.host_command, o.store_addr, o.join_timeout), True,
                   ("hosts", "host_command", "store_addr", "join_timeout")),
    # node agents join the controller (clustercheck agent): run/join.py; --namespace is that of --k8s-job
    "join": Entry(_join, True, ("nodes", "store_addr", "join_timeout", "k8s_job", "namespace")),
    # the same agents, as an Indexed Job this launcher creates: k8s/launcher.py
    "k8s": Entry(_k8s, True, ("nodes", "store_addr", "join_timeout", "image", "namespace", "gpus_per_node",
                              "node_selector", "rdma")),
}
JOINING = ("join", "k8s")  # launchers whose nodes come to the controller: --nodes applies
_FROM = {"local": "where it runs", "slurm": "the allocation", "hosts": "--hosts"}  # where a launcher's nodes come from


def refuse_unread(launcher: str, given: Mapping[str, str]) -> None:
    """A launcher option given (`given`: Options field -> its flag) to a launcher that does not read it is
    refused, naming the launchers that do: `--hosts gpu[01-64]` under --launcher local would otherwise
    measure this machine alone and pass as if it had measured the 64."""
    entry = LAUNCHERS.get(launcher)
    if entry is None:
        return  # make_launcher names it
    for name, flag in given.items():
        readers = [k for k, e in LAUNCHERS.items() if name in e.reads]
        if readers and launcher not in readers:
            where = f" (the nodes of --launcher {launcher} come from {_FROM[launcher]})" if name == "nodes" else ""
            which = " or ".join([", ".join(readers[:-1]), readers[-1]] if len(readers) > 1 else readers)
            raise UserError(f"{flag} is for --launcher {which}; --launcher {launcher} does not read it{where}")
    if launcher == "join" and "namespace" in given and "k8s_job" not in given:
        raise UserError(f"{given['namespace']} under --launcher join is the namespace of --k8s-job, which is not "
                        "given: give --k8s-job NAME or leave it out")


def make_launcher(options: Any) -> Launcher:
    entry = LAUNCHERS.get(options.launcher)
    if entry is None:
        raise UserError(f"unknown launcher {options.launcher!r} (known: {', '.join(LAUNCHERS)})")
    if options.nodes is not None and options.launcher not in JOINING:
        raise UserError(f"--nodes is for --launcher {' or '.join(JOINING)} (the nodes of --launcher "
                        f"{options.launcher} come from {'--hosts' if options.launcher == 'hosts' else 'where it runs'})")
    return entry.make(options)
