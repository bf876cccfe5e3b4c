"""`clustercheck run`: the suites named (a file, or a shipped suite by name; with none, the one for this
machine), refused in one line before pytest starts when they or the options cannot work; a local run's
first rank pool started at once (run/prestart.py); and pytest isolated from the machine it runs on (no
plugin autoload, no ini file or rootdir from a suite's folder, no assertion rewriting)."""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path
from typing import Any, Generator

import pluggy

from clustercheck.errors import UserError, escape, show
from clustercheck.paths import data_dir, shown
from clustercheck.run.timings import TIMINGS

DEFAULT_CPU_SUITE = "cpu-smoke"
DEFAULT_GPU_SUITE = "quick-gate-nvlink8"


def misspelled(rest: list[str], plugins: list[str]) -> None:
    """An option neither `clustercheck run` nor pytest (nor a plugin it loads) knows is a typo: one line
    with the closest known option, exit 4, before pytest starts (whose own message is a usage screen)."""
    import difflib

    from clustercheck.run.options import RUN_OPTIONS

    flags = [tok.split("=", 1)[0] for tok in rest if tok.startswith("--") and len(tok) > 2]
    # -n2, -vx: the first letter is the option; pytest's own are skipped here (reading its parser costs 0.17 s)
    shorts = [tok[:2] for tok in rest if tok[:1] == "-" and tok[1:2].isalpha() and tok[:2] not in PYTEST_SHORT]
    if not flags and not shorts:
        return
    if cached := [flag for flag in flags if flag in CACHE_OPTIONS]:
        raise UserError(f"{cached[0]}: clustercheck run keeps no pytest cache (its cacheprovider is off: a run "
                        "measures every check it selects, never only those that failed before); select checks "
                        "with -k EXPR or -m EXPR, and compare with an earlier run with --compare BASELINE")
    ours = sorted({o.run_flag for o in RUN_OPTIONS if o.cli})
    theirs = _pytest_flags(plugins)
    if theirs is None:  # pytest's parser could not be read: leave the judgment to pytest
        return
    for short in shorts:  # one pytest does not know is left to it (it may be a value), unless a plugin has it
        if short not in theirs and (owner := _installed_plugin_with(short)):
            raise UserError(f"unknown option {short}: it is an option of the installed pytest plugin {owner!r}, "
                            f"which clustercheck run loads only when named: add -p {owner}")
    for flag in flags:
        if flag in theirs or flag in ours:
            continue
        if owner := _installed_plugin_with(flag):
            raise UserError(f"unknown option {flag}: it is an option of the installed pytest plugin {owner!r}, "
                            f"which clustercheck run loads only when named: add -p {owner}")
        close = difflib.get_close_matches(flag, ours, n=1, cutoff=0.7) or \
            difflib.get_close_matches(flag, sorted(f for f in theirs if f.startswith("--")), n=1, cutoff=0.7)
        raise UserError(f"unknown option {flag}" + (f"; did you mean {close[0]}?" if close else
                                                    " (clustercheck run --help lists the options; an installed "
                                                    "pytest plugin's need -p NAME)"))


# pytest's options that read or write its cache (cacheprovider, stepwise), off under `clustercheck run`
CACHE_OPTIONS = frozenset({"--lf", "--last-failed", "--ff", "--failed-first", "--nf", "--new-first", "--cache-show",
                           "--cache-clear", "--lfnf", "--last-failed-no-failures", "--sw", "--stepwise",
                           "--sw-skip", "--stepwise-skip", "--sw-reset", "--stepwise-reset"})
# pytest's own short options (pytest 8 and 9), which need no look at its parser
PYTEST_SHORT = frozenset({"-V", "-W", "-c", "-h", "-k", "-l", "-m", "-o", "-p", "-q", "-r", "-s", "-v", "-x"})


