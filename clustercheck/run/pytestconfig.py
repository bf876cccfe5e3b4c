"""What the clustercheck plugin reads of pytest's configuration: the suite files named, whether the run only
lists (measures nothing), and pytest-xdist's -n refused for suites."""

from __future__ import annotations

from pathlib import Path

import pytest

from clustercheck.suite.load import is_suite_file, is_yaml_name


def listing(config: pytest.Config) -> bool:
    """A pytest run that lists and measures nothing: --collect-only, --fixtures, --fixtures-per-test (pytest
    collects for those too), --markers: no rank starts, no run record, `latest` stays."""
    return bool(config.option.collectonly or getattr(config.option, "showfixtures", False) or
                getattr(config.option, "show_fixtures_per_test", False) or getattr(config.option, "markers", False))


def suite_files(config: pytest.Config) -> list[Path]:
    """The suite files named on the command line."""
    files = (Path(a.split("::")[0]) for a in config.args)
    return [f for f in files if is_yaml_name(f) and is_suite_file(f)]


def refuse_parallel_workers(config: pytest.Config) -> None:
    """pytest-xdist (-n) would give each worker its own controller and rank pool, measuring the same
    GPUs and links at the same time: every number would be distorted. Suites run in one controller,
    which already measures all nodes at once (docs/multi-node.md)."""
    workers = config.getoption("numprocesses", None)  # None without xdist; 0 for -n 0
    if not workers:
        return
    suites = suite_files(config)
    if suites:
        raise pytest.UsageError(f"-n {workers}: clustercheck suites ({suites[0]}) run in one process: parallel "
                                "workers would measure the same hardware at the same time and distort every "
                                "result (all nodes are already measured at once); drop -n")
