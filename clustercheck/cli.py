"""The `clustercheck` command: run | report | compare | probe | platforms | resume | sign | verify. `run` is
pytest with the suites chosen for you."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import NoReturn

from clustercheck import __version__
from clustercheck.argtypes import given, hostlist_of, refuse_empty_paths
from clustercheck.errors import HarnessError, UserError, escape
from clustercheck.exitcodes import Exit, for_verdict, table, worst
from clustercheck.paths import display
from clustercheck.run import command
from clustercheck.run.command import DEFAULT_CPU_SUITE, DEFAULT_GPU_SUITE
from clustercheck.run.timings import TIMINGS


EPILOG = """\
examples:
  clustercheck run                         the default suite for this machine (cpu-smoke without GPUs)
  clustercheck run quick-gate-nvlink8 -x   a shipped suite by name; stop at the first failure
  clustercheck run my-suite.yaml --platform h100-sxm-8x -k allreduce
  clustercheck report clustercheck-out/latest   re-render the reports of a saved run
  clustercheck compare 20260101-120000-cpu  regressions of clustercheck-out/latest against a saved run
  clustercheck platforms show cpu          every threshold of a profile, resolved, with its source
  clustercheck run burn-in --sign key.pem  sign the run's evidence (attestation.json) when it ends
  clustercheck verify RUN --key key.pub    check a delivered run: signature, digests, metrics and verdicts

{exit_codes}
"""


EXIT_CODES = """exit codes (every subcommand, and pytest runs of suites):
{table}"""


class _KeepsTables(argparse.HelpFormatter):
    """Wraps a one-paragraph description, as argparse does, and keeps a text of several lines (the exit-code
    table) as written."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        return "".join(indent + line for line in text.splitlines(keepends=True)) if "\n" in text else \
            super()._fill_text(text, width, indent)