def _pytest_flags(plugins: list[str]) -> set[str] | None:
    """Every option pytest would accept under `clustercheck run` (-x and --exitfirst): its own, clustercheck's
    plugin's and those of the `-p` ones (no other installed plugin is loaded there, see isolation(), so none is
    imported here either: importing one costs time and may do anything); None when pytest's parser cannot be
    read (its layout is pytest's own, not a promise)."""
    try:
        from _pytest.config import get_config

        config = get_config()
        manager = config.pluginmanager
        for name in ["clustercheck.plugin", *plugins]:
            try:
                manager.import_plugin(name, consider_entry_points=True)
            except Exception:  # pytest itself will say what is wrong with it
                continue
        parser = config._parser
        groups = [parser._anonymous, *parser._groups]
        return {name for group in groups for opt in group.options for name in opt.names()}
    except Exception:
        return None


def _installed_plugin_with(flag: str) -> str | None:
    """The entry-point name of an installed pytest plugin (not loaded under `clustercheck run` unless named
    with -p) that defines `flag`, or None. Imports the installed plugins, so only on the way to an error."""
    from importlib.metadata import entry_points

    for entry in entry_points(group="pytest11"):
        module = entry.value.split(":", 1)[0]
        if entry.name != "clustercheck" and flag in (_pytest_flags([module]) or ()):
            return entry.name
    return None


def swallowed_values(argv: list[str], suites: list[str], rest: list[str]) -> None:
    """argparse cannot know that a pytest or plugin option (--prometheus-textfile PATH) takes a value,
    and reads the value as a SUITE: say so, rather than 'no suite named PATH'."""
    for option, value in zip(argv, argv[1:]):
        swallowed = option in rest and option.startswith("-") and "=" not in option and value in suites
        if swallowed and not _is_suite(value):  # not a flag (-v, -x) before a real suite
            raise UserError(f"{option} {value}: write {option}={value} (options clustercheck does not know "
                            f"go to pytest, and their values need '='; otherwise {value!r} is read as a suite)")


def _is_suite(name: str) -> bool:
    try:
        resolve_suite(name)
        return True
    except UserError:
        return False


def resolve_suite(name: str) -> Path:
    try:
        return _resolve_suite(name)
    except OSError as exc:  # a name the file system refuses outright: too long for it, say
        raise UserError(f"no suite named {show(name)}: {exc.strerror}") from None


def _resolve_suite(name: str) -> Path:
    from clustercheck.suite.load import is_yaml_name

    path = Path(name)
    if is_yaml_name(path) or path.exists():
        if not path.is_file():  # a directory named x.yaml is there, but no suite: never "no such file"
            raise UserError(f"{name} is a directory, not a suite file" if path.is_dir() else f"no such suite file: {name}")
        return path
    shipped = data_dir("suites") / f"{name}.yaml"
    if not shipped.is_file():
        known = ", ".join(sorted(p.stem for p in data_dir("suites").glob("*.yaml")))
        raise UserError(f"no suite named {show(name)} (shipped suites: {known})")
    return shipped


