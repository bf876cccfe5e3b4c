"""`clustercheck probe NAME [--input FILE] [--expect K=V ...] [--platform P]` and `probe all` / `--list`.

Exit codes (clustercheck.exitcodes): 0 every verdict that judged something passed; 1 a verdict failed; 3 the
probe could not run here (error: it crashed or could not parse the live tool's output), or it judged a part
and not the rest (`probe all`: a probe NOT JUDGED, or an --expect key only skipped probes read, beside probes
that passed); 4 bad input (an unreadable or unparsable --input, a bad --expect or one the probe never reads,
an unknown probe or platform); 5 nothing judged (the probe was skipped: "SKIPPED: reason", e.g. its tool is
not installed; or every verdict reads "NOT JUDGED ...: not judged: <why>", e.g. a capture that holds no
result).
"""

from __future__ import annotations

import argparse
import codecs
import stat
from pathlib import Path
from typing import Any

from clustercheck.errors import UserError, escape
from clustercheck.exitcodes import Exit
from clustercheck.probes.tool import MAX_OUTPUT, ToolReported

EPILOG = """\
examples:
  clustercheck probe --list                          every probe, what it judges and what --input holds
  clustercheck probe all                             every probe on this machine
  clustercheck probe pci-acs --input lspci-vvv.txt   judge evidence a vendor sent
  clustercheck probe topo --input topo.txt --platform h100-sxm-8x
  clustercheck probe nvlink --input nvlink-s.txt --expect nvlinks_per_gpu=18

exit codes: 0 passed; 1 a verdict failed; 3 the probe could not run, or judged only a part (error); 4 bad input;
5 nothing judged (skipped: the tool is absent here; or every verdict NOT JUDGED).
"""