class _Parser(argparse.ArgumentParser):
    """argparse exits 2 on a usage error, the code of INCOMPLETE here: usage errors exit 4, as pytest's do,
    in one line (the usage is one --help away)."""

    def error(self, message: str) -> NoReturn:
        self.exit(int(Exit.BAD_INPUT), f"{self.prog}: error: {escape(message)} (see {self.prog} --help)\n")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="clustercheck", description="Acceptance tests for GPU clusters, run by pytest.",
                epilog=EPILOG.format(exit_codes=EXIT_CODES.format(table=table())), formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=f"clustercheck {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    # no abbreviations of run's own options: pytest's `--co` would read as an ambiguous "--compare/--counters"
    # (a misspelling is still named, with the option meant: command.misspelled)
    run = sub.add_parser("run", help="run suites and write JUnit, HTML and JSON", allow_abbrev=False,
                         description="Run suites (names from suites/ or paths). Arguments not listed here "
                                     "(-x, -v, --junitxml=PATH, a plugin's options, ...) go to pytest unchanged; "
                                     "give their values with '=' (--junitxml=out.xml).")
    run.add_argument("suites", nargs="*", metavar="SUITE",
                     help=f"suite name or YAML file (default: {DEFAULT_CPU_SUITE} without GPUs, gpu-smoke on 1 to 7 "
                          f"NVIDIA GPUs, {DEFAULT_GPU_SUITE} on 8 or more, quick-gate-mi300x on AMD GPUs)")
    from clustercheck.run.options import add_to

    add_to(run, cli=True)
    # pytest's options that take a value, declared so that their value is never read as a SUITE
    run.add_argument("-p", dest="plugins", action="append", default=[], metavar="NAME",
                     help="load a pytest plugin, e.g. clustercheck_prometheus (plugins/); repeatable")
    run.add_argument("-k", dest="keyword", metavar="EXPR", help="only items whose name matches EXPR (pytest -k)")
    run.add_argument("-m", dest="markexpr", metavar="EXPR", help="only items matching the mark expression (pytest -m)")
    rep = sub.add_parser("report", help="re-render the reports of a saved run without measuring")
    rep.add_argument("run", type=Path, metavar="RUN", help="a run directory, its run.jsonl, or a run name under --out")
    rep.add_argument("--out", type=Path, metavar="DIR", default=Path("clustercheck-out"),
                     help="the history directory that holds saved runs (default: clustercheck-out)")
    cmp = sub.add_parser("compare", help="list per-metric regressions of a run against a baseline run",
                         description="Compare two saved runs item by item (matched by check id and node/GPU/pair) "
                                     "and metric (those with a limit; its operator says whether higher or lower "
                                     "is better). Exit 1 when any metric got worse by the tolerance or more.")
    cmp.add_argument("baseline", metavar="BASELINE", type=given("BASELINE"),
                     help="a run directory, its run.jsonl, or a run name under --out")
    cmp.add_argument("current", nargs="?", metavar="RUN", type=given("RUN"),
                     help="the run to judge (default: OUT/latest)")
    cmp.add_argument("--tolerance", type=_tolerance, default=0.05, metavar="T",
                     help="relative change that counts, as a fraction or percentage (default: 0.05 = 5%%)")
    cmp.add_argument("--out", type=Path, metavar="DIR", default=Path("clustercheck-out"),
                     help="the history directory that holds saved runs (default: clustercheck-out)")
    cmp.add_argument("--all", action="store_true", help="also list metrics that did not change beyond the tolerance")
    res = sub.add_parser("resume", help="resume Slurm nodes that clustercheck drained, or untaint Kubernetes nodes "
                                        "it tainted (never others)",
                         description="Resume drained nodes whose reason starts with 'clustercheck:' (with --k8s: "
                                     "remove the clustercheck.io/failed taints, labels and annotations clustercheck "
                                     "set). Nodes drained or tainted by anything else are listed and left alone.")
    res.add_argument("nodes", nargs="?", metavar="HOSTLIST", type=hostlist_of("HOSTLIST"),
                     help="only these nodes (default: all)")
    res.add_argument("--dry-run", action="store_true", help="print the scontrol (kubectl) commands, run none")
    res.add_argument("--k8s", action="store_true", help="Kubernetes nodes tainted by --taint, not Slurm nodes")
    plat = sub.add_parser("platforms", help="list threshold profiles; 'show NAME' prints one resolved")
    plat.add_argument("action", nargs="?", choices=("list", "show"), default="list")
    plat.add_argument("name", nargs="?")
    plat.add_argument("--thresholds", type=Path, metavar="DIR", action="append", default=[],
                      help="a directory of your own profiles, searched first (repeatable; also $CLUSTERCHECK_THRESHOLDS)")
    from clustercheck.probes.cli import add_parser as add_probe_parser
    from clustercheck.evidence.commands import add_parsers as add_evidence_parsers

    add_probe_parser(sub)
    add_evidence_parsers(sub)
    from clustercheck.run.k8s.cli import add_parser as add_k8s_parser
    from clustercheck.run.agent import add_parser as add_agent_parser

    add_k8s_parser(sub)
    add_agent_parser(sub)
    for each in sub.choices.values():  # `clustercheck run --help` states the table too, not only the top --help
        if "exit codes" not in (each.epilog or ""):
            each.epilog = "\n\n".join(filter(None, [each.epilog, EXIT_CODES.format(table=table())]))
            if each.formatter_class is argparse.HelpFormatter:
                each.formatter_class = _KeepsTables
    refuse_empty_paths(p)  # `Path('')` is `.`: an empty path never means the working directory
    return p


