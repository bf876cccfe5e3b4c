"""Every run option, declared once: the pytest plugin and `clustercheck run` both build their options
from `RUN_OPTIONS`, and `clustercheck run` hands its values on to pytest through the same table."""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from clustercheck.argtypes import given, path
from clustercheck.fabric.comm import NCCL_LOG_HELP, NCCL_LOG_MODES
from clustercheck.errors import UserError
from clustercheck.run.launch import LAUNCHERS, refuse_unread
from clustercheck.judging.profiles import SearchPath, search_path
from clustercheck.record.keys import SigningKey, load_private

FAULTS = ("hang", "crash", "raise", "corrupt", "delay")
DEFAULT_TOLERANCE = "5%"  # --compare-tolerance under --compare when it is not given


@dataclass(frozen=True)
class Opt:
    name: str  # the Options field and argparse dest
    pytest_flag: str  # under pytest, where flags share one namespace with other plugins (--cc-out)
    help: str
    cli_flag: str = ""  # under `clustercheck run`, when it differs (--out)
    default: Any = None
    type: Callable[[str], Any] | None = None
    choices: tuple[str, ...] | None = None
    flag: bool = False  # on/off (store_true)
    repeat: bool = False  # may be given several times (append)
    metavar: str | None = None
    cli: bool = True  # offered by `clustercheck run` (test-only options are pytest's alone)

    @property
    def run_flag(self) -> str:
        return self.cli_flag or self.pytest_flag

    def kwargs(self) -> dict[str, Any]:
        if self.flag:
            return {"action": "store_true", "default": self.default, "help": self.help}
        if self.repeat:
            return {"action": "append", "default": [], "metavar": self.metavar, "help": self.help,
                    **({"type": self.type} if self.type else {})}
        out: dict[str, Any] = {"default": self.default, "help": self.help}
        for key in ("type", "choices", "metavar"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        return out


RUN_OPTIONS: tuple[Opt, ...] = (
    Opt("platform", "--platform", "threshold profile to judge against (a file name in --thresholds without "
        ".yaml); default: detected from the hardware", type=given("--platform")),
    Opt("thresholds", "--thresholds", "a directory of your own threshold profiles, searched before the shipped "
        "ones (repeatable; also $CLUSTERCHECK_THRESHOLDS, ':'-separated); a profile of the same name hides ours",
        type=path("--thresholds"), metavar="DIR", repeat=True),
    Opt("ranks", "--ranks", "rank processes per node, 1 to 1024 (default: one per GPU; 2 without GPUs); local "
        "ranks are capped by this machine's cores and memory unless --force", type=int, metavar="N"),
    Opt("force", "--cc-force", "run more local ranks than this machine's cores and memory hold (--ranks)",
        cli_flag="--force", default=False, flag=True),
    Opt("backend", "--backend", "torch.distributed backend (default: nccl with GPUs, gloo without)",
        default="auto", choices=("auto", "gloo", "nccl")),
    Opt("out", "--cc-out", "where each run writes its record and reports, in DIR/<time>-<platform>/ and "
        "DIR/latest (default: clustercheck-out)", cli_flag="--out", default=Path("clustercheck-out"), type=path("--out"),
        metavar="DIR"),
    Opt("launcher", "--launcher", "how ranks start: local (this machine), slurm (srun on every node of the "
        "allocation, inside salloc or sbatch), hosts (--hosts started with --host-command), join (--nodes node "
        "agents, `clustercheck agent`, join this controller), k8s (the same agents as an Indexed Job created "
        "here: docs/kubernetes.md)", default="local", choices=tuple(LAUNCHERS)),
    Opt("hosts", "--hosts", "nodes for --launcher hosts, in Slurm hostlist syntax (node[01-04],gpu7)",
        metavar="HOSTLIST"),
    Opt("host_command", "--host-command", "how --launcher hosts runs Python on a host; split like a shell "
        "would, never run by one here; {host} and {python} are filled in, and under ssh what clustercheck "
        "adds is quoted for the host's shell (default: 'ssh {host} {python}')",
        default="ssh {host} {python}", metavar="TEMPLATE"),
    Opt("store_addr", "--store-addr", "slurm and hosts launchers: the address ranks on other machines reach "
        "this controller at (its rank store); default: $CC_STORE_ADDR, else the IP this machine's hostname "
        "resolves to, which on many systems is loopback. join and k8s: HOST:PORT the node agents reach "
        "(default: every interface, port 29410)", metavar="ADDR"),
    # -- node agents and Kubernetes (docs/kubernetes.md) --
    Opt("nodes", "--nodes", "join and k8s launchers: how many nodes (node agents) the run waits for",
        type=int, metavar="N"),
    Opt("join_timeout", "--join-timeout", "join, k8s, hosts and slurm: how long to wait for every node agent; "
        "those that never join are untested and the run is INCOMPLETE (default 600 for join and k8s, whose "
        "agents are started or scheduled elsewhere; 180 for hosts and slurm, whose agents this run starts)",
        type=float, metavar="SECONDS"),
    Opt("image", "--k8s-image", "k8s: the container image with clustercheck (and torch) for the node agents",
        cli_flag="--image", metavar="IMAGE"),
    Opt("namespace", "--k8s-namespace", "k8s: the namespace to create the agents' Job in (default: the "
        "kubeconfig context's, else default)", cli_flag="--namespace", metavar="NS"),
    Opt("gpus_per_node", "--k8s-gpus-per-node", "k8s: nvidia.com/gpu each agent's pod asks for (default 0: "
        "a CPU run)", cli_flag="--gpus-per-node", default=0, type=int, metavar="G"),
    Opt("node_selector", "--k8s-node-selector", "k8s: only nodes with this label (repeatable)",
        cli_flag="--node-selector", repeat=True, metavar="KEY=VALUE"),
    Opt("rdma", "--k8s-rdma", "k8s: an RDMA device resource each pod asks for, e.g. rdma/ib=1 (repeatable)",
        cli_flag="--rdma", repeat=True, metavar="RESOURCE=COUNT"),
    Opt("k8s_job", "--k8s-job", "join, inside a cluster: the Indexed Job whose pods are the agents, so that an "
        "agent that never joined is named by its pod and the reason Kubernetes gives", metavar="NAME"),
    Opt("pair_strategy", "--pair-strategy", "scope pair: every node pair in rounds of disjoint pairs, or one "
        "round of random pairs", default="rounds", choices=("rounds", "random")),
    Opt("pair_seed", "--pair-seed", "seed of --pair-strategy random (default 0)", default=0, type=int,
        metavar="N"),
    Opt("drain", "--drain", "drain (scontrol) every node on the exclusion list, with reason 'clustercheck: ...'",
        default=False, flag=True),
    Opt("drain_dry_run", "--drain-dry-run", "print the scontrol commands --drain would run, run nothing",
        default=False, flag=True),
    Opt("taint", "--taint", "Kubernetes: taint every node on the exclusion list clustercheck.io/failed=<check>:"
        "NoSchedule, with a label and an annotation giving the reason and the run (clustercheck resume --k8s "
        "removes them)", default=False, flag=True),
    Opt("taint_dry_run", "--taint-dry-run", "print the kubectl commands --taint would amount to, change nothing",
        default=False, flag=True),
    Opt("drain_max", "--drain-max", "circuit breaker of --drain and --taint: when more than this share of the "
        "run's nodes (and more than one) fail the same check, drain and taint nothing (default 10%%)",
        default="10%", metavar="SHARE"),
    Opt("expect", "--cc-expect", "an expectation over the profile's expect: block, as clustercheck probe takes it, e.g. "
        "fabric_gbps=3200 (the nodes' network line rate the multi-node busbw floor is a fraction of), net=IB, "
        "gdr=true, nics=8 (NCCL's transport between nodes); repeatable; a key no selected check reads is refused "
        "(exit 4)", cli_flag="--expect", metavar="KEY=VALUE", repeat=True),
    Opt("compare", "--compare", "judge each item also against the same item of a saved run (a run directory, "
        "its run.jsonl, or a run name under the output directory): a metric worse by --compare-tolerance "
        "fails the item", metavar="BASELINE"),
    Opt("tolerance", "--compare-tolerance", "how much worse than the baseline a metric may get, e.g. 0.05 or "
        "5%% (default 5%% with --compare; refused without it)", metavar="FRACTION"),
    Opt("nccl_log", "--nccl-log", NCCL_LOG_HELP, default="full", choices=NCCL_LOG_MODES),
    Opt("progress", "--cc-progress", "print a progress line per check (current check, node, done/total or repetition "
        "and item, time left) on stderr: rewritten in place on a terminal, one plain line per item in a log; the "
        "default", cli_flag="--progress", default=None, flag=True),
    Opt("no_progress", "--cc-no-progress", "no progress line", cli_flag="--no-progress", default=False, flag=True),
    Opt("timings", "--cc-timings", "print where the run's seconds went: start-up, collection, each pool's start "
        "(and each rank's torch import, store, process group, device), each check, the reports (also "
        "CLUSTERCHECK_PROFILE=1)", cli_flag="--timings", default=False, flag=True),
    Opt("counters", "--cc-counters", "snapshot each node's hardware counters (PCIe AER, InfiniBand ports, GPU "
        "ECC, row remap and NVLink errors through NVML) and kernel log (Xid, AER, MCE lines) around every check: "
        "an increase beyond its allowance fails that item, naming counter, device and delta; a counter that "
        "cannot be read is an error", cli_flag="--counters", default=False, flag=True),
    Opt("topology", "--topology", "scope localize: the cluster's switch tree, a Slurm topology.conf, a .json "
        "mapping ({switch: {nodes: HOSTLIST, switches: [...]}}) or the word 'slurm' (what `scontrol show "
        "topology` says); the screening rings follow its leaf switches and a slow switch uplink can be named; "
        "nodes of the run missing from it are an error (default: none)", metavar="FILE|slurm",
        type=given("--topology")),
    Opt("repeat", "--repeat", "burn-in: run the suite N times in one session (pools kept); each result "
        "carries its repetition, and each item is summarised: pass ratio, min/median/max, trend", type=int,
        metavar="N"),
    Opt("duration", "--duration", "burn-in: repeat the suite until this much time has passed (4h, 30m, 90s, "
        "1h30m); a repetition is never cut short: the last one starts before the time is up", metavar="TIME"),
    Opt("sign", "--cc-sign", "sign the run's evidence with this Ed25519 private key (PEM from `openssl genpkey "
        "-algorithm ed25519`, or OpenSSH): attestation.json in the run directory, checked by `clustercheck verify`; "
        "the key is read (and a bad or group/world-readable one refused) before anything is measured; an "
        "encrypted key's passphrase comes from $CLUSTERCHECK_KEY_PASSPHRASE", cli_flag="--sign", type=path("--sign"),
        metavar="KEY"),
    Opt("faults", "--cc-inject-fault", "for testing clustercheck itself: make a rank hang, crash, raise or "
        "corrupt its result in CHECK (or `facts`: the opening pool that reads the nodes' facts; KIND: hang, crash, "
        "raise, corrupt; default rank: the last; #REP: only in "
        "that repetition), or make every rank wait 2 s before measuring (delay)", repeat=True,
        metavar="CHECK:KIND[@RANK][#REP]", cli=False),
)


@dataclass(frozen=True)
class Options:
    """A run's options, resolved: what the session works from."""

    platform: str | None
    thresholds: SearchPath  # the user's profile directories, then the shipped ones, then derived profiles
    ranks: int | None
    backend: str  # auto, gloo or nccl
    out: Path
    faults: dict[str, tuple[str, int | None, int | None]] = field(default_factory=dict)  # id -> (kind, rank, rep)
    compare: str | None = None  # a saved run to judge regressions against, item by item
    launcher: str = "local"
    store_addr: str | None = None
    hosts: str | None = None
    host_command: str = "ssh {host} {python}"
    pair_strategy: str = "rounds"
    pair_seed: int = 0
    drain: bool = False
    drain_dry_run: bool = False
    tolerance: float = 0.05
    nccl_log: str = "full"  # full (init log + tuning pool), init, off
    progress: bool | None = None
    no_progress: bool = False
    repeat: int | None = None
    duration: float | None = None  # seconds
    counters: bool = False
    timings: bool = False
    force: bool = False  # --force: local ranks beyond what the machine holds
    topology: str | None = None  # scope localize: topology.conf, .json or 'slurm' (checked when options resolve)
    sign: SigningKey | None = None  # --sign: read before anything runs, used when the run ends
    nodes: int | None = None  # join, k8s: the node agents to wait for
    join_timeout: float | None = None  # None: the launcher's own (JoinLauncher.join_wait)
    image: str | None = None  # k8s
    namespace: str | None = None
    gpus_per_node: int = 0
    node_selector: tuple[tuple[str, str], ...] = ()
    rdma: tuple[tuple[str, str], ...] = ()
    k8s_job: str | None = None
    taint: bool = False
    taint_dry_run: bool = False
    drain_max: float = 0.10  # the breaker's share (--drain-max)
    expect: dict[str, Any] = field(default_factory=dict)  # --expect, checked: over the profile's expect: block

    @property
    def repeating(self) -> bool:
        return bool(self.repeat and self.repeat > 1 or self.duration)


def resolve(get: Callable[[str], Any]) -> Options:
    """Options from the declared values (`get(name)`), checked; UserError on a bad value."""
    from clustercheck.record.tolerance import parse_fraction, parse_tolerance

    values = {o.name: get(o.name) for o in RUN_OPTIONS}
    ranks = values["ranks"]
    if ranks is not None and not 1 <= ranks <= 1024:
        raise UserError(f"--ranks must be between 1 and 1024, got {ranks}")
    if ranks is not None and values["launcher"] == "local" and not values["force"]:
        _fits_here(ranks)
    # Given at all without --compare, it would judge nothing: refused whatever its value (None tells "not
    # given" from "given as 5%", which a compare against the default text could not).
    if values["compare"] is None and values["tolerance"] is not None:
        raise UserError("--compare-tolerance is how much worse than the --compare BASELINE a metric may get, and no "
                        "--compare is given")
    try:
        values["tolerance"] = parse_tolerance(values["tolerance"] or DEFAULT_TOLERANCE)
    except argparse.ArgumentTypeError as exc:
        raise UserError(f"--compare-tolerance: {exc}") from None
    values["faults"] = dict(_fault(text) for text in values["faults"])
    if values["repeat"] is not None and not 1 <= values["repeat"] <= 1_000_000:
        raise UserError(f"--repeat must be between 1 and 1000000, got {values['repeat']}")
    if values["duration"] is not None:
        values["duration"] = parse_duration(values["duration"])
        if values["repeat"] is not None:
            raise UserError("--repeat and --duration: give one (a count of repetitions, or a time to fill)")
    if values["store_addr"] is not None:
        if not values["store_addr"].strip() or any(c.isspace() for c in values["store_addr"]):
            raise UserError(f"--store-addr takes one address or host name, got {values['store_addr']!r}")
        if values["launcher"] == "local":
            raise UserError("--store-addr is for the multi-node launchers (slurm, hosts, join, k8s): local ranks "
                            "reach the store on 127.0.0.1")
    refuse_unread(values["launcher"], {o.name: o.run_flag for o in RUN_OPTIONS
                                       if values[o.name] not in (None, False, [], ()) and values[o.name] != o.default})
    from clustercheck.run.k8s.labels import agent_options

    values.update(agent_options(values))  # --nodes, --join-timeout, --gpus-per-node, --node-selector, --rdma
    try:
        values["drain_max"] = parse_fraction(values["drain_max"])
    except argparse.ArgumentTypeError as exc:
        raise UserError(f"--drain-max: {exc}".replace("tolerance", "share")) from None
    if values["drain_max"] > 1:
        raise UserError(f"--drain-max is a share of the run's nodes, at most 100%, got {values['drain_max']:g}")
    for act in ("drain", "taint"):  # which was meant? acting for real on a dry run's word is the worse guess
        if values[act] and values[f"{act}_dry_run"]:
            raise UserError(f"--{act} and --{act}-dry-run together: give --{act} to act on the excluded nodes, or "
                            f"--{act}-dry-run to print what it would do")
    if values["drain"]:  # found before measuring, not after a 4-hour burn-in
        require_tool("scontrol", "--drain", "--drain-dry-run prints the commands it would run")
    if values["taint"]:  # credentials and RBAC, likewise before measuring
        from clustercheck.run.k8s.taint import precheck

        precheck()
    values["thresholds"] = search_path(values["thresholds"] or ())
    from clustercheck.judging.expect import parse_expect_args

    values["expect"] = parse_expect_args(list(values["expect"] or ()))  # a bad one stops the run before it starts
    if values["sign"] is not None:  # a typo in the key path must not cost a 4-hour burn-in its signature
        values["sign"] = load_private(Path(values["sign"]), "--sign")
    if values["topology"] is not None:
        from clustercheck.localize.topology import read_topology

        read_topology(values["topology"])  # a mistake in it is the user's: file, line and key, before any run
    return Options(**values)


def _default(name: str) -> Any:
    return next(o.default for o in RUN_OPTIONS if o.name == name)


RANKS_PER_CORE = 4  # local ranks a core carries before every timing is the scheduler's, not the hardware's
RANK_BYTES = 512 << 20  # what one rank process (python, torch, gloo) holds before its buffers


def _fits_here(ranks: int) -> None:
    """Refuse more local ranks than this machine holds: 1,024 processes on 2 cores measure the scheduler."""
    from clustercheck.judging.platform import host_available
    from clustercheck.units import format_bytes

    cores = os.cpu_count() or 1
    memory = host_available()
    most = min(RANKS_PER_CORE * cores, memory // RANK_BYTES if memory else RANKS_PER_CORE * cores)
    if ranks > max(1, most):
        held = f"{cores} core(s)" + (f" and {format_bytes(memory)} of memory available" if memory else "")
        raise UserError(f"--ranks {ranks}: this machine has {held}, room for at most {max(1, most)} local rank(s) "
                        f"({RANKS_PER_CORE} per core, {format_bytes(RANK_BYTES)} each); --force runs them anyway")


def require_tool(tool: str, option: str, instead: str = "") -> None:
    """Refuse an option whose external command is not on the PATH, before anything is measured."""
    import shutil

    if shutil.which(tool) is None:
        raise UserError(f"{option} runs {tool}, which is not on the PATH here (no Slurm on this machine?)"
                        + (f"; {instead}" if instead else ""))


def _fault(text: str) -> tuple[str, tuple[str, int | None, int | None]]:
    check, _, spec = text.rpartition(":")
    spec, _, rep = spec.partition("#")
    kind, _, rank = spec.partition("@")
    if not check or kind not in FAULTS or rank and not rank.isdigit() or rep and not rep.isdigit():
        raise UserError(f"--cc-inject-fault {text!r}: expected CHECK:KIND[@RANK][#REP], KIND one of {', '.join(FAULTS)}")
    return check, (kind, int(rank) if rank else None, int(rep) if rep else None)


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str) -> float:
    """'4h', '30m', '90s', '1h30m', '2.5h' or plain seconds -> seconds; UserError naming the option."""
    import re

    t = text.strip().lower()
    parts = re.fullmatch(r"((\d+(\.\d+)?)\s*[smhd]\s*)+", t) and re.findall(r"(\d+(?:\.\d+)?)\s*([smhd])", t)
    if parts:
        seconds = sum(float(n) * _UNITS[u] for n, u in parts)
    else:
        try:
            seconds = float(t)
        except ValueError:
            seconds = -1.0
    if not 0 < seconds <= 30 * 86400 or seconds != seconds:
        raise UserError(f"--duration {text!r}: expected a time such as 4h, 30m, 90s or 1h30m (at most 30 days)")
    return seconds


def add_to(group: Any, cli: bool) -> None:
    """Declare the options on an argparse parser (`clustercheck run`) or a pytest option group."""
    for o in RUN_OPTIONS:
        if cli and o.cli:
            group.add_argument(o.run_flag, dest=o.name, **o.kwargs())
        elif not cli:
            group.addoption(o.pytest_flag, dest=o.name, **o.kwargs())


def pytest_args(args: argparse.Namespace) -> list[str]:
    """`clustercheck run`'s option values as pytest arguments (only those given or not at their default)."""
    out: list[str] = []
    for o in RUN_OPTIONS:
        if not o.cli:
            continue
        value = getattr(args, o.name)
        if o.flag:
            out += [o.pytest_flag] if value else []
        elif o.repeat:  # flag=value: a value that starts with '-' is a value, never pytest's next option
            out += [f"{o.pytest_flag}={v}" for v in value or ()]
        elif value is not None and value != o.default:
            out += [f"{o.pytest_flag}={value}"]
    return out
