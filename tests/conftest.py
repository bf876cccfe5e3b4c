from __future__ import annotations

import atexit
import importlib
import os
import pkgutil
import shutil
import tempfile
from typing import Iterator

import pytest

import clustercheck
from helpers import CPU_THRESHOLDS

# Tests run suites with pytester's in-process `runpytest`, whose run drops every module first imported
# during it: torch and clustercheck would be imported afresh by each run, and the run's zygote
# (run/zygote.py, kept in a module global) lost with its module. Imported here, they stay for the
# worker's session, as a controller process keeps them for its own; a subprocess run costs two torch
# imports more (its own and its zygote's). Tests that need a process of their own (an environment that
# must reach the controller at start, an import that must fail) still use `runpytest_subprocess`.
import torch.distributed  # noqa: E402,F401

for _module in pkgutil.walk_packages(clustercheck.__path__, "clustercheck."):
    if not _module.name.endswith("__main__"):
        importlib.import_module(_module.name)


@pytest.hookimpl(tryfirst=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """`-n auto` starts one worker more than there are cores. Part of this suite waits rather than
    computes (join timeouts, heartbeat silences, hung ranks' timeouts, agents that never come), and the
    extra worker runs other files meanwhile: a full run on 2 vCPUs took 583.5 s with 3 workers against
    670.6 s with 2 (docs/benchmarks.md). PYTEST_XDIST_AUTO_NUM_WORKERS and `-n logical` keep xdist's own
    rule."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS") or config.option.numprocesses != "auto":
        return None
    return len(os.sched_getaffinity(0)) + 1


def _has_gpu() -> bool:
    import torch

    return torch.cuda.is_available() and torch.cuda.device_count() > 0


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:  # a test that runs pytest on a suite (pytester) starts a real pool: `-m "not pool"` skips it
        if {"pytester", "project"} & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.pool)
    if any(item.get_closest_marker("gpu") for item in items) and not _has_gpu():
        skip = pytest.mark.skip(reason="needs an NVIDIA GPU (none visible to torch here)")
        for item in items:
            if item.get_closest_marker("gpu"):
                item.add_marker(skip)


# pytester gives each test a HOME (and USERPROFILE) and a PYTEST_DEBUG_TEMPROOT of its own. A zygote
# serves only ranks whose environment at import equals its own (run/zygote.py), so each in-process run
# started a zygote afresh, a torch import apiece (13 zygotes for tests/test_plugin.py's 16 tests). One
# directory of each per worker keeps pytester's isolation from the real home and lets the runs share it.
_WORKER_ENV = {"HOME": tempfile.mkdtemp(prefix="cc-home-"), "PYTEST_DEBUG_TEMPROOT": tempfile.mkdtemp(prefix="cc-tmp-")}
_WORKER_ENV["USERPROFILE"] = _WORKER_ENV["HOME"]
for _directory in {*_WORKER_ENV.values()}:
    atexit.register(shutil.rmtree, _directory, True)


@pytest.fixture
def pytester(pytester: pytest.Pytester) -> Iterator[pytest.Pytester]:
    """pytest's pytester, with this worker's one HOME and temporary root (above)."""
    with pytest.MonkeyPatch.context() as mp:  # undone before pytester undoes its own
        for name, value in _WORKER_ENV.items():
            mp.setenv(name, value)
        yield pytester


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    """A directory with thresholds/cpu.yaml and an empty suites/ directory."""
    (pytester.path / "thresholds").mkdir()
    (pytester.path / "thresholds" / "cpu.yaml").write_text(CPU_THRESHOLDS)
    (pytester.path / "suites").mkdir()
    return pytester
