"""Every run option, declared once: the pytest plugin and `clustercheck run` both build their options
from `RUN_OPTIONS`, and `clustercheck run` hands its values on to pytest through the same table."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from clustercheck.comm import NCCL_LOG_HELP, NCCL_LOG_MODES
from clustercheck.errors import UserError
from clustercheck.profiles import SearchPath, search_path

FAULTS = ("hang", "crash", "raise", "corrupt", "delay")


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
        ".yaml); default: detected from the hardware"),
    Opt("thresholds", "--thresholds", "a directory of your own threshold profiles, searched before the shipped "
        "ones (repeatable; also $CLUSTERCHECK_THRESHOLDS, ':'-separated); a profile of the same name hides ours",
        type=Path, metavar="DIR", repeat=True),
    Opt("ranks", "--ranks", "rank processes per node (default: one per GPU; 2 without GPUs)", type=int,
        metavar="N"),
    Opt("backend", "--backend", "torch.distributed backend (default: nccl with GPUs, gloo without)",
        default="auto", choices=("auto", "gloo", "nccl")),
    Opt("out", "--cc-out", "where each run writes its record and reports, in DIR/<time>-<platform>/ and "
        "DIR/latest (default: clustercheck-out)", cli_flag="--out", default=Path("clustercheck-out"), type=Path,
        metavar="DIR"),
    Opt("launcher", "--launcher", "how ranks start: local (this machine), slurm (srun on every node of the "
        "allocation, inside salloc or sbatch), hosts (--hosts started with --host-command)", default="local",
        choices=("local", "slurm", "hosts")),
    Opt("hosts", "--hosts", "nodes for --launcher hosts, in Slurm hostlist syntax (node[01-04],gpu7)",
        metavar="HOSTLIST"),
    Opt("host_command", "--host-command", "how --launcher hosts runs Python on a host; split like a shell "
        "would, never run by one; {host} and {python} are filled in (default: 'ssh {host} {python}')",
        default="ssh {host} {python}", metavar="TEMPLATE"),
    Opt("pair_strategy", "--pair-strategy", "scope pair: every node pair in rounds of disjoint pairs, or one "
        "round of random pairs", default="rounds", choices=("rounds", "random")),
    Opt("pair_seed", "--pair-seed", "seed of --pair-strategy random (default 0)", default=0, type=int,
        metavar="N"),
    Opt("drain", "--drain", "drain (scontrol) every node on the exclusion list, with reason 'clustercheck: ...'",
        default=False, flag=True),
    Opt("drain_dry_run", "--drain-dry-run", "print the scontrol commands --drain would run, run nothing",
        default=False, flag=True),
    Opt("compare", "--compare", "judge each item also against the same item of a saved run (a run directory, "
        "its run.jsonl, or a run name under the output directory): a metric worse by --compare-tolerance "
        "fails the item", metavar="BASELINE"),
    Opt("tolerance", "--compare-tolerance", "how much worse than the baseline a metric may get, e.g. 0.05 or "
        "5%% (default 5%%)", default="5%", metavar="FRACTION"),
    Opt("nccl_log", "--nccl-log", NCCL_LOG_HELP, default="full", choices=NCCL_LOG_MODES),
    Opt("progress", "--cc-progress", "print a progress line per check (current check, node, done/total, time "
        "left) on stderr; default: on when stderr is a terminal", cli_flag="--progress", default=None, flag=True),
    Opt("faults", "--cc-inject-fault", "for testing clustercheck itself: make a rank hang, crash, raise or "
        "corrupt its result in CHECK (KIND: hang, crash, raise, corrupt; default rank: the last), or make every "
        "rank wait 2 s before measuring (delay)", repeat=True, metavar="CHECK:KIND[@RANK]", cli=False),
)


@dataclass(frozen=True)
class Options:
    """A run's options, resolved: what the session works from."""

    platform: str | None
    thresholds: SearchPath  # the user's profile directories, then the shipped ones, then derived profiles
    ranks: int | None
    backend: str  # auto, gloo or nccl
    out: Path
    faults: dict[str, tuple[str, int | None]] = field(default_factory=dict)  # check id -> (kind, rank)
    compare: str | None = None  # a saved run to judge regressions against, item by item
    launcher: str = "local"
    hosts: str | None = None
    host_command: str = "ssh {host} {python}"
    pair_strategy: str = "rounds"
    pair_seed: int = 0
    drain: bool = False
    drain_dry_run: bool = False
    tolerance: float = 0.05
    nccl_log: str = "full"  # full (init log + tuning pool), init, off
    progress: bool | None = None


def resolve(get: Callable[[str], Any]) -> Options:
    """Options from the declared values (`get(name)`), checked; UserError on a bad value."""
    from clustercheck.compare import parse_tolerance

    values = {o.name: get(o.name) for o in RUN_OPTIONS}
    ranks = values["ranks"]
    if ranks is not None and not 1 <= ranks <= 1024:
        raise UserError(f"--ranks must be between 1 and 1024, got {ranks}")
    try:
        values["tolerance"] = parse_tolerance(values["tolerance"])
    except argparse.ArgumentTypeError as exc:
        raise UserError(f"--compare-tolerance: {exc}") from None
    values["faults"] = dict(_fault(text) for text in values["faults"])
    values["thresholds"] = search_path(values["thresholds"] or ())
    return Options(**values)


def _fault(text: str) -> tuple[str, tuple[str, int | None]]:
    check, _, spec = text.rpartition(":")
    kind, _, rank = spec.partition("@")
    if not check or kind not in FAULTS or rank and not rank.isdigit():
        raise UserError(f"--cc-inject-fault {text!r}: expected CHECK:KIND[@RANK], KIND one of {', '.join(FAULTS)}")
    return check, (kind, int(rank) if rank else None)


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
        elif o.repeat:
            out += [a for v in value or () for a in (o.pytest_flag, str(v))]
        elif value is not None and value != o.default:
            out += [o.pytest_flag, str(value)]
    return out
