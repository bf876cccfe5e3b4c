from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

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



def _has_gpu() -> bool:
    import torch

    return torch.cuda.is_available() and torch.cuda.device_count() > 0


# The longest test files, longest first (seconds in one full `pytest -n 2` run: docs/benchmarks.md). xdist
# hands out whole files (--dist loadfile) in collection order, so these start first and the short ones
# fill in at the end; xdist's own order (most tests first, turned off in pyproject) ran the files with few
# but long tests (network namespaces, Slurm) last, one worker idle meanwhile.
LONGEST = ("test_netns.py", "test_join.py", "slurm/test_slurm.py", "test_k8s.py", "test_faults.py", "test_incomplete.py",
           "test_security.py", "test_first_hour.py", "test_fuzz_inputs.py", "test_join_netns.py", "test_attestation.py",
           "test_netns_fabric.py", "test_broken_node.py", "test_benchmarks.py", "test_probe_linear_time.py")
_TESTS = Path(__file__).resolve().parent


def _rank(item: pytest.Item) -> int:
    try:
        name = item.path.resolve().relative_to(_TESTS).as_posix()
    except ValueError:  # a pytester run's own files
        return len(LONGEST)
    return LONGEST.index(name) if name in LONGEST else len(LONGEST)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    items.sort(key=_rank)  # stable: each file's tests keep their order
    for item in items:  # a test that runs pytest on a suite (pytester) starts a real pool: `-m "not pool"` skips it
        if {"pytester", "project"} & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.pool)
    if any(item.get_closest_marker("gpu") for item in items) and not _has_gpu():
        skip = pytest.mark.skip(reason="needs an NVIDIA GPU (none visible to torch here)")
        for item in items:
            if item.get_closest_marker("gpu"):
                item.add_marker(skip)


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    """A directory with thresholds/cpu.yaml and an empty suites/ directory."""
    (pytester.path / "thresholds").mkdir()
    (pytester.path / "thresholds" / "cpu.yaml").write_text(CPU_THRESHOLDS)
    (pytester.path / "suites").mkdir()
    return pytester
