"""`--launcher hosts`: an explicit host list and a command template such as `ssh {host} {python}`. The
template is split like a shell would (shlex) and never given to a shell here (ssh gives what follows the
host to the login shell there, so under ssh the words clustercheck adds are quoted for it). Through it the launcher starts
one node agent per host (`{python} -m clustercheck agent`, run/agent.py), which joins this controller as
the agents of `--launcher join` do (run/join.py) and starts that host's ranks whenever a pool asks.

Why agents and not the ranks themselves: an agent imports torch once and forks every later pool's ranks
from its zygote (run/zygote.py), where a rank started through the template would import torch again
for every pool (4-5 s on a GPU node; docs/benchmarks.md). It also makes one connection per host per run,
not one per rank per pool, and a host whose agent cannot start is named with what it printed.

The run's shared secret is made here, for this run only, and reaches each agent on its stdin: ssh passes
no environment (only what the server's AcceptEnv lets through), and a secret in the argv would be read
by anyone on the host. The variables a pool sets for its ranks travel in the pool's spawn message and
are laid over the agent's own (remote login) environment, as they were over a rank's.
"""

from __future__ import annotations

import os
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Collection, Mapping

from clustercheck.errors import ClusterCheckError, HarnessError, UserError, escape
from clustercheck.exitcodes import Exit
from clustercheck.run.gang import CONTROLLER_GONE, NOT_THE_NODE, node_name_problem
from clustercheck.run.join import JoinLauncher
from clustercheck.run.launcher import Loss, advertised, here, loopback
from clustercheck.run.signals import term_stops_like_ctrl_c

HOSTS_WAVE = 64  # agents started (ssh connections opened) at a time...
HOSTS_WAVE_PAUSE = 0.5  # ...then a pause: sshd refuses past MaxStartups (10:30:100) handshakes at once
LOOK = 0.2  # seconds between looks at whether every agent still missing has exited
# seconds an agent tries to reach this controller, which listens before any agent starts: what it cannot
# reach in that time it cannot reach at all (an address that is loopback, or not routed, from that host)
REACH = 10.0
# seconds the controller waits for every agent to join or end: its start and one torch import, as long as a
# pool waits for its ranks (pool.START_TIMEOUT), not the join launcher's 600 s for pods being scheduled
JOIN_WAIT = 180.0
EXIT_WAIT = 3.0  # seconds a lost agent's process is given to exit, so that its code is read (losing)
LAST_WORDS = 300  # characters of a failed agent's output quoted in the reason
# what an agent says once it tried the controller's address (agent.connect): before then the address is no cause
TRIED = ("waiting for the controller", "could not reach the controller")
REMOTE_SHELLS = ("ssh", "rsh")  # template programs that hand the words after the host to a shell there


