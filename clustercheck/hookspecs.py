"""Hooks for other pytest plugins: clustercheck hands them its results as data (never markup), as it
records them. Implement them in a conftest.py or a plugin loaded with `-p` (plugins/ has examples).

    def pytest_clustercheck_result(entry, config):   # each result, as soon as it is known
        ...
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest


@pytest.hookspec
def pytest_clustercheck_result(entry: dict[str, Any], config: pytest.Config) -> None:
    """One item's result, the dict written to the run record (docs/run-record.md, `type: result`),
    called once per item as soon as it is recorded. Do not modify it."""


@pytest.hookspec
def pytest_clustercheck_run_finished(run_dir: Path, results: list[dict[str, Any]], exclusion: dict[str, Any],
                                     incomplete: str | None, verdict: str, selection: dict[str, Any] | None,
                                     config: pytest.Config) -> None:
    """The run is over and its reports are written in `run_dir`, unless they could not be (then
    `incomplete` says so: the run is INCOMPLETE, exit 2). `results`: every result, without the
    bulky `rows`, `pool` and `params` (read `run_dir / "run.jsonl"` for those); `exclusion`: the
    record's `exclude` line (`hostlist`, `reasons` per node, `drain`, `unmeasured`, `untested`);
    `incomplete`: why the run did not finish (the terminal's INCOMPLETE line: its record broken, stopped, or
    its reports unwritten), or None when it did (docs/run-record.md); `verdict`: the run's, as results.json
    and the exit code say it (PASS, FAIL, ERROR, SKIPPED or INCOMPLETE), of the selection only when `selection` is
    not None; `selection`: the plan's, as results.json has it (`{selected, collected, deselected, more}`: the run
    measured `selected` of the `collected` items its suite files hold, -k, -m, --deselect, ...), None when it
    planned them all. An implementation may take any subset of the arguments (pluggy passes only those it
    names), so one written before `selection` was added works unchanged. Called once, after pytest's
    session finished; not called when the run never started (e.g. a suite file was invalid)."""
