"""`--launcher join`: the controller listens at one address and waits for N node agents
(`clustercheck agent`, run/agent.py) to join; each agent then starts its node's ranks when a pool asks.

Any engine that can start one process per node can run clustercheck this way: an Indexed Job (the agent
reads JOB_COMPLETION_INDEX), a JobSet, Kubeflow, an MPIJob, a systemd unit. How the two sides
authenticate each other: run/gang.py.

The gang: the controller waits --join-timeout seconds for every index 0..N-1; an index that never
joins is an absent node (named `index-<i>`, or by its pod under --launcher k8s), untested, and the run
is INCOMPLETE; a run with no agent at all does not start. Every pool's store is a prefix of the
controller's one store, so the agents, and their ranks, reach the controller at that one port.

A rank on a node is watched through its agent (`RemoteRank`, what the pool polls like a process): the
agent reports each rank's exit status and ships its output, and sends a heartbeat each second; an agent
silent for SILENCE seconds is taken as gone, with its ranks.
"""

from __future__ import annotations

import secrets
import socket
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any, Collection, Mapping, Protocol, Sequence

from clustercheck import __version__
from clustercheck.errors import ClusterCheckError, UserError, escape, show
from clustercheck.run import gang, wire
from clustercheck.run.launcher import Launcher, Loss, Over, RankProcess, loopback, rank_env
from clustercheck.run.remote import RemotePool
from clustercheck.run.signals import deferred, stopped_by, term_stops_like_ctrl_c
from clustercheck.run.timings import TIMINGS

# while agents are missing, say how many joined after this many seconds, then every SAY_EVERY: a wait of
# minutes (pods being scheduled, a step srun cannot create yet) is otherwise silence
SAY_AFTER, SAY_EVERY = 15.0, 30.0


class Pods(Protocol):
    """What an orchestrator knows of the agents' pods (k8s.launcher.JobPods): whether every missing one
    has ended, and why each never joined."""

    def ended(self, joined: Collection[int], expected: int) -> bool: ...

    def explain(self, missing: list[int], bad: Mapping[int, str], timeout: float) -> dict[str, str]: ...


