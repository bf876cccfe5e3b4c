"""What a record's header says about its run against what else the evidence holds (`clustercheck verify`):
the signer writes the header, so a field that no re-judging reads must at least agree with those that
record the same thing another way. Each disagreement is one line naming the header's line.

- `platform` is the kept threshold profile's (the profile loader requires `platform:` to be its file name,
  and the run records the profile it judged by): a cpu.yaml-judged run cannot claim h100.
- `nodes` and `absent` hold every host a rank of the run's pools ran on (each result's `pool`), each
  pool `ranks_per_node` ranks on each of its hosts, and `ranks` is `ranks_per_node` for each node: a node
  deleted from the header leaves its ranks behind.
- The run's own command line (`argv`, read with the run options' own table, run/options.py) agrees with
  the header where it says: `--repeat N` with `repeat.count`, `--duration` with `repeat.duration_s`,
  `--nodes N` with the nodes and those that never joined, `--hosts LIST` with their names. What addopts or
  PYTEST_ADDOPTS gave is not on the command line and is not compared."""

from __future__ import annotations

import argparse
import math
from collections import Counter
from typing import Any, Mapping, NoReturn, Sequence

from clustercheck.errors import ClusterCheckError, UserError
from clustercheck.record.io import Record


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # a value the run's own parser refuses: no command line it ran
        raise ValueError(message)


class _PytestOptions:
    """The run options as the pytest plugin declares them (`pytest s.yaml --repeat=2 ...`), on argparse."""

    def __init__(self, parser: argparse.ArgumentParser) -> None:
        self.parser = parser

    def addoption(self, *names: str, **kwargs: Any) -> None:
        self.parser.add_argument(*names, **kwargs)


def command_line(argv: Sequence[Any]) -> argparse.Namespace:
    """The run options of a recorded argv: `clustercheck run ...` read as `clustercheck run` declares them
    (cli.py: RUN_OPTIONS and -p, -k, -m), any other (`pytest s.yaml ...`) as the pytest plugin does; the
    rest (pytest's own options, suites) left over. ValueError: a value the run's parser refuses."""
    from clustercheck.run.options import add_to

    args = [str(a) for a in argv]
    parser = _Parser(add_help=False, allow_abbrev=False)
    if len(args) > 1 and args[1] == "run":
        add_to(parser, cli=True)
        for flag in ("-p", "-k", "-m"):  # value-taking options of `clustercheck run`'s own (cli.py)
            parser.add_argument(flag, dest=f"_{flag[1]}", action="append")
        args = args[2:]
    else:
        add_to(_PytestOptions(parser), cli=False)
        args = args[1:]
    try:
        return parser.parse_known_args(args)[0]
    except ClusterCheckError as exc:  # an option's own type refused it (--cc-inject-fault's)
        raise ValueError(str(exc).splitlines()[0]) from None


def header_problems(rec: Record, profile: Any) -> list[str]:
    """The header against the kept profile (`profile`: the one loaded, None when it could not be: said
    already), the ranks' pools and the run's command line."""
    header = rec.header
    at = f"{rec.path.name}:{rec.lines.run or 1}"
    out: list[str] = []
    if profile is not None and header.get("platform") != profile.name:
        ref: Mapping[str, Any] = header.get("thresholds") or {}
        out.append(f"{at}: platform {header.get('platform')!r}, but the threshold profile it was judged by "
                   f"({ref.get('file')}) is platform {profile.name!r}: a run records the platform of its profile")
    nodes = [str(n) for n in header.get("nodes") or ()]
    absent = [str(n) for n in header.get("absent") or ()]
    out += _pools(at, rec, nodes, absent)
    out += _argv(at, header, nodes, absent)
    return out


def _pools(at: str, rec: Record, nodes: list[str], absent: list[str]) -> list[str]:
    header = rec.header
    per_node = header.get("ranks_per_node")
    out: list[str] = []
    if isinstance(per_node, int) and isinstance(header.get("ranks"), int) and header["ranks"] != per_node * len(nodes):
        out.append(f"{at}: ranks {header['ranks']}, but {len(nodes)} node(s) of {per_node} rank(s) make "
                   f"{per_node * len(nodes)}: a run starts ranks_per_node ranks on each of its nodes")
    strangers: dict[str, int] = {}
    uneven: dict[int, Mapping[str, int]] = {}
    for number, r in zip(rec.lines.results, rec.results):
        pool = r.get("pool")
        ranks = pool.get("ranks") if isinstance(pool, Mapping) else None
        if not isinstance(ranks, list):
            continue
        on = Counter(str(rank.get("host")) for rank in ranks if isinstance(rank, Mapping))
        for host in on:
            if host not in nodes and host not in absent:
                strangers.setdefault(host, number)
        if isinstance(per_node, int) and any(count != per_node for count in on.values()):
            uneven.setdefault(number, on)
    for host, number in strangers.items():
        out.append(f"{at}: nodes {', '.join(nodes) or 'none'}" + (f" (never joined: {', '.join(absent)})" if absent
                                                                  else "") +
                   f", but the ranks' pool of line {number} ran on {host}: a node the header leaves out")
    for number, hosts in list(uneven.items())[:1]:  # one story: the header's ranks_per_node, not each pool's
        out.append(f"{at}: ranks_per_node {per_node}, but the ranks' pool of line {number} has "
                   f"{', '.join(f'{n} on {host}' for host, n in hosts.items())}")
    return out


def _argv(at: str, header: Mapping[str, Any], nodes: list[str], absent: list[str]) -> list[str]:
    """The header against what its own command line says (where it says it)."""
    from clustercheck.run.options import parse_duration

    try:
        opts = command_line(header.get("argv") or ())
    except ValueError as exc:
        return [f"{at}: its argv cannot be the command line of a run ({str(exc)[:120]})"]
    out: list[str] = []
    repeat = header.get("repeat")
    said = f"repeat {_show(repeat)}" if repeat else "no repeat"
    if opts.repeat is not None and repeat != ({"count": opts.repeat} if opts.repeat > 1 else None):
        out.append(f"{at}: {said}, but its argv says --repeat {opts.repeat}: a run records the repetitions it "
                   f"was asked for")
    if opts.duration is not None:
        try:
            want: float | None = parse_duration(opts.duration)
        except UserError:
            want = None
        got = repeat.get("duration_s") if isinstance(repeat, Mapping) else None
        if want is None or not isinstance(got, (int, float)) or not math.isclose(got, want):
            out.append(f"{at}: {said}, but its argv says --duration {opts.duration}: a run records the time it "
                       f"was asked to fill")
    everyone = [*nodes, *absent]
    if opts.nodes is not None and opts.nodes != len(everyone):
        out.append(f"{at}: {len(nodes)} node(s) ({', '.join(nodes) or 'none'}) and {len(absent)} that never "
                   f"joined, but its argv says --nodes {opts.nodes}: a run waits for that many and records each")
    if opts.hosts is not None:
        import hostlist

        try:
            hosts = list(hostlist.expand_hostlist(opts.hosts))
        except hostlist.BadHostlist:
            hosts = []
        if sorted(hosts) != sorted(everyone):
            out.append(f"{at}: nodes {', '.join(everyone) or 'none'} (never joined included), but its argv says "
                       f"--hosts {opts.hosts} ({len(hosts)} host(s)): a run records each host it was given")
    return out


def _show(value: Any) -> str:
    return ", ".join(f"{k} {v}" for k, v in value.items()) if isinstance(value, Mapping) else repr(value)
