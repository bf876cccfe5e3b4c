"""What every launcher is (`Launcher`, the capabilities the pool and the session read) and what a rank
process must offer the pool (`RankProcess`). The launchers themselves are in `launch` (local, slurm,
and the LAUNCHERS table), `join` (node agents), `hosts` (node agents it starts through a host command) and
`clustercheck.run.k8s.launcher` (Kubernetes)."""

from __future__ import annotations

import ipaddress
import os
import socket
from pathlib import Path
from typing import TYPE_CHECKING, Any, Collection, Mapping, NamedTuple, Protocol, Sequence

from clustercheck.errors import HarnessError, Unreachable
from clustercheck.run import wire

if TYPE_CHECKING:
    from clustercheck.judging.platform import Facts


def loopback(addr: str) -> bool:
    """127.0.0.0/8, ::1 or `localhost`: reachable from this machine only."""
    if addr.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(addr).is_loopback
    except ValueError:
        return False  # a name: the ranks resolve it


def here(node: str) -> bool:
    """Whether a node name is this machine: loopback, localhost, or this hostname (whole or short)."""
    return loopback(node) or node in (socket.gethostname(), socket.gethostname().split(".")[0])


def advertised(store_addr: str | None = None) -> str:
    """The address other nodes reach this controller at: --store-addr, else $CC_STORE_ADDR (set either
    where the hostname resolves to loopback, or to an address the nodes cannot route to, such as hosts
    that are network namespaces behind a bridge: tests/netns.py), else the IP the hostname resolves to."""
    if addr := store_addr or os.environ.get("CC_STORE_ADDR"):
        return addr
    try:
        return socket.gethostbyname(socket.getfqdn())
    except OSError:
        return socket.gethostname()


class Over(NamedTuple):
    """The launch plane ended mid-run (the job's step of node agents, revoked, cancelled or killed): no later
    pool can start, so the run stops INCOMPLETE. `why` quotes the scheduler's words; `failed`, node -> its
    words, the nodes it named as failed (excluded: their failure ended the run); every other node is only
    not measured."""

    why: str
    failed: Mapping[str, str]

    def cost(self, members: Collection[str]) -> HarnessError:
        """The error of an item over `members` that the end cost its result: Unreachable naming those of them
        the scheduler said failed, with its words (the exclusion list names them), else only not measured."""
        failed = tuple(n for n in members if n in self.failed)
        text = f"not measured: {self.why}, so the run stopped"
        if not failed:
            return HarnessError(text)
        return Unreachable("; ".join(f"{n} failed ({self.failed[n]})" for n in failed) + f"; {text}", failed)

    def said(self) -> str:
        """Why, and each node the scheduler named failed with its words: the one line of a run it stopped
        before its record opened (no exclusion list to name them in)."""
        return "; ".join([self.why, *(f"{n} failed ({words})" for n, words in self.failed.items())])


class Loss(NamedTuple):
    """How a node was lost mid-run, as the launch plane saw it (`Launcher.loss`): `why` in its words, and
    `blamed`: whether the node itself is the likely cause (gone, NotReady, unreachable: it goes on the
    exclusion list) or not (Kubernetes evicted, preempted, deleted or OOM-killed its agent's pod, or ended
    the agents' Job: an error of the orchestrator or the harness, so the node is only not measured)."""

    why: str
    blamed: bool


class RankProcess(Protocol):
    """A started rank as the pool watches it: `subprocess.Popen`, or a stand-in for a rank that another
    program started on another machine (a node agent's, `join.RemoteRank`)."""

    @property
    def pid(self) -> int: ...

    @property
    def returncode(self) -> int | None: ...

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...

    def kill(self) -> None: ...