def add_parser(sub: Any) -> None:
    p = sub.add_parser("probe", help="judge a system property live or from captured tool output",
                       description="Run a probe on this machine, or judge captured output with --input.",
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("name", nargs="?", metavar="NAME", help="a probe (see --list) or 'all'")
    p.add_argument("--list", action="store_true", help="list the probes")
    p.add_argument("--input", type=Path, metavar="FILE", help="captured tool output to judge instead of this machine")
    p.add_argument("--expect", action="append", default=[], metavar="KEY=VALUE",
                   help="an expectation, e.g. nvlinks_per_gpu=18 or topology.gpu_gpu=NV18 (overrides the profile)")
    p.add_argument("--platform", help="take expectations from this threshold profile (default: detected when live)")
    p.add_argument("--thresholds", type=Path, metavar="DIR", action="append", default=[],
                   help="a directory of your own profiles, searched first (repeatable; also $CLUSTERCHECK_THRESHOLDS)")


def main(args: argparse.Namespace) -> int:
    from clustercheck import probes
    from clustercheck.probes.base import ProbeOutcome, ProbeParseError, ProbeSkip, outcome_of

    if args.list:
        given = [flag for flag, value in (("--input", args.input), ("--expect", args.expect), ("--platform",
                                          args.platform), ("--thresholds", args.thresholds)) if value]
        if args.name or given:  # never silently dropped: `probe --list nvlink` lists every probe, not nvlink's
            raise UserError(f"probe --list takes no {'NAME' if args.name else 'other option'} (got "
                            f"{repr(args.name) if args.name else given[0]}); it lists every probe; one probe: "
                            "clustercheck probe NAME")
        for name in probes.NAMES:
            pr = probes.get(name)
            keys = f"; expect: {', '.join(pr.expect_keys)}" if pr.expect_keys else ""
            print(f"{name:<11} [{pr.scope}] {pr.description}")
            print(f"{'':<11} --input: {pr.input_help}{keys}")
        return 0
    if not args.name:
        raise UserError("probe needs a NAME (see clustercheck probe --list) or 'all'")
    if args.name != "all":
        try:
            probe = probes.get(args.name)
        except KeyError as exc:
            raise UserError(str(exc.args[0])) from None
    if args.input is not None and args.name == "all":
        raise UserError("--input judges one probe's evidence; name the probe, e.g. clustercheck probe topo --input FILE")
    from clustercheck.judging.expect import parse_expect_args, typed_keys

    typed = parse_expect_args(args.expect)
    _refuse_unread(typed, args.name)  # before anything runs: a key nothing reads would judge nothing and pass
    expect = _expectations(args, typed, live=args.input is None)
    if args.name == "all":
        return _all(expect, typed_keys(typed))
    if args.input is None:
        return _report(probes.run_live(probe, expect))
    text = _read(args.input)
    try:
        parsed = probe.parse(text)
    except ToolReported as exc:  # the tool's own error line in the capture: a failure naming it (tool.py)
        return _report(outcome_of(probe.name, exc.verdicts))
    except ProbeParseError as exc:
        raise UserError(f"{args.input}: cannot judge it as {probe.input_help}: {exc}") from None
    try:
        verdicts = tuple(probe.judge(parsed, expect))
    except ProbeSkip as exc:
        return _report(ProbeOutcome(probe.name, "skipped", reason=exc.reason))
    except ProbeParseError as exc:  # read, but what it shows decides nothing (an elided capture)
        raise UserError(f"{args.input}: cannot judge it as {probe.input_help}: {exc}") from None
    return _report(outcome_of(probe.name, verdicts))


# bytes; a tool capture is kilobytes (the largest in tests/fixtures is 11 KB): the cap a live tool's output has
MAX_INPUT = MAX_OUTPUT


def _read(path: Path) -> str:
    """The captured text, read at most MAX_INPUT + 1 bytes: /dev/zero or a huge file fails fast in one line."""
    try:
        mode = path.stat().st_mode
        if stat.S_ISDIR(mode):
            raise UserError(f"{path}: is a directory; give the file holding the tool's output")
        if not (stat.S_ISREG(mode) or stat.S_ISCHR(mode)):  # open() of a FIFO with no writer never returns
            raise UserError(f"{path}: is not a regular file (a FIFO or socket); save the tool's output to a file first")
        with path.open("rb") as fh:
            data = fh.read(MAX_INPUT + 1)
    except OSError as exc:
        raise UserError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if len(data) > MAX_INPUT:
        raise UserError(f"{path}: larger than {MAX_INPUT >> 20} MiB, the most a probe reads: not one tool's output")
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        raise UserError(f"{path}: is UTF-16 text (as PowerShell's '>' writes it); convert it to UTF-8 first, "
                        f"e.g. iconv -f UTF-16 -t UTF-8")
    if b"\0" in data:
        raise UserError(f"{path}: holds NUL bytes: binary data, not a tool's text output")
    text = data.decode("utf-8", errors="replace").removeprefix("\ufeff")  # a UTF-8 BOM (Notepad) is harmless
    if text.count("\ufffd") > max(8, len(text) // 100):
        raise UserError(f"{path}: is not UTF-8 text: binary data, or text in another encoding")
    return text


def _refuse_unread(typed: dict[str, Any], name: str) -> None:
    """A key the user typed with --expect that the probe (`all`: every probe) never reads: one line, exit 4.
    Run, it would judge nothing of it and exit 0, and the user would take the expectation for checked; so is
    a value the named probe reads and cannot judge (`Probe.takes`). A profile's expect: block is not held to
    this: it serves every probe, each reading its own keys (and saying `not judged` of a value it cannot)."""
    from clustercheck import probes
    from clustercheck.judging.expect import typed_keys

    keys = typed_keys(typed)
    if not keys:
        return
    if name != "all":
        probe = probes.get(name)
        for key in keys:
            if not probe.reads(key):
                reads = f"it reads: {', '.join(probe.expect_keys)}" if probe.expect_keys else "it reads none"
                raise UserError(f"--expect {key}: probe {probe.name} does not read it ({reads})")
        cannot = probe.cannot_judge(typed)  # read and never judged (amd-smi's topology.gpu_gpu=NV18): passed too
        if cannot:
            raise UserError(f"--expect {cannot}")
        return
    known = []
    for each in probes.NAMES:
        try:
            known.append(probes.get(each))
        except Exception:  # noqa: BLE001 - a probe that cannot load is `probe all`'s error (exit 3), not decided here
            return
    for key in keys:
        if not any(p.reads(key) for p in known):
            raise UserError(f"--expect {key}: no probe reads it (probe --list names the keys each reads)")


def _expectations(args: argparse.Namespace, typed: dict[str, Any], live: bool) -> dict[str, Any]:
    from clustercheck.judging.expect import merged
    from clustercheck.judging.profiles import search_path

    search = search_path(args.thresholds)
    expect: dict[str, Any] = {}
    profile_fabric = None
    if args.platform:
        profile = search.load(args.platform)
        expect, profile_fabric = dict(profile.expect), profile.fabric
        print(f"platform: {escape(profile.name)} (--platform)")
    elif live:
        from clustercheck.judging.platform import describe, detect, read_facts

        facts = read_facts()
        try:
            profile = detect(search, facts)
            expect, profile_fabric = dict(profile.expect), profile.fabric
            print(f"platform: {escape(profile.name)} (detected: {escape(describe(facts))})")
        except UserError:
            print(f"platform: none matched ({escape(describe(facts))}); judging without platform expectations "
                  f"(pick one with --platform)")
    expect = merged(expect, typed)  # typed over the profile's, `topology` key by key
    if profile_fabric is not None or "fabric_rule" not in expect:
        from clustercheck.judging.fabric import expectations

        expect.update(expectations(profile_fabric))  # the profile's fabric block, else the built-in rule
    return expect


def _report(outcome: Any) -> int:
    """The exit code of clustercheck.exitcodes: a skipped probe judged nothing (5), never a pass."""
    if outcome.outcome == "skipped":
        print(f"SKIPPED: {escape(outcome.reason)}")
        return Exit.NOTHING
    if outcome.outcome == "error" and not outcome.verdicts:
        print(f"ERROR: {outcome.name}: {escape(outcome.reason)}")
        return Exit.ERROR
    for v in outcome.verdicts:
        print(f"{v.word} {escape(v.line())}")
    bad, unjudged = outcome.failures, outcome.unjudged
    passed = len(outcome.verdicts) - len(bad) - len(unjudged)
    more = f", {len(unjudged)} not judged" if unjudged else ""
    state = "not all judged" if outcome.outcome == "error" else outcome.outcome  # some judged, some could not be
    print(f"{outcome.name}: {state} ({passed} passed, {len(bad)} failed{more})")
    if not outcome.verdicts:  # a judge that returned nothing judged nothing
        return Exit.NOTHING
    return {"failed": Exit.FAILED, "not judged": Exit.NOTHING, "error": Exit.ERROR}.get(outcome.outcome, Exit.PASSED)


def _unread_here(keys: list[str], results: list[tuple[str, str, Any]]) -> list[str]:
    """The typed keys no probe that ran here read: every probe reading one was skipped (nccl-tests, which
    judges a capture only; pcie-link on a machine without a PCIe GPU). Such an expectation judged nothing."""
    from clustercheck import probes

    def reads(name: str, key: str) -> bool:
        try:
            return probes.get(name).reads(key)
        except Exception:  # noqa: BLE001 - a probe that cannot load is already its own `error` line
            return False

    out = []
    for key in keys:
        readers = [name for name, _, _ in results if reads(name, key)]
        if all(o == "skipped" for name, o, _ in results if name in readers):
            out.append(f"{'NOT-JUDGED':<8} --expect {key}: " + (f"every probe that reads it was skipped here "
                       f"({', '.join(readers)})" if readers else "no probe here reads it"))
    return out


def _all(expect: dict[str, Any], typed_keys: list[str]) -> int:
    from clustercheck.probes.run_all import run_node_health

    results = run_node_health(expect)
    for name, outcome, detail in results:
        if isinstance(detail, str):
            print(f"{outcome.upper():<8} {name:<11} {escape(detail)}")
            continue
        shown = [v for v in detail if not v.passed] or list(detail)
        print(f"{outcome.upper().replace(' ', '-'):<8} {name:<11} {escape(shown[0].line())}")
        for v in shown[1:]:
            print(f"{'':<8} {'':<11} {escape(v.line())}")
    unread = _unread_here(typed_keys, results)
    for line in unread:
        print(escape(line))
    outcomes = [o for _, o, _ in results]
    print("; ".join(f"{outcomes.count(k)} {k}" for k in ("passed", "failed", "not judged", "skipped", "error")))
    if "failed" in outcomes:
        return Exit.FAILED
    if "error" in outcomes:
        return Exit.ERROR
    if unread and "passed" in outcomes:  # an expectation typed and judged by nothing: never a pass
        print(f"not all judged: {len(unread)} --expect key(s) judged by no probe here (exit 3, never 0)")
        return Exit.ERROR
    open_ = [name for name, o, _ in results if o == "not judged"]
    if open_ and "passed" in outcomes:  # judged in part, as one probe's verdicts (docs/probe-rules.md): never a pass
        print(f"not all judged: {', '.join(open_)} judged nothing beside the probes that passed (exit 3, never 0)")
        return Exit.ERROR
    return Exit.PASSED if "passed" in outcomes else Exit.NOTHING

