from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

CPU_THRESHOLDS = """\
platform: cpu
description: test profile
detect:
  gpu_count: 0
checks:
  ok:
    busbw: {limit: ">= 0.000001", unit: GB/s, source: "any working loopback"}
  too-fast:
    busbw: {limit: ">= 1000000", unit: GB/s, source: "impossible on purpose"}
"""


def _has_gpu() -> bool:
    import torch

    return torch.cuda.is_available() and torch.cuda.device_count() > 0


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if any(item.get_closest_marker("gpu") for item in items) and not _has_gpu():
        skip = pytest.mark.skip(reason="needs an NVIDIA GPU (none visible to torch here)")
        for item in items:
            if item.get_closest_marker("gpu"):
                item.add_marker(skip)


def small_check(check_id: str, **extra: str) -> str:
    lines = [f"  - id: {check_id}", "    measure: all_reduce", "    params: {sizes: [1KiB, 64KiB], iters: 3, warmup: 1}"]
    lines += [f"    {k}: {v}" for k, v in extra.items()]
    return "\n".join(lines) + "\n"


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    """A directory with thresholds/cpu.yaml and an empty suites/ directory."""
    (pytester.path / "thresholds").mkdir()
    (pytester.path / "thresholds" / "cpu.yaml").write_text(CPU_THRESHOLDS)
    (pytester.path / "suites").mkdir()
    return pytester


def write_suite(p: pytest.Pytester, body: str, name: str = "s.yaml") -> Path:
    path = p.path / "suites" / name
    path.write_text(textwrap.dedent(body))
    return path