class JoinLauncher(Launcher):
    kind = "join"
    remote = True
    shrinks = True  # each agent starts its own node's ranks: a later pool goes without a lost node's
    announce = True  # say on stderr that the controller waits (someone else starts the agents)
    join_wait = gang.JOIN_TIMEOUT  # seconds to wait for every agent, where --join-timeout is not given

    def __init__(self, nodes: int, store_addr: str | None, timeout: float | None = None,
                 token: str | None = None, *, gather: bool = True, pods: Pods | None = None) -> None:
        if nodes < 1:
            raise UserError(f"--nodes must be at least 1, got {nodes}")
        self.expected = nodes
        self.timeout = timeout or self.join_wait
        self.host, self.port = gang.split_addr(store_addr or f"0.0.0.0:{gang.DEFAULT_PORT}", "--store-addr")
        self.store_addr = f"{self.host}:{self.port}"
        self.token = gang.read_token() if token is None else token
        self.nonce = secrets.token_hex(gang.NONCE // 2)
        self.members: dict[int, gang.Member] = {}
        self.absent: dict[str, str] = {}
        self.store: Any = None
        self._listener: socket.socket | None = None
        self._beats: dict[int, tuple[int, float]] = {}  # agent -> (last count, when it last changed)
        self._silent: dict[int, str] = {}  # agent -> why it is taken as gone
        self._silent_seen: set[int] = set()  # agents taken as gone when over() last looked (after the check before)
        self._over: Over | None = None  # what over() said, once it said the plane is gone
        self._next_beat = 0.0
        self._pools: list[RemotePool] = []
        self._closed = False
        self.left_out: set[str] = set()  # nodes lost mid-run: later pools place no rank there (leave_out)
        self.pods = pods  # the agents' pods, where an orchestrator can say why one never joined
        self.ended_after: float | None = None  # seconds, where the wait stopped early: every missing pod had ended
        if gather:
            try:
                self.open()
                with term_stops_like_ctrl_c("while waiting for the node agents"):
                    self.gather()
            except BaseException:
                self.close()
                raise

    # -- the gang ---------------------------------------------------------------------------------
    def open(self) -> None:
        """Listen at --store-addr's port (on loopback only when the address is loopback) and say hello."""
        self.listen()
        self.serve_store()

    def listen(self) -> None:
        """The store's socket, listening: what connects from now on waits in its backlog until the store
        serves it (the hosts launcher starts its agents in between, while this process imports torch)."""
        bind = self.host if loopback(self.host) else "0.0.0.0"
        try:  # the address the agents are told must at least name a host here: else a 30 s wait, then torch's error
            socket.getaddrinfo(self.host, None)
        except (socket.gaierror, UnicodeError) as exc:
            raise UserError(f"--store-addr {self.store_addr}: {self.host!r} names no address this controller can "
                            f"resolve ({getattr(exc, 'strerror', None) or exc})") from None
        try:
            family = socket.AF_INET6 if ":" in bind else socket.AF_INET
            self._listener = socket.create_server((bind, self.port), family=family, backlog=1024)
        except OSError as exc:
            raise UserError(f"--store-addr {self.store_addr}: cannot listen on {bind}:{self.port} "
                            f"({exc.strerror or exc})") from None
        self.port = self._listener.getsockname()[1]  # port 0 (the hosts launcher's): the one the kernel gave
        self.store_addr = f"{self.host}:{self.port}"
        try:  # the store's own client connects where the agents will: one that cannot waits 30 s, then fails
            socket.create_connection((self.host, self.port), timeout=5).close()
        except OSError as exc:
            self._listener.close()
            self._listener = None
            raise self._unreachable(str(exc.strerror or exc)) from None

    def _unreachable(self, why: str) -> UserError:
        return UserError(f"--store-addr {self.store_addr}: this controller cannot reach its own store at the address "
                         f"the agents are told ({why}); give an address of this host that they and it can reach")

    def serve_store(self) -> None:
        """The controller's store on the listening socket, and the hello in it."""
        with deferred():  # torch's import swallows an interrupt inside it (its optional numpy import): after it
            import torch.distributed as dist

        assert self._listener is not None, "serve_store() follows listen()"
        try:
            self.store = dist.TCPStore(self.host, self.port, is_master=True, wait_for_workers=False,
                                       timeout=timedelta(seconds=30), master_listen_fd=self._listener.detach())
        except RuntimeError as exc:  # DistNetworkError: the store's own client could not reach the address
            said = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise self._unreachable(said) from None
        self._listener = None  # the store owns and closes it
        self.store.set(gang.HELLO, wire.seal(gang.hello_key(self.token), {"nonce": self.nonce, "nodes": self.expected}))

    def gather(self, every: float = 5.0) -> None:
        """Wait for agents 0..N-1 until all joined or the timeout, or (with `pods`, looked at when an agent joins
        and every `every` s) until every pod still missing has ended. Names the absent."""
        try:
            bad = self._await(every)
        except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM from the scheduler: say how far the gang got
            raise KeyboardInterrupt(f"{stopped_by(exc)}, with {len(self.members)} of {self.expected} node agent(s) "
                                    "joined") from None
        self.store.set(gang.CLOSED, "1")  # an agent that comes later leaves at once
        bad.update(self._read_joins())
        missing = [i for i in range(self.expected) if i not in self.members]
        self._settle(missing, bad)
        TIMINGS.mark("node agents joined")  # --timings: else the wait would read as part of collection

    def _await(self, every: float) -> dict[int, str]:
        if self.announce:
            print(f"clustercheck: waiting up to {self.timeout:g} s for {self.expected} node agent(s) at port "
                  f"{self.port}", file=sys.stderr, flush=True)
        start = time.monotonic()
        deadline = start + self.timeout
        seen, bad, last_look, next_look, next_say = -1, {}, start - every, start + every, start + SAY_AFTER
        while len(self.members) < self.expected and time.monotonic() < deadline:
            if time.monotonic() >= next_say:
                next_say += SAY_EVERY
                note = self.waiting()
                print(f"clustercheck: {len(self.members)} of {self.expected} node agent(s) joined after "
                      f"{time.monotonic() - start:.0f} s; waiting up to {deadline - time.monotonic():.0f} s more"
                      + (f" ({note})" if note else ""), file=sys.stderr, flush=True)
            count = self.store.add(gang.JOINS, 0)
            if count != seen:  # an agent joined: the pods are looked at now (once a second at most), not in `every` s
                seen, next_look = count, min(next_look, last_look + 1.0)
                bad = self._read_joins()
            if self.pods is not None and time.monotonic() >= next_look:
                last_look = time.monotonic()
                next_look = last_look + every
                if self.pods.ended(self.members, self.expected):
                    self.ended_after = time.monotonic() - start
                    break
            time.sleep(0.1)
        return bad

    def waiting(self) -> str:
        """What the launcher knows of why agents are still missing, for the waiting line ("" here: someone
        else starts them)."""
        return ""

    def _read_joins(self) -> dict[int, str]:
        """Read the joins posted so far; -> index: why an index that tried could not join."""
        bad: dict[int, str] = {}
        for i in range(self.expected):
            if i in self.members:
                continue
            if self.store.check([gang.mismatch_key(i)]):
                bad[i] = (f"its agent's {gang.TOKEN_ENV} differs from the controller's (the agent said so; "
                          "nothing of it was accepted)")
            if not self.store.check([gang.join_key(i)]):
                continue
            raw = self.store.get(gang.join_key(i))
            agent_nonce, sealed = raw[:gang.NONCE].decode(errors="replace"), raw[gang.NONCE:]
            key = gang.agent_key(self.token, self.nonce, agent_nonce)
            try:
                info = wire.unseal(key, sealed)
                member = gang.Member(i, str(info["node"]), key, info.get("local_ranks"), str(info["host"]), int(info["pid"]))
            except (wire.Forged, KeyError, TypeError, ValueError) as exc:
                bad[i] = f"a join for index {i} was refused ({exc})"
                continue
            if info.get("index") != i:
                bad[i] = f"a join for index {i} named index {info.get('index')!r}"
                continue
            if (why := gang.node_name_problem(member.node)) is not None:  # it is printed and passed to scontrol
                bad[i] = f"a join for index {i} named node {show(member.node)}, which {why}"
                continue
            if (version := info.get("version")) != __version__:  # the wire, and how answers are read, are one version's
                runs = f"clustercheck {show(version)}" if version else "an earlier clustercheck"
                bad[i] = (f"its agent on {member.node} runs {runs}, the controller {__version__}: one clustercheck "
                          "across the run")
                continue
            self.members[i] = member
            self._beats[i] = (0, time.monotonic())
        return bad

    def _settle(self, missing: list[int], bad: Mapping[int, str]) -> None:
        """After the wait: refuse what cannot run, name the absent, fix the nodes and ranks per node."""
        absent = self.explain(missing, bad)
        if not self.members:
            raise self.not_started(absent)
        ordered = [self.members[i] for i in sorted(self.members)]
        seen: dict[str, int] = {}
        for m in ordered:
            if m.node in seen:
                raise UserError(f"node agents {seen[m.node]} and {m.index} both run on node {m.node}: one agent "
                                f"per node (the Job's pod anti-affinity), or a distinct {gang.NODE_ENV}")
            seen[m.node] = m.index
        offers = {m.local_ranks for m in ordered}
        if len(offers) > 1:
            said = ", ".join(f"index {m.index}: {m.local_ranks or 'one per GPU'}" for m in ordered)
            raise UserError(f"the node agents offer different numbers of ranks ({said}): give every agent the "
                            "same --local-ranks")
        self.ranks_per_node = next(iter(offers))
        self.nodes = tuple(m.node for m in ordered)
        self.absent = absent
        if absent:
            print(f"clustercheck: {len(ordered)} of {self.expected} node agent(s) joined; never joined: "
                  + "; ".join(f"{escape(name)}: {escape(why)}" for name, why in absent.items())  # a backstop
                  + ": those nodes are untested and the run is INCOMPLETE", file=sys.stderr, flush=True)

    def not_started(self, absent: Mapping[str, str]) -> ClusterCheckError:
        """The error of a run no agent joined: the user's to mend (exit 4) here; the hosts launcher, which
        started the agents and has what they said, tells its harness's failure apart."""
        return UserError(self.none_joined(absent))

    def none_joined(self, absent: Mapping[str, str]) -> str:
        """Why the run cannot start, when no agent joined."""
        said = "".join(f"; {name}: {why}" for name, why in list(absent.items())[:3]
                       if not why.startswith("no agent with"))
        when = (f"within {self.timeout:g} s at port {self.port}" if self.ended_after is None else  # the wait stopped early
                f"at port {self.port}: every agent pod had ended after {self.ended_after:.0f} s of the {self.timeout:g} s wait")
        return (f"no node agent joined {when} ({self.expected} expected{said}); "
                f"start `clustercheck agent` with {gang.CONTROLLER_ENV}=HOST:{self.port} and the controller's "
                f"{gang.TOKEN_ENV}")

    def explain(self, missing: list[int], bad: Mapping[int, str]) -> dict[str, str]:
        """absent node name -> why, for the indices that never joined (with `pods`: by node or pod, and
        the reason the pod's status gives)."""
        if self.pods is not None and missing:
            return self.pods.explain(missing, bad, self.timeout)
        return {f"index-{i}": bad.get(i) or f"no agent with {gang.INDEX_ENV}={i} joined within {self.timeout:g} s"
                for i in missing}

    # -- pools ------------------------------------------------------------------------------------
    def pool_store(self, number: int) -> tuple[Any, str, int]:
        import torch.distributed as dist

        return dist.PrefixStore(gang.pool_prefix(number), self.store), self.host, self.port

    def pool_key(self, number: int) -> str:
        return gang.pool_key(self.token, self.nonce, number)

    def leave_out(self, nodes: Collection[str]) -> None:
        self.left_out.update(nodes)

    def why_lost(self, node: str) -> str:
        return next((why for i, why in self.silent().items() if self.members[i].node == node), "")

    def loss(self, node: str) -> Loss | None:
        """What the orchestrator says of a lost node's agent (its pod evicted, deleted, ...), where it can, told
        whether the agent said a signal stopped it before it went silent."""
        index = next((i for i, m in self.members.items() if m.node == node), None)
        read = getattr(self.pods, "disrupted", None)  # Kubernetes' pods can tell (k8s.launcher.JobPods)
        return None if read is None or index is None else read(index, node, self.stop_said(index))

    def stop_said(self, index: int, last: int = 64) -> str:
        """The signal ("SIGTERM") agent `index` said stopped it, in the line it ships after each rank it killed
        (agent.end_all), sealed with its key, among its `last` chunks of each pool; "" where it said none."""
        m, store = self.members.get(index), self.store
        if m is None or store is None:
            return ""
        said = f"\n[clustercheck agent on {m.node}: stopped by "
        for pool in reversed(self._pools):
            try:
                have = store.add(gang.log_count(pool.number, index), 0)
                for n in range(have, max(0, have - last), -1):
                    text = str(wire.unseal(m.key, store.get(gang.log_chunk(pool.number, index, n))).get("text", ""))
                    if text.startswith(said) and text.endswith(", so it killed this rank]\n"):
                        return text[len(said):].partition(",")[0]
            except (RuntimeError, wire.Forged, AttributeError):  # the store gone, a forged or odd chunk: not said
                continue
        return ""

    def over(self, settle: bool = False) -> Over | None:
        """Every node agent still in the run (two or more: those lost before the check that just ended aside) has
        stopped answering: no node explains that alone, while the controller's network or its store would, so
        the run stops and names none of them (Over.cost with none failed: each item of the check is only not
        measured; an agent lost before stays its own loss, on the exclusion list)."""
        if self._over is not None:  # said once: every later look says the same (nodefacts, then the plugin)
            return self._over
        silent = self.silent()
        seen, self._silent_seen = self._silent_seen, set(silent)  # as the last look (after the check before) saw
        still = [i for i in sorted(self.members) if i not in seen]  # agents lost before are each their own loss
        if len(still) < 2 or any(i not in silent for i in still):
            return None
        said = "; ".join(silent[i] for i in still)
        self._over = Over(f"every node agent still in the run ({len(still)}) stopped answering at once ({said}): "
                          "the controller's network or store is the likelier cause than every node", {})
        return self._over

    def placed(self) -> list[gang.Member]:
        """The agents a pool places ranks on, in index order: every one that joined, less the nodes left out."""
        return [self.members[i] for i in sorted(self.members) if self.members[i].node not in self.left_out]

    def node_of(self, rank: int, nranks: int) -> str:
        nodes = [m.node for m in self.placed()] or list(self.nodes)
        return nodes[min(len(nodes) - 1, rank // max(1, nranks // len(nodes)))]

    def start(self, env: dict[str, str], nranks: int, key: str, logs: list[Path],
              check_env: Mapping[str, str] | None = None) -> Sequence[RankProcess]:
        ordered = self.placed()
        per_node = nranks // len(ordered)
        number = int(env["CC_POOL_NUMBER"])
        travel = {**rank_env(env, check_env=check_env), "CC_STORE_PREFIX": gang.pool_prefix(number)}
        pool = RemotePool(self, number, [m for m in ordered for _ in range(per_node)], logs)
        self._pools.append(pool)
        for pos, m in enumerate(ordered):
            ranks = list(range(pos * per_node, (pos + 1) * per_node))
            self.post(m, {"op": "spawn", "pool": number, "ranks": ranks, "world": nranks,
                          "backend": env["CC_BACKEND"], "env": travel})
        return pool.ranks

    def post(self, member: gang.Member, message: dict[str, Any]) -> None:
        """Command agent `member`: numbered by an atomic counter (safe from a signal handler), the number
        sealed inside so that a replay is refused."""
        n = self.store.add(gang.cmd_seq(member.index), 1)
        self.store.set(gang.cmd_key(member.index, n), wire.seal(member.key, {**message, "seq": n}))

    def silent(self) -> Mapping[int, str]:
        """Agents taken as gone: no heartbeat for SILENCE seconds (looked at once a second at most)."""
        now = time.monotonic()
        if now >= self._next_beat and self.store is not None:
            self._next_beat = now + 1.0
            heard = wire.read_present(self.store, {i: gang.beat_key(i) for i in self._beats if i not in self._silent})
            for i, (count, since) in self._beats.items():
                if i in self._silent:
                    continue
                raw = heard.get(i)  # sealed with the agent's key, for its index, and counting up: else no beat
                beat = wire.beat_of(self.members[i].key, raw, index=i) if raw is not None else None
                if beat is not None and beat > count:
                    self._beats[i] = (beat, now)
                elif now - since > gang.SILENCE:
                    self._silent[i] = f"its node's agent ({self.members[i].node}), silent for {gang.SILENCE:g} s"
        return self._silent

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for pool in self._pools:
            pool.close_files()
        if self._listener is not None:
            self._listener.close()
        if self.store is None:
            return
        try:
            self.store.set(gang.OVER, "1")  # agents that joined late, or not at all, leave too
            for m in self.members.values():
                if m.index not in self._silent:
                    self.post(m, {"op": "bye"})
            deadline = time.monotonic() + 5  # each agent says it left: its ranks are gone too
            while self.store.add(gang.LEFT, 0) < len(self.members) - len(self._silent) and time.monotonic() < deadline:
                time.sleep(0.05)
        except Exception:  # the store is this process's own; nothing to save if it broke
            pass
        self.store = None
