"""How node agents join a controller (`--launcher join`, `clustercheck agent`): the identity an agent
reads, the shared secret, the keys derived from it, and the names of the controller store's keys.

Everything goes through the controller's c10d TCPStore, which anyone who reaches its port can read and
write, so every message that makes something happen is sealed (wire.seal, HMAC-SHA256) with a key
derived from a secret that controller and agents share (CLUSTERCHECK_TOKEN, or a file named by
CLUSTERCHECK_TOKEN_FILE; under `--launcher k8s` a Secret the launcher makes). No key ever travels:

- `hello` (the controller's nonce and how many agents it waits for), sealed with hello_key(token);
- each agent picks a nonce of its own and seals its `join/<index>` and everything after it with
  agent_key(token, controller nonce, agent nonce): a message of an earlier run, or of another agent,
  fails verification;
- each rank pool's key is pool_key(token, controller nonce, pool number), computed on both sides, so
  a pool's ranks get their key on stdin from their agent as the hosts launcher's ranks get it from ssh.

Messages from the controller to agent i are numbered `cmd/<i>/<n>` (n from an atomic counter, so that
a signal handler may post one too) and carry n inside the seal: a replayed command is refused.
"""

from __future__ import annotations

import hmac
import os
import re
import socket
import time
from dataclasses import dataclass
from typing import Mapping

from clustercheck.errors import UserError

TOKEN_ENV = "CLUSTERCHECK_TOKEN"
TOKEN_FILE_ENV = "CLUSTERCHECK_TOKEN_FILE"
CONTROLLER_ENV = "CLUSTERCHECK_CONTROLLER"
INDEX_ENV = "JOB_COMPLETION_INDEX"  # the Indexed Job's contract (kubernetes.io: Indexed Job)
NODE_ENV = "NODE_NAME"  # the downward API's spec.nodeName, by convention
DEFAULT_PORT = 29410
JOIN_TIMEOUT = 600.0  # NVSentinel's gang timeout for preflight checks: 600 s
MIN_TOKEN = 32
NONCE = 32  # hex digits of a nonce
SILENCE = 10.0  # seconds without a heartbeat after which an agent, and its ranks, are taken as gone
BEAT = 1.0  # seconds between an agent's heartbeats
# an agent's exit code for a bug of clustercheck's own in it (sysexits' EX_SOFTWARE), never 3 (its controller
# gone): the launcher that started it (run/hosts.py) so tells a harness crash, whose node is not to blame
CONTROLLER_GONE = 3  # an agent's exit once its controller went (agent.serve): says nothing of its host
AGENT_BUG = 70
NOT_THE_NODE = (AGENT_BUG, 4)  # an agent's exits that excuse its node: clustercheck's bug, input it refused (exit 4)

# store keys
HELLO, JOINS, CLOSED, OVER, LEFT = "hello", "joins", "gang-closed", "over", "left"


def join_key(index: int) -> str:
    return f"join/{index}"


def claim_key(index: int) -> str:
    return f"claim/{index}"


def mismatch_key(index: int) -> str:
    return f"mismatch/{index}"


def beat_key(index: int) -> str:
    return f"beat/{index}"


def cmd_seq(index: int) -> str:
    return f"cmdseq/{index}"


def cmd_key(index: int, n: int) -> str:
    return f"cmd/{index}/{n}"


def pool_prefix(number: int) -> str:
    """The PrefixStore prefix of pool `number`'s keys (ready/<rank>, task/<seq>, ...)."""
    return f"pool{number}"


def spawned_key(pool: int, index: int) -> str:
    return f"spawned/{pool}/{index}"


def exits_key(pool: int) -> str:
    return f"exits/{pool}"


def exit_key(pool: int, rank: int) -> str:
    return f"exit/{pool}/{rank}"


def logs_key(pool: int) -> str:
    return f"logs/{pool}"


def log_count(pool: int, index: int) -> str:
    return f"logn/{pool}/{index}"