def run(args: argparse.Namespace, rest: list[str]) -> int:
    from clustercheck.judging.profiles import search_path
    from clustercheck.suite.load import load_suite, one_stem_each

    from clustercheck.run import prestart

    names = args.suites or [default_suite(args.launcher)]
    paths = [resolve_suite(n) for n in names]
    unwritable_junitxml(rest)
    saved = os.environ.get(AUTOLOAD)
    try:  # from the first rank on: a signal while it starts still ends it (prestart.end)
        if prestarts(args, rest) and not refused(args):  # its ranks import torch while pytest starts
            prestart.begin(args.out, args.backend, args.ranks, args.nccl_log, connect_later=True)
        # refuse bad input in one line before pytest starts: each file, then two of one stem (their items collide)
        suites = [(shown(p), p, load_suite(p, shown(p))) for p in paths]
        one_stem_each([(name, p, [c.id for c in suite.checks]) for name, p, suite in suites])
        search = search_path(args.thresholds)
        if args.platform:
            search.load(args.platform)
        else:
            search.profiles()
        # pytest once the input reads (bad input is refused 0.4 s sooner on a 2-vCPU VM), and still before
        # prestart.go() starts the controller's torch import in a thread, as it was (docs/benchmarks.md)
        import pytest

        prestart.go()
        from clustercheck.run.options import pytest_args as option_args

        pytest_args = [*map(str, paths), *isolation(rest), *rest, *option_args(args)]
        for name in args.plugins:
            pytest_args += ["-p", name]
        pytest_args += ["-k", args.keyword] * bool(args.keyword) + ["-m", args.markexpr] * bool(args.markexpr)
        TIMINGS.mark("suites and profiles checked")
        os.environ[AUTOLOAD] = "1"  # read when pytest loads its plugins; never passed on to another program
        witness = SessionEnd()
        from clustercheck.run.signals import after_the_run, finished, stopped_by
        from clustercheck.run.pytestconfig import UnderRun

        under = UnderRun()  # what pytest parsed: a listing given in `-o addopts=` too
        try:  # the plugin sets the code from the verdict
            code = int(pytest.main(pytest_args, plugins=[NoIniHeader(), BadPlugin(), witness, under]))
            finished(code, record=witness.code is not None)  # a signal from here on leaves it (prestart.end)
            if code == 0 and under.listed:
                print(f"clustercheck: {under.listed}: listed only; nothing was measured, no record was written and no "
                      "node is cleared (exit 0)", file=sys.stderr)
            return code
        except KeyboardInterrupt as exc:  # pytest's session had ended (its unconfigure): the record stands
            if witness.code is None:
                raise  # before any record: the caller's one line
            finished(witness.code, record=True)
            why = stopped_by(exc)  # the signal's name (a handler's words name the phase it was set for)
            print(after_the_run(why.split()[0].rstrip(":") if why.startswith("SIG") else why, witness.code, True),
                  file=sys.stderr)
            return witness.code
    finally:
        prestart.end()  # the session took it, or nothing ran
        if saved is None:
            os.environ.pop(AUTOLOAD, None)
        else:
            os.environ[AUTOLOAD] = saved


LISTING = frozenset({"--co", "--collect-only", "--fixtures", "--fixtures-per-test", "--markers"})  # measure nothing


def prestarts(args: argparse.Namespace, rest: list[str]) -> bool:
    """Whether `clustercheck run` starts its first rank pool before pytest: a local run that will measure, as
    far as the options tell before pytest parses them (a pool started for a listing is only time lost: the
    plugin reads pytest's configuration, and prestart.end() stops it)."""
    given = {*_given(rest)}
    listing = ({"--help", "-h", "--version"} | LISTING) & given
    from clustercheck.run.launch import LAUNCHERS

    return args.launcher in LAUNCHERS and not LAUNCHERS[args.launcher].remote and not listing


def _given(rest: list[str]) -> list[str]:
    """The pytest options of PYTEST_ADDOPTS and `rest`, and those of any `-o addopts=...` among them."""
    given = [*shlex.split(os.environ.get("PYTEST_ADDOPTS", "")), *rest]
    inis = [value for option, value in zip(given, given[1:]) if option in ("-o", "--override-ini")]
    inis += [tok.split("=", 1)[1] for tok in given if tok.startswith("--override-ini=")]
    inis += [tok[2:] for tok in given if tok.startswith("-o") and not tok.startswith("--") and len(tok) > 2]
    for ini in inis:
        if ini.startswith("addopts="):
            try:
                given += shlex.split(ini.removeprefix("addopts="))
            except ValueError:  # pytest says what is wrong with it
                pass
    return given