class HostsLauncher(JoinLauncher):
    kind = "hosts"
    announce = False  # the agents are this launcher's own: nothing for the user to start
    check = "check --hosts and --host-command"  # what to look at when no agent joined
    join_wait = JOIN_WAIT

    def __init__(self, hosts: list[str], template: str, store_addr: str | None = None, *,
                 timeout: float | None = None) -> None:
        if not hosts:
            raise UserError("--launcher hosts needs --hosts, e.g. --hosts node[01-04]")
        if len({same_host(h) for h in hosts}) < len(hosts):
            twice = sorted(h for h, n in Counter(map(same_host, hosts)).items() if n > 1)
            raise UserError(f"--hosts names {', '.join(twice[:3])} more than once: one agent per host")
        try:
            words = shlex.split(template)
        except ValueError as exc:
            raise UserError(f"--host-command {template!r}: {exc}") from None
        if not words:
            raise UserError("--host-command is empty; e.g. 'ssh {host} {python}'")
        program = sys.executable if words[0] == "{python}" else words[0]
        if "{host}" not in program and shutil.which(program) is None:  # before any check, not at the first pool
            raise UserError(f"--host-command {template!r}: {words[0]!r} is not on the PATH here")
        self.words = words
        super().__init__(len(hosts), None, timeout, secrets.token_hex(32), gather=False)
        # the address the agents reach this controller at; port 0: open() takes a free one
        self.host, self.port = advertised(store_addr), 0
        self.store_addr = self.host  # as the user gave it, or as found (what a refusal to listen names)
        self.addr_given = store_addr is not None
        # the hosts as given, by agent index; `nodes` becomes the hosts whose agents joined (join._settle)
        self.hosts = self.nodes = tuple(hosts)
        self.agents: list[subprocess.Popen[bytes]] = []
        self.agent_dir: Path | None = None  # the agents' output, from their start (launch)
        self.pods = self  # whether every missing agent has ended, why, and how one was lost: their processes say
        self._dir_named = False  # whether the run's error names agent_dir (no agent joined): close() need not
        self._settle_until = 0.0  # the end of the window the nodes lost together share to say how they ended

    def begin(self) -> None:
        """Start every host's agent and wait until each joined or ended; the nodes are then those that joined,
        and the others absent, with why (the run is INCOMPLETE)."""
        try:
            self.listen()
            self.launch()  # the agents import torch while this process does, for the store (serve_store)
            self.serve_store()
            with term_stops_like_ctrl_c("while starting the node agents"):
                self.gather(every=LOOK)
        except BaseException as exc:
            self._dir_named = self.agent_dir is not None and str(self.agent_dir) in str(exc)
            self.close()
            raise

    def argv(self, host: str, *args: str) -> list[str]:
        """The template for `host`, then `args` (the agent's). ssh joins every word after the host into one
        command line for the login shell there, so under ssh what clustercheck fills in or adds ({python},
        the agent's arguments) is quoted for that shell: a path with a space stays one word on the host.
        Other programs (srun, env, docker exec) take the words as they are."""
        quote = shlex.quote if Path(self.words[0]).name in REMOTE_SHELLS else str
        subst = {"{host}": host, "{python}": quote(sys.executable)}
        out = []
        for word in self.words:
            for k, v in subst.items():
                word = word.replace(k, v)
            out.append(word)
        if "{python}" not in " ".join(self.words):
            out.append(quote(sys.executable))
        return [*out, *map(quote, args)]

    def agent_log(self, index: int) -> Path:
        assert self.agent_dir is not None, "agents have logs once launched"
        return self.agent_dir / f"agent-{index}-{self.hosts[index]}.log"

    def launch(self) -> None:
        """Start every host's agent, in waves: its output into a log of its own, the secret on its stdin."""
        self.agent_dir = Path(tempfile.mkdtemp(prefix="clustercheck-hosts-"))
        for i, host in enumerate(self.hosts):
            if i and i % HOSTS_WAVE == 0:  # never thousands of handshakes at once
                time.sleep(HOSTS_WAVE_PAUSE)
            argv = self.argv(host, "-m", "clustercheck", "agent", "--index", str(i), "--node", host,
                             "--controller", f"{bracketed(self.host)}:{self.port}", "--token-stdin",
                             "--join-timeout", f"{REACH:g}")
            self.agents.append(start_agent(argv, self.agent_log(i), self.token))

    # -- what the agents' processes say (join.Pods) ------------------------------------------------
    def ended(self, joined: Collection[int], expected: int) -> bool:
        return all(self.agents[i].poll() is not None for i in range(expected) if i not in joined)

    def explain(self, missing: list[int], bad: Mapping[int, str], timeout: float | None = None) -> dict[str, str]:
        out = {}
        for i in missing:
            proc = self.agents[i] if i < len(self.agents) else None
            if proc is not None and proc.poll() is None:
                proc.kill()  # it would see the gang closed and leave; it need not hold the host meanwhile
            said = last_words(self.agent_log(i))
            code = proc.returncode if proc is not None else None
            if i in bad:
                why = bad[i]
            elif code is not None and code < 0:
                why = f"its agent was killed by {signal.Signals(-code).name} before joining"
            elif code is not None:
                why = f"its agent exited with {code} before joining"
            else:
                why = f"its agent did not join within {self.timeout:g} s"
            out[self.hosts[i]] = why + (f": {said}" if said else "")
        return out

    def none_joined(self, absent: Mapping[str, str]) -> str:
        said = "; ".join(f"{name}: {why}" for name, why in list(absent.items())[:3])
        if self.tried(absent) and loopback(self.host) and not all(here(h) for h in self.hosts):
            why = "as --store-addr gave it" if self.addr_given else "this controller's hostname resolves to it"
            hint = (f"the controller was advertised at {self.host}, a loopback address ({why}), which other hosts "
                    "cannot reach: give --store-addr with an address they can reach")
        else:
            hint = self.check
        return f"no host's agent joined ({said}); {hint}; the agents' output: {self.agent_dir}"

    def tried(self, absent: Mapping[str, str]) -> bool:
        """Whether an agent that never joined got as far as trying the controller's address (agent.connect
        says so within a second): only then can that address be the cause, not where ssh failed or Python
        there could not import clustercheck."""
        logs = {self.agent_log(self.hosts.index(h)) for h in absent if h in self.hosts} if self.agent_dir else set()
        return any(w in text for text in [*absent.values(), *map(tail, logs)] for w in TRIED)

    def not_started(self, absent: Mapping[str, str]) -> ClusterCheckError:
        """No host's agent joined: the user's to mend (exit 4) where an agent refused its input (`clustercheck:
        error: ...`, exit 4) or the template's program is not on the host (the shell's 126, 127); else the
        harness could not reach or start the agents (ssh failed, Python there lacks a module): exit 3, as
        one host of two unreachable is INCOMPLETE, never usage."""
        text = self.none_joined(absent)
        codes = {self.agents[self.hosts.index(h)].returncode for h in absent if h in self.hosts} if self.agents else set()
        if codes & {Exit.BAD_INPUT, 126, 127} or any("clustercheck: error:" in why for why in absent.values()):
            return UserError(text)
        return HarnessError(text)

    def silent(self) -> Mapping[int, str]:
        """As the join launcher's, and an agent whose process has exited (its ssh dropped) at once."""
        for i, proc in enumerate(self.agents):
            if i in self.members and i not in self._silent and proc.poll() is not None:
                # a crash's last words are said once, by disrupted(), which excuses the node (Losses.ask)
                said = last_words(self.agent_log(i)) if self.disrupted(i, self.hosts[i]) is None else ""
                self._silent[i] = f"its node's agent ({self.hosts[i]}), which exited with {proc.returncode}" + \
                    (f" ({said})" if said else "")
        return super().silent()

    def losing(self) -> None:
        """A window of EXIT_WAIT opens for the nodes just found lost together to say how they ended: shared (a
        hundred hosts gone at once wait 3 s, not 300), and each later loss opens its own."""
        self._settle_until = time.monotonic() + EXIT_WAIT

    def settling(self) -> float:
        """Seconds left of the window the nodes lost together share (losing); 0 outside one."""
        return max(0.0, self._settle_until - time.monotonic())

    def disrupted(self, index: int, node: str, stopped: str = "") -> Loss | None:
        """How agent `index` (on `node`) was lost mid-run, as its exit code tells (join.loss): a bug of
        clustercheck's own (AGENT_BUG) or input it refused (4) ended it, so the node is not blamed, only not
        measured; None for any other end (killed by a signal: the OOM killer; ssh's 255: the host went; a
        crash a GPU fault may cause), where the node's going stands. `stopped`, the signal the agent said
        stopped it (join.loss), excuses nothing here: who sent it is not known, its exit code says more."""
        proc = self.agents[index] if index < len(self.agents) else None
        if proc is None or sum(p is proc for p in self.agents) > 1:
            return None  # one process for every agent (the slurm launcher's srun step): its code is no one agent's
        try:  # asked as its connection dropped, the agent (and the ssh before it) may take a moment to exit
            code: int | None = proc.wait(self.settling())
        except subprocess.TimeoutExpired:  # running on, or a host gone mid-ssh: its going stands
            return None
        if code not in NOT_THE_NODE:
            return None
        said = last_words(self.agent_log(index))
        return Loss(f"its agent crashed: {said}" if said else f"its agent crashed (exit {code})", blamed=False)

    def close(self) -> None:
        """Say goodbye (the join launcher's close), then end the agents that never joined (SIGTERM: one still
        importing torch, or trying to reach this controller, would wait on) and those taken as gone (silent: no
        goodbye reaches them, and waiting for them to leave held every run that lost a host 5 s), wait for each
        agent's process and kill what is left. The agents' output is kept only where an agent ended on its own
        with a code that says more than that this controller went (3): one this close ended says nothing of
        its host."""
        super().close()
        ended: set[int] = set()  # the processes this close signalled: their codes are this close's doing
        for i, proc in enumerate(self.agents):
            if (i not in self.members or i in self._silent) and id(proc) not in ended and proc.poll() is None:
                stop_agent(proc, signal.SIGTERM)
                ended.add(id(proc))
        deadline = time.monotonic() + 5
        for proc in self.agents:
            try:
                proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                stop_agent(proc, signal.SIGKILL)
                proc.wait()
                ended.add(id(proc))
        failed = any(p.returncode not in (0, CONTROLLER_GONE) and id(p) not in ended for p in self.agents)
        if self.agent_dir is not None and failed:  # kept: said here unless the run's error named it
            if not self._dir_named:
                print(f"clustercheck: the node agents' output stays in {self.agent_dir}", file=sys.stderr, flush=True)
        elif self.agent_dir is not None:
            shutil.rmtree(self.agent_dir, ignore_errors=True)
        self.agents, self.agent_dir = [], None  # a second close has nothing left to do