class Launcher:
    """Starts a pool's ranks. What the rest of the run needs to know about a launcher is said by its
    capabilities, never by comparing its name."""

    kind = "local"  # the name the record and the options use
    remote = False  # ranks may run on other machines: the store listens where they reach it, and each node's
    # facts are read by its own first rank (the controller may be a login node)
    nodes: tuple[str, ...] = ()
    store_addr: str | None = None  # --store-addr: where the ranks of a multi-node launcher reach the store
    # ranks each node offers where the nodes say so (node agents' --local-ranks); None: the run decides
    ranks_per_node: int | None = None
    # nodes the run was meant to have that never took part (an agent that never joined), with why: they
    # are untested and the run is INCOMPLETE
    absent: Mapping[str, str] = {}
    # a node lost mid-run (unreachable or dead) can be left out of the pools that follow, and the run goes on on
    # the nodes still answering (node agents: each starts its own node's ranks); else every later pool spans it
    shrinks = False
    left_out: Collection[str] = ()  # nodes lost mid-run that no later pool places ranks on

    def leave_out(self, nodes: Collection[str]) -> None:
        """Place no rank of a later pool on these nodes (lost mid-run); only where `shrinks`."""
        raise NotImplementedError

    def why_lost(self, node: str) -> str:
        """What the launcher knows of how a node was lost (its agent exited, or went silent), or ""."""
        return ""

    def losing(self) -> None:
        """Nodes found lost together are about to be asked how (loss): a launcher that gives a lost agent a
        moment to say how it ended opens here the one window they share (hosts.EXIT_WAIT); nothing for most."""

    def loss(self, node: str) -> Loss | None:
        """How a node lost mid-run was lost, where the launcher can tell (its agent's pod, read from
        Kubernetes); None: not known, and a node that stopped answering is taken as unreachable or dead."""
        return None

    def over(self, settle: bool = False) -> Over | None:
        """Whether the launch plane ended mid-run, and why (None while it stands, as for most launchers).
        `settle`: the check just lost nodes, so a plane that may be ending is given a moment to say so."""
        return None

    def check_facts(self, nodes: Mapping[str, Facts]) -> None:
        """Each node's facts as its first rank read them, checked against what the launcher asked for (the GPUs
        a pod requested); UserError or HarnessError before anything is measured. Nothing for most launchers."""

    def begin(self) -> None:
        """Whatever must happen before the run's nodes are final (the hosts launcher starts its agents here,
        after the run's options and the nodes' topology were checked); nothing for most launchers."""

    def store_bind(self) -> tuple[str, str]:
        """(address to listen on, address the ranks connect to)."""
        return "127.0.0.1", "127.0.0.1"

    def store_process(self, listener: socket.socket, host: str, port: int, env: Mapping[str, str],
                      log: Path) -> RankProcess | None:
        """A process of its own that serves a pool's store on `listener` (the pool then reads it through
        run/store.py and imports no torch), or None: the pool serves its store in this process."""
        return None

    def pool_store(self, number: int) -> tuple[Any, str, int] | None:
        """(store, host, port) that pool `number` should use, where the launcher lends one (node agents
        reach the controller at one fixed port); None: the pool opens its own."""
        return None

    def pool_key(self, number: int) -> str:
        """The HMAC key that seals pool `number`'s tasks and results."""
        return wire.new_key()

    def node_of(self, rank: int, nranks: int) -> str:
        """Where this launcher puts a rank, before the rank says so itself."""
        return socket.gethostname()

    def start(self, env: dict[str, str], nranks: int, key: str, logs: list[Path],
              check_env: Mapping[str, str] | None = None) -> Sequence[RankProcess]:
        """Start the ranks with `env` (the controller's environment plus the pool's); `check_env`, the
        check's own `env:`, lets a launcher whose ranks do not inherit `env` send it whole (hosts)."""
        raise NotImplementedError

    def close(self) -> None:
        """The run is over (or never started): release what the launcher holds (agents, cluster objects).
        Called once at the end whatever happened; safe to call again."""


def rank_env(env: Mapping[str, str], base: Mapping[str, str] | None = None,
             check_env: Mapping[str, str] | None = None) -> dict[str, str]:
    """What a remote rank must be told: every variable the pool set or changed for its ranks (`env` is
    the controller's environment, `base`, plus the pool's: the check's `env:`, CC_*, thread counts),
    every CC_* variable, and the check's `env:` even where the controller's value is the same. The
    rest of the controller's environment stays on the controller."""
    base = os.environ if base is None else base
    out = {k: v for k, v in env.items() if k.startswith("CC_") or base.get(k) != v}
    out.update(check_env or {})
    return dict(sorted(out.items()))