def log_chunk(pool: int, index: int, n: int) -> str:
    return f"log/{pool}/{index}/{n}"


# -- secrets ------------------------------------------------------------------------------------------

def read_token(env: Mapping[str, str] | None = None) -> str:
    """The shared secret from CLUSTERCHECK_TOKEN or the file CLUSTERCHECK_TOKEN_FILE names; UserError
    (one line) when neither is set, the file cannot be read or the secret is short."""
    env = os.environ if env is None else env
    how = ""
    if path := env.get(TOKEN_FILE_ENV):
        try:
            with open(path, encoding="utf-8") as fh:
                token = fh.read().strip()
        except OSError as exc:
            raise UserError(f"{TOKEN_FILE_ENV}={path}: {exc.strerror or exc}") from None
        except UnicodeDecodeError:  # `openssl rand 32 > token`: bytes, where the secret is text
            raise UserError(f"{TOKEN_FILE_ENV}={path}: not UTF-8 text; write the secret as text, e.g. "
                            f"openssl rand -hex 32 > {path}") from None
        how = f"{TOKEN_FILE_ENV}={path}"
    else:
        token = env.get(TOKEN_ENV, "").strip()
        how = TOKEN_ENV
    if not token:
        raise UserError(f"controller and node agents authenticate each other with a shared secret: set "
                        f"{TOKEN_ENV} (or {TOKEN_FILE_ENV}) to the same value for both, e.g. "
                        f"export {TOKEN_ENV}=$(openssl rand -hex 32)")
    if len(token) < MIN_TOKEN:
        raise UserError(f"{how}: the shared secret has {len(token)} characters; give at least {MIN_TOKEN} "
                        f"(e.g. openssl rand -hex 32)")
    return token


def _derive(token: str, *parts: str) -> str:
    """HMAC-SHA256 of the token over a label: a key for one purpose, never the token itself."""
    return hmac.new(token.encode(), " ".join(("clustercheck", *parts)).encode(), "sha256").hexdigest()


def hello_key(token: str) -> str:
    return _derive(token, "hello")


def agent_key(token: str, nonce: str, agent_nonce: str) -> str:
    return _derive(token, "agent", nonce, agent_nonce)


def pool_key(token: str, nonce: str, number: int) -> str:
    return _derive(token, "pool", nonce, str(number))


# -- addresses and identity ---------------------------------------------------------------------------

_HOST = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.\-]*[A-Za-z0-9])?$|^\[?[0-9A-Fa-f:.]+\]?$")


def split_addr(text: str, what: str, default_port: int | None = DEFAULT_PORT) -> tuple[str, int]:
    """'HOST:PORT' (or HOST alone where a default port is given) -> (host, port); UserError naming
    `what` (the option or variable) otherwise."""
    host, sep, port = text.strip().rpartition(":")
    if not sep or "]" in port:  # no port, or a bare IPv6 address
        host, port = text.strip(), ""
    host = host.strip("[]")
    if not port and default_port is not None:
        port = str(default_port)
    if not host or not _HOST.match(host) or not port.isdigit() or not 0 < int(port) < 65536:
        raise UserError(f"{what} {text!r}: expected HOST:PORT, e.g. 10.0.0.5:{DEFAULT_PORT}")
    return host, int(port)


def knock(host: str, port: int, deadline: float) -> None:
    """Open (and close) a plain TCP connection to the controller's store, waiting at most a second and never
    past `deadline` (time.monotonic()); OSError when it does not open. torch's store client retries a
    refused connection for its whole timeout and then once more (7 s for 5), so an agent that only tried
    the store client waited far past its --join-timeout (17 s for 10) before saying it could not reach."""
    socket.create_connection((host, port), timeout=min(1.0, max(deadline - time.monotonic(), 0.05))).close()


@dataclass(frozen=True)
class Identity:
    """Who an agent is, from the Indexed Job contract (or its flags)."""

    index: int
    node: str
    controller: tuple[str, int]