def refused(args: argparse.Namespace) -> bool:
    """Whether the run's options or its --out will be refused (the plugin and the session say why, in
    their words, as ever): such a run starts no rank first, whose torch import would be seconds of CPU
    for nothing. The check takes about 16 ms; options pytest alone reads count at their defaults here."""
    from clustercheck.run.launch import make_launcher
    from clustercheck.run.options import RUN_OPTIONS, resolve
    from clustercheck.run.rundir import check_latest

    defaults = {o.name: o.kwargs()["default"] for o in RUN_OPTIONS}
    try:
        options = resolve(lambda name: getattr(args, name, defaults[name]))
        check_latest(options.out)
        make_launcher(options)  # a local one (prestarts): it has nothing to start or wait for
    except Exception:  # noqa: BLE001 - whatever it is, the plugin meets it again and says it
        return True
    return False


AUTOLOAD = "PYTEST_DISABLE_PLUGIN_AUTOLOAD"


def isolation(rest: list[str]) -> list[str]:
    """pytest as `clustercheck run` runs it: clustercheck's plugin and the ones named with -p, none of the
    other plugins installed beside it (each costs start-up time and may change what a run does); the
    working directory as rootdir and no ini file from wherever a suite lives; no assertion rewriting (a
    suite's items assert nothing, and a wheel install would warn that clustercheck was imported first); no
    hunt for unraisable exceptions (pytest's plugin runs gc.collect() at the end, 0.26 s with torch loaded on
    a 2-vCPU VM, after the reports: a suite runs no test code that could leave one).
    No conftest.py from a directory above the rootdir either: -c /dev/null would make pytest's confcutdir
    /dev, and every conftest.py from the working directory up to / (a world-writable /tmp/conftest.py) would
    be imported into the process that writes the evidence; plain pytest stops at its rootdir, and so does
    this (--confcutdir=the rootdir).
    An option the user gives (-c, --rootdir, --confcutdir, --assert) wins; --rootdir alone still reads no ini
    file (pytest would look for one beside the suite whatever the rootdir). A plain `pytest suites/x.yaml` is
    untouched."""
    given = {a.split("=", 1)[0] for a in rest}
    out = ["-p", "clustercheck.plugin", "-p", "no:cacheprovider", "-p", "no:unraisableexception"]
    if not given & {"-c", "--config-file", "--inifile"}:
        out += ["-c", os.devnull, *([] if "--rootdir" in given else [f"--rootdir={os.getcwd()}"])]
        if "--confcutdir" not in given:  # an ini file the user names sets it as in plain pytest (its folder)
            out.append(f"--confcutdir={os.path.abspath(_value_of('--rootdir', rest) or os.getcwd())}")
    if "--assert" not in given:
        out.append("--assert=plain")
    return out