def _negative_values(parser: argparse.ArgumentParser, argv: list[str]) -> list[str]:
    """`--duration -5s` as `--duration=-5s`: argparse reads a value that starts with '-' (and is not a bare
    negative number) as an option, and said 'expected one argument' where the value itself is what is wrong."""
    takes_value: set[str] = set()
    parsers = [parser]
    while parsers:
        for action in parsers.pop()._actions:
            if isinstance(action, argparse._SubParsersAction):
                parsers += list(action.choices.values())
            elif action.nargs is None and action.option_strings:
                takes_value.update(o for o in action.option_strings if o.startswith("--"))
    out: list[str] = []
    for arg in argv:
        if out and out[-1] in takes_value and len(arg) > 1 and arg[0] == "-" and (arg[1].isdigit() or arg[1] == "."):
            out[-1] = f"{out[-1]}={arg}"
        else:
            out.append(arg)
    return out


def main(argv: list[str] | None = None) -> int:
    TIMINGS.mark("interpreter and clustercheck's imports")
    argv = sys.argv[1:] if argv is None else argv
    parser = _parser()
    args, rest = parser.parse_known_args(_negative_values(parser, argv))
    internal: int = Exit.ERROR  # the code of a bug of clustercheck's (below)
    try:
        if args.command == "run":
            return _run(args, rest, argv)
        if rest:
            _parser().error(f"unrecognized arguments: {' '.join(rest)}")
        if args.command == "report":
            return _report(args.run, args.out)
        if args.command == "platforms":
            return _platforms(args)
        if args.command == "resume":
            return _resume(args)
        if args.command == "probe":
            from clustercheck.probes.cli import main as probe_main

            return probe_main(args)
        if args.command == "compare":
            return _compare(args)
        if args.command in ("sign", "verify"):
            from clustercheck.evidence import commands

            return commands.sign_main(args) if args.command == "sign" else commands.verify_main(args)
        if args.command == "k8s":
            from clustercheck.run.k8s.cli import main as k8s_main

            return k8s_main(args)
        if args.command == "agent":
            from clustercheck.run.agent import BUG
            from clustercheck.run.agent import main as agent_main

            internal = BUG  # an agent's 3 says its controller is gone: its launcher must tell its crash apart
            return agent_main(args)
        _parser().print_help()
        return Exit.BAD_INPUT
    except UserError as exc:
        print(f"clustercheck: error: {exc}", file=sys.stderr)
        return Exit.BAD_INPUT
    except HarnessError as exc:  # a tool clustercheck drives (scontrol) failed: not the user's input
        print(f"clustercheck: error: {exc}", file=sys.stderr)
        return Exit.ERROR
    except Exception as exc:  # a bug of clustercheck's: a harness error (exit 3), never 1, which means the hardware
        import traceback

        traceback.print_exc()
        print(f"clustercheck: internal error: {type(exc).__name__}: {exc} (a bug in clustercheck {__version__}; the "
              f"traceback above belongs in its report)", file=sys.stderr)
        return internal


def entry() -> NoReturn:
    """The `clustercheck` command (and `python -m clustercheck`): main(), then os._exit with its code. Tearing
    the interpreter down with torch and a c10d store loaded took 1.3 s (2 vCPUs), after the last report was
    written; and under `python -m` the interpreter's exit ended by SIGINT (130, not 2) once a Ctrl-C had left
    an exec() of source text (dataclasses and jinja2 build code so at import), though caught and said. By
    then every file is closed, every rank has exited, clustercheck registers no atexit handler and starts
    daemon threads only: only the standard streams need flushing. A reader that leaves (`clustercheck run |
    head -1`) changes no exit code (clustercheck/streams.py)."""
    from clustercheck.run.signals import the_run_from_its_first_line
    from clustercheck.streams import guard

    guard()
    try:
        with the_run_from_its_first_line(sys.argv[1:2] == ["run"]):  # argparse's parser takes 0.2 s
            code = main()
    except SystemExit as exc:  # argparse's (--help, a usage error), which said what it had to, or a signal's
        code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe (`clustercheck run | head`): nothing left to say
            pass
    os._exit(int(code))