def host_names(text: str, what: str) -> list[str]:
    """The hosts a hostlist names (`node[01-04],login1`), in order, for `what` (the option or variable it came
    from): UserError in one line for a malformed one, one that names no host (`,`), a word that is no host name, or a host named twice (a
    host name ignores case and a trailing dot: n1, N1 and n1. are one host, which would get two agents)."""
    import hostlist

    try:  # duplicates kept: python-hostlist drops them by default, and a duplicate is often a typo
        names = hostlist.expand_hostlist(text, allow_duplicates=True)
    except hostlist.BadHostlist as exc:
        raise UserError(f"{what} {text!r}: {exc}") from None
    if not names and text:  # `,`: else refused further on as if no list were given, naming another option
        raise UserError(f"{what} {text!r} names no host")
    for name in names:  # a host name is a file name of its agent's log and a word of its command
        if (why := node_name_problem(name)) is not None:  # the one rule of a node's name (an agent's too)
            raise UserError(f"{what} {text!r}: {name!r} {why}")
    same = Counter(same_host(n) for n in names)
    twice = list(dict.fromkeys(n for n in names if same[same_host(n)] > 1))
    if twice:
        spelt = {h: [n for n in twice if same_host(n) == h] for h in dict.fromkeys(map(same_host, twice))}
        said = ", ".join(ns[0] if len(ns) == 1 else f"{ns[0]} (as {' and '.join(ns)})" for ns in spelt.values())
        raise UserError(f"{what} names {said} more than once: one agent per host")
    return names