SLURM_PLAN_ENV = "CC_SLURM_NODES"  # the hosts the controller planned, in its order (run/slurm.py sets it)


def slurm_place(env: Mapping[str, str]) -> tuple[str, str]:
    """An agent's index and node under srun (`clustercheck agent --slurm`): where SLURMD_NODENAME stands in
    the controller's planned hosts (CC_SLURM_NODES, which srun passes on), else in SLURM_JOB_NODELIST
    expanded, as the controller expands it (run/slurm.py)."""
    import hostlist

    name = SLURM_PLAN_ENV if env.get(SLURM_PLAN_ENV) else "SLURM_JOB_NODELIST"
    node, nodelist = env.get("SLURMD_NODENAME", ""), env.get(name) or env.get("SLURM_NODELIST", "")
    if not node or not nodelist:
        raise UserError("--slurm: SLURMD_NODENAME or SLURM_JOB_NODELIST is not set (srun sets both in a job step)")
    try:
        nodes = hostlist.expand_hostlist(nodelist)
    except hostlist.BadHostlist as exc:
        raise UserError(f"--slurm: {name} {nodelist!r}: {exc}") from None
    if node not in nodes:
        raise UserError(f"--slurm: this node, {node!r}, is not in {name} {nodelist!r}")
    return str(nodes.index(node)), node


# --hosts' rule (run/hosts.py host_names): a node name is printed, named in a log file's name and passed to
# scontrol, so it holds no control character, space, comma, bracket or '=' and never starts with '-'
NODE_NAME = re.compile(r"[A-Za-z0-9_.:@][A-Za-z0-9_.:@-]{0,252}")


def node_name_problem(name: str) -> str | None:
    """Why `name` is no node name (None where it is one): the one rule of an agent's name, checked by the
    agent before it joins and by the controller for every join it reads (an agent not of this version)."""
    if NODE_NAME.fullmatch(name):
        return None
    return "is no host name (letters, digits and . - _ : @ only, at most 253, not starting with '-')"


def identity(index: str | None, node: str | None, controller: str | None, hostname: str) -> Identity:
    """From the flags, else JOB_COMPLETION_INDEX, NODE_NAME (else the hostname) and
    CLUSTERCHECK_CONTROLLER; UserError naming what is missing or malformed."""
    env = os.environ
    raw_index = index if index is not None else env.get(INDEX_ENV)
    if raw_index is None or not raw_index.strip().isdigit():
        where = "--index" if index is not None else INDEX_ENV
        got = "is not set" if raw_index is None else f"is {raw_index!r}" + \
            ("; it must be >= 0" if re.fullmatch(r"\s*-\d+\s*", raw_index) else ", not a number")
        raise UserError(f"{where} {got}: an agent's index says which node of the run it is (an Indexed Job "
                        f"sets {INDEX_ENV}; elsewhere give --index N)")
    addr = controller if controller is not None else env.get(CONTROLLER_ENV)
    if not addr:
        raise UserError(f"{CONTROLLER_ENV} is not set: give the controller's HOST:PORT (the --store-addr of "
                        f"`clustercheck run --launcher join`), or --controller")
    where = "--controller" if controller is not None else CONTROLLER_ENV
    name = (node if node is not None else env.get(NODE_ENV, "")).strip() or hostname
    if (why := node_name_problem(name)) is not None:
        raise UserError(f"node name {name!r} ({'--node' if node is not None else NODE_ENV}): {why}")
    return Identity(int(raw_index), name, split_addr(addr, where, default_port=None))


@dataclass(frozen=True)
class Member:
    """An agent that joined."""

    index: int
    node: str
    key: str  # gang.agent_key: seals everything between the controller and this agent
    local_ranks: int | None  # --local-ranks, when the agent was given it
    host: str  # the agent's own hostname (a pod's name)
    pid: int