def _run(args: argparse.Namespace, rest: list[str], argv: list[str]) -> int:
    """`clustercheck run`: until pytest's session installs its own handler, SIGTERM stops it as Ctrl-C does,
    and either says in one line that nothing was measured (there is no record yet to say it in); from the
    option pre-check on, which may import a -p plugin and read pytest's parser."""
    from clustercheck.run.signals import not_started, stopped_by, term_stops_like_ctrl_c

    try:
        with term_stops_like_ctrl_c("while the run was starting"):
            command.misspelled(rest, args.plugins)
            command.swallowed_values(argv, args.suites, rest)
            return command.run(args, rest)
    except KeyboardInterrupt as exc:
        print(not_started(stopped_by(exc)), file=sys.stderr)
        return Exit.INCOMPLETE


def _report(run: Path, out: Path) -> int:
    """Re-render a saved run; exit with its verdict's code, as the run itself did."""
    from clustercheck.report import read, render_record
    from clustercheck.report.status import run_status
    from clustercheck.report.terminal import verdict_lines

    from clustercheck.record.compare import available, resolve_run

    record = resolve_run(run, out)
    if not record.is_file():
        raise UserError(f"no run record at {record}{available(out)}")
    rec = read(record)
    from clustercheck.record.attestation import signer

    # a signed run re-renders byte for byte, naming its signer as before, so its attestation still holds
    signed_by = signer(record.parent)
    before = {p: p.read_bytes() for p in record.parent.iterdir() if p.is_file()} if signed_by else {}
    for kind, path in render_record(rec, record.parent, signer=signed_by).items():
        print(f"{kind:<6} {path.resolve()}")
        if signed_by and before.get(path) != path.read_bytes():
            print(f"{display(path)} changed: attestation.json no longer matches it (clustercheck sign RUN --key KEY "
                  f"signs the run again)", file=sys.stderr)
    status = run_status(rec)
    for line in verdict_lines(rec, status):  # the reports say so too; the exit code must, for whatever reads it
        print(line, file=sys.stderr)
    return for_verdict(status["verdict"])


def _tolerance(text: str) -> float:
    from clustercheck.record.tolerance import parse_tolerance

    return parse_tolerance(text)


def _compare(args: argparse.Namespace) -> int:
    """Exit as the table says for compare: 2 when either run is INCOMPLETE (a partial run proves nothing),
    1 when a metric regressed, a verdict became failed or #wrong rose, or any item of this run fails (in
    the baseline too, or not in it: compare never passes what `report` fails), 3 when an item errored now
    (whatever the baseline said) or one that passed in the baseline was skipped now or is not in the run
    (what passed is not known to pass still), a metric or GPU's verdict the baseline judged is missing now or
    of another unit family or limit direction, a metric got worse within the run's own spread, too wide to tell (not judged), or
    the baseline is no like-for-like reference (its verdict FAIL or ERROR, another platform, an item that
    failed or errored in it), 5 when nothing could be compared."""
    import dataclasses

    from clustercheck.record.compare import Run, compare, load_run
    from clustercheck.record.compare_report import report_lines
    from clustercheck.report.status import run_status

    def with_verdict(run: Run) -> Run:  # as `report` states it: a FAIL baseline is said, a FAIL run exits 1
        return dataclasses.replace(run, verdict=str(run_status(run.record)["verdict"])) if run.record else run

    baseline = with_verdict(load_run(args.baseline, args.out))
    current = with_verdict(load_run(args.current if args.current is not None else args.out / "latest", args.out))
    same = baseline.path.resolve() == current.path.resolve() or bool(baseline.header.get("run_id")) and \
        baseline.header.get("run_id") == current.header.get("run_id")
    if same:  # a run against itself compares nothing: never a pass
        raise UserError(f"the baseline and the run are the same run ({display(current.path.parent)}); name another run "
                        "to compare with")
    result = compare(baseline, current, args.tolerance)
    print(f"baseline {display(baseline.path.parent)} ({baseline.describe()})")
    print(f"run      {display(current.path.parent)} ({current.describe()})")
    for line in report_lines(result, show_same=args.all):
        print(line)
    partial = [(name, run) for name, run in (("baseline", baseline), ("run", current)) if run.incomplete]
    for name, run in partial:
        print(f"INCOMPLETE: the {name} {display(run.path.parent)}: {run.incomplete}", file=sys.stderr)
    if partial:
        return Exit.INCOMPLETE
    # a baseline that is no like-for-like reference never makes the comparison read as a pass
    unfit = [f"the baseline's verdict is {baseline.verdict}"] if baseline.verdict in ("FAIL", "ERROR") else []
    unfit += ["the baseline is of another platform"] if result.other_platform else []
    unfit += [f"{len(result.no_reference)} item(s) not compared against it"] if result.no_reference else []
    if unfit:
        print(f"not judged: {'; '.join(unfit)}: no like-for-like reference for a pass", file=sys.stderr)
    if result.worse:
        code = Exit.FAILED
    elif result.unmeasured_now or result.lost or result.unjudged or unfit:  # what could not be told is never a pass
        code = Exit.ERROR
    else:
        code = Exit.PASSED if result.compared else Exit.NOTHING  # nothing matched: nothing was judged
    # never milder than `report` on the run itself: whatever the baseline lacks, the run's own verdict stands
    own = for_verdict(current.verdict) if current.verdict else code
    return worst(code, own)


