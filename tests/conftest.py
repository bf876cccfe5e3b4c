from __future__ import annotations

import pytest

from helpers import CPU_THRESHOLDS



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


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    """A directory with thresholds/cpu.yaml and an empty suites/ directory."""
    (pytester.path / "thresholds").mkdir()
    (pytester.path / "thresholds" / "cpu.yaml").write_text(CPU_THRESHOLDS)
    (pytester.path / "suites").mkdir()
    return pytester
