"""What the clustercheck plugin reads of pytest's configuration: the suite files named, whether the run only
lists (measures nothing), and the options a suite cannot run with refused: pytest-xdist's -n for suites,
--setup-only/--setup-plan, which measure a suite's checks and drop what they measured, and under `clustercheck
run` (a gate, never interactive) pytest's debugger."""

from __future__ import annotations

import fnmatch
import os
from pathlib import Path

import pytest

from clustercheck.suite.load import found_suite, is_suite_file, is_yaml_name


def listing(config: pytest.Config) -> bool:
    """A pytest run that lists and measures nothing: --collect-only, --fixtures, --fixtures-per-test (pytest
    collects for those too), --markers: no rank starts, no run record, `latest` stays."""
    return listing_option(config) is not None


def listing_option(config: pytest.Config) -> str | None:
    """The option that makes this run a listing (see listing()), as pytest parsed it from every source (argv,
    PYTEST_ADDOPTS, `-o addopts=...`), None for a run that measures."""
    for dest, option in (("collectonly", "--collect-only"), ("showfixtures", "--fixtures"),
                         ("show_fixtures_per_test", "--fixtures-per-test"), ("markers", "--markers")):
        if getattr(config.option, dest, False):
            return option
    return None


def suite_files(config: pytest.Config, walk: bool = False) -> list[Path]:
    """The suite files named on the command line; with `walk`, when none is, the first suite file that a
    directory named on it holds where clustercheck's collection finds one (a YAML suite file in a directory
    named `suites`, plugin.pytest_collect_file): `pytest suites --setup-only` measures those too. Walked only
    for an option to refuse (a big tree costs a walk, never every run), and only to the first one found."""
    args = [Path(a.split("::")[0]) for a in config.args]
    files = [f for f in args if is_yaml_name(f) and is_suite_file(f)]
    if files or not walk:
        return files
    skip = [*config.getini("norecursedirs")]  # where pytest's collection does not look either
    venvs = not config.getoption("collect_in_virtualenv", False)
    for top in args:
        if (found := first_collected_suite(top, skip, venvs)) is not None:
            return [found]
    return []


def first_collected_suite(top: Path, skip: list[str], venvs: bool = True) -> Path | None:
    """The first YAML suite file under directory `top` whose directory is named `suites` (in sorted order;
    directories pytest does not recurse into left out: `norecursedirs`, and with `venvs` virtual environments,
    whose installed clustercheck ships suites of its own), None when there is none or `top` is no directory."""
    if not top.is_dir():
        return None
    for here, dirs, names in os.walk(top):
        dirs[:] = sorted(d for d in dirs if not any(fnmatch.fnmatch(d, pattern) for pattern in skip)
                         and not (venvs and os.path.isfile(os.path.join(here, d, "pyvenv.cfg"))))
        real = Path(here).resolve()  # a directory named `suites` through a link counts too
        for name in sorted(names):
            if found_suite(real / name):
                return Path(here) / name
    return None


def refuse_unfit_options(config: pytest.Config) -> None:
    """pytest's options that cannot run a suite, refused in one line (exit 4) before anything is measured."""
    refuse_parallel_workers(config)
    refuse_setup_only(config)


def refuse_parallel_workers(config: pytest.Config) -> None:
    """pytest-xdist (-n) would give each worker its own controller and rank pool, measuring the same
    GPUs and links at the same time: every number would be distorted. Suites run in one controller,
    which already measures all nodes at once (docs/multi-node.md)."""
    workers = config.getoption("numprocesses", None)  # None without xdist; 0 for -n 0
    if not workers:
        return
    suites = suite_files(config, walk=True)
    if suites:
        raise pytest.UsageError(f"-n {workers}: clustercheck suites ({suites[0]}) run in one process: parallel "
                                "workers would measure the same hardware at the same time and distort every "
                                "result (all nodes are already measured at once); drop -n")


def refuse_debugger(config: pytest.Config) -> None:
    """--pdb under `clustercheck run`: at a failed item pytest's debugger reads stdin, which a batch job's
    pipe never ends, and it catches the KeyboardInterrupt that a SIGTERM (Slurm, a pod deleted) stops the run
    with: the run never ends and its record never gets its end line. A gate is never interactive; a plain
    pytest run is the one to debug in. (--trace stops only in pytest's own test functions, never in a suite's
    item, so it changes nothing here.)"""
    if config.getoption("usepdb", False):
        raise pytest.UsageError("--pdb: clustercheck run is never interactive: at a failed item the debugger "
                                "would wait on stdin (a batch job's never ends) and take the SIGTERM that stops "
                                "the run; use plain pytest to debug: pytest SUITE.yaml --pdb")


def refuse_setup_only(config: pytest.Config) -> None:
    """A suite's check is measured in its item's setup: --setup-only and --setup-plan measured every check, then
    dropped the results (a failed measurement among them) and said only 'planned item(s) never ran'."""
    for option, dest in (("--setup-plan", "setupplan"), ("--setup-only", "setuponly")):
        if config.getoption(dest, False) and (suites := suite_files(config, walk=True)):
            raise pytest.UsageError(f"{option}: a check of a suite ({suites[0]}) is measured in its item's setup: "
                                    "pytest would measure every check and drop what it measured; list the items "
                                    "with --co, or run them")


class UnderRun:
    """pytest's configuration as `clustercheck run` reads it, once pytest parsed every source (argv,
    PYTEST_ADDOPTS, `-o addopts=...`): options a gate cannot run with refused before clustercheck's plugin
    starts anything (its pytest_configure runs after this one), and the option that made the run a listing
    (`listed`, None when it measures), for the line that says nothing was measured."""

    def __init__(self) -> None:
        self.listed: str | None = None

    @pytest.hookimpl(tryfirst=True)
    def pytest_configure(self, config: pytest.Config) -> None:
        self.listed = listing_option(config)
        refuse_debugger(config)