def _platforms(args: argparse.Namespace) -> int:
    from clustercheck.judging import catalog
    from clustercheck.judging.profiles import search_path

    search = search_path(args.thresholds)
    if args.action == "list":
        if args.name:
            raise UserError(f"platforms list takes no name (got {args.name!r}); one profile in full: "
                            f"clustercheck platforms show {args.name}")
        lines = catalog.list_lines(search)
    elif not args.name:
        raise UserError("platforms show needs a profile name (clustercheck platforms lists them)")
    else:
        from clustercheck.run.judge import check_profile

        lines = catalog.show_lines(search, args.name)
        check_profile(search.load(args.name))  # what `run` refuses before any check (exit 4), refused here too
    for line in lines:
        print(line)
    return 0


def _resume(args: argparse.Namespace) -> int:
    import re
    import shlex

    if args.k8s:
        from clustercheck.run.k8s.taint import resume

        return resume(args.nodes, dry_run=args.dry_run)

    import hostlist

    from clustercheck.record import exclude
    from clustercheck.run.options import require_tool

    require_tool("scontrol", "clustercheck resume", "it resumes Slurm nodes and has nothing to do without Slurm")
    rc, out = exclude.run(["scontrol", "show", "node", "-o"])
    if rc != 0:
        raise HarnessError(f"scontrol show node failed: {out.splitlines()[-1] if out else rc}")
    ours, others = exclude.drained_by_us(out)
    wanted = set(hostlist.expand_hostlist(args.nodes)) if args.nodes else None
    status = 0
    for node in ours:
        if wanted is not None and node not in wanted:
            continue
        cmd = ["scontrol", "update", f"NodeName={node}", "State=RESUME"]
        if args.dry_run:
            print(f"would run: {shlex.join(cmd)}")
            continue
        code, text = exclude.run(cmd)
        print(f"resumed {node}" if code == 0 else f"could not resume {node}: {text}")
        status = status or (code != 0)
    for node, reason in others:
        if wanted is None or node in wanted:
            print(f"left alone {node}: drained for {reason!r}, not by clustercheck")
    # a node asked for by name and not resumed is said, never silence: exit 4 when Slurm does not know it
    known = set(re.findall(r"\bNodeName=(\S+)", out))
    unknown = sorted((wanted or set()) - known)
    for node in sorted((wanted or set()) - set(ours) - {n for n, _ in others}):
        print(f"left alone {node}: " + ("not drained" if node in known else "no such node in scontrol show node"))
    if not ours:
        print("no node is drained by clustercheck")
    return Exit.ERROR if status else Exit.BAD_INPUT if unknown else Exit.PASSED