def unwritable_junitxml(rest: list[str]) -> None:
    """A `--junitxml` path pytest could not write (its folder a file, under /proc, read-only) is refused in one
    line before anything is measured: pytest would find out after the run, in a traceback, and the record
    would never get its end line. Folders it needs are made and removed again (pytest makes them at the end)."""

    given = [*shlex.split(os.environ.get("PYTEST_ADDOPTS", "")), *rest]
    for option in ("--junitxml", "--junit-xml"):
        path = _value_of(option, given)
        if path is None:
            continue
        target = Path(os.path.normpath(os.path.abspath(os.path.expanduser(os.path.expandvars(path)))))
        made: list[Path] = []
        try:
            if target.is_dir():
                raise IsADirectoryError(21, "Is a directory", str(target))
            missing = [d for d in [target.parent, *target.parent.parents] if not d.exists() and not d.is_symlink()]
            for folder in reversed(missing):
                folder.mkdir()
                made.append(folder)
            if target.exists():
                open(target, "a").close()
            else:
                os.close(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
                target.unlink()
        except OSError as exc:
            where = f": {shown(Path(exc.filename))}" if exc.filename else ""
            raise UserError(f"{option}={path}: the JUnit report cannot be written there ({exc.strerror or exc}"
                            f"{where}); nothing was measured") from None
        finally:
            for folder in reversed(made):
                try:
                    folder.rmdir()
                except OSError:
                    pass


def _value_of(option: str, rest: list[str]) -> str | None:
    """The last value given to a pytest option in `rest` (`--opt=V` or `--opt V`), None when none is."""
    found = None
    for arg, after in zip(rest, [*rest[1:], None]):
        if arg.startswith(option + "="):
            found = arg.split("=", 1)[1]
        elif arg == option and after is not None:
            found = after
    return found


class SessionEnd:
    """The exit code pytest's session ended with (after the plugin's sessionfinish set it from the verdict),
    None until then: a signal after that (pytest's unconfigure) leaves the record's verdict and its code."""

    def __init__(self) -> None:
        self.code: int | None = None

    @pluggy.HookimplMarker("pytest")(trylast=True)
    def pytest_sessionfinish(self, session: Any) -> None:
        self.code = int(session.exitstatus)


class BadPlugin:
    """A plugin named with `-p` that raised while it was imported, or whose hook does not fit its hookspec (an
    argument clustercheck's or pytest's hook has not): the user's input, one line naming the plugin, exit 4;
    pytest said the first in a traceback, exit 3, and the second reached main() as a bug of clustercheck's."""

    @pluggy.HookimplMarker("pytest")(wrapper=True)
    def pytest_cmdline_parse(self) -> Generator[None, Any, Any]:
        from _pytest.config import PluginImportFailure

        from clustercheck.run.guards import where_raised

        try:
            return (yield)
        except PluginImportFailure as exc:  # its cause: what the plugin's module raised
            cause = exc.__cause__ or exc
            raise UserError(f"-p {exc}: the plugin raised while it was imported ({where_raised(cause)})") from None
        except pluggy.PluginValidationError as exc:  # "Plugin 'x' for hook 'y'", its definition, the argument
            said = "; ".join(escape(line) for line in str(exc).splitlines())
            raise UserError(f"a plugin (-p NAME, a conftest.py) does not fit its hooks: {said}") from None


class NoIniHeader:
    """pytest's header says "configfile: ../../dev/null" for isolation's -c: say that none was read."""

    @pluggy.HookimplMarker("pytest")(wrapper=True)  # pytest.hookimpl, without importing pytest yet
    def pytest_report_header(self, config: Any) -> Generator[None, list[Any], list[Any]]:
        headers = yield
        if str(config.inipath) == os.devnull:
            said = "configfile: none (clustercheck run reads no ini file; -c FILE names one)"
            headers = [[said if line.startswith("configfile: ") else line for line in ([h] if isinstance(h, str) else h)]
                       for h in headers]
        return headers


def default_suite(launcher: str = "local") -> str:
    """The suite `clustercheck run` runs when none is named, from what this machine has: the NVLink quick
    gate on 8 NVIDIA GPUs, the MI300X one on AMD, a single-node GPU smoke test on fewer GPUs, else the
    CPU suite (which measures for real with gloo). The nodes of a remote launcher are read only once they
    joined, after the suites are collected: a controller without GPUs (a login node) is no guide to them,
    and the CPU suite it would pick could clear GPU nodes on a check or two (`name a suite`, exit 4)."""
    from clustercheck.judging.platform import read_facts

    facts = read_facts()
    if not facts.accelerator_count:
        if launcher != "local":
            raise UserError(f"no suite named: with --launcher {launcher} the default suite would be chosen from "
                            f"this machine, which has no GPU, before the nodes are read; name one: "
                            f"{DEFAULT_GPU_SUITE} (8 NVIDIA GPUs a node), gpu-smoke (fewer), quick-gate-mi300x "
                            f"(AMD) or {DEFAULT_CPU_SUITE} (nodes without GPUs)")
        return DEFAULT_CPU_SUITE
    if facts.hip:
        return "quick-gate-mi300x"
    return DEFAULT_GPU_SUITE if facts.accelerator_count >= 8 else "gpu-smoke"