def same_host(name: str) -> str:
    """A host name as DNS compares it: case ignored, and a trailing dot (the root) dropped."""
    return name.lower().rstrip(".") or name


def start_agent(argv: list[str], log: Path, token: str, env: Mapping[str, str] | None = None
                ) -> subprocess.Popen[bytes]:
    """One host's agent (or its ssh), in a session of its own: Ctrl-C at the terminal reaches the
    controller only, which ends the agents itself, and ssh can never prompt on the terminal."""
    with log.open("wb") as out:
        try:
            proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True, env=env)
        except OSError as exc:  # a program named by {host}, or one that is not executable
            raise UserError(f"--host-command: cannot start {argv[0]!r}: {exc.strerror or exc}") from None
    assert proc.stdin is not None
    try:
        proc.stdin.write(token.encode() + b"\n")
        proc.stdin.close()
    except BrokenPipeError:
        pass  # it died at once: it never joins, and its output says why
    return proc


def stop_agent(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    """Send `sig` to an agent's process group (start_agent made it a leader: what it forked goes too), or to
    the process alone where it leads none."""
    try:
        if os.getpgid(proc.pid) == proc.pid:
            os.killpg(proc.pid, sig)
            return
    except (ProcessLookupError, PermissionError):
        pass
    if proc.poll() is None:
        proc.send_signal(sig)


def last_words(log: Path) -> str:
    """The last line a failed agent (or its ssh) printed, cut to LAST_WORDS characters and escaped
    (errors.escape): it is quoted on the terminal and in the run's error, where an ESC sequence it
    holds would drive the terminal (hide a line, write the clipboard)."""
    lines = [ln.strip() for ln in tail(log).splitlines() if ln.strip()]
    return escape(lines[-1][:LAST_WORDS]) if lines else ""


def tail(log: Path) -> str:
    """The last 4 KiB of an agent's log ("" where it cannot be read)."""
    try:
        with log.open("rb") as fh:
            fh.seek(max(0, log.stat().st_size - 4096))
            return fh.read().decode(errors="replace")
    except OSError:
        return ""


def bracketed(addr: str) -> str:
    return f"[{addr}]" if ":" in addr and not addr.startswith("[") else addr

