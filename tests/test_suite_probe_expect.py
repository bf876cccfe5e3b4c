"""A probe check's own `params: {expect: ...}` is held to what its probe reads, as `clustercheck probe NAME
--expect` is: a key nothing judges is refused with one line naming file, line and key, never run and passed."""

from __future__ import annotations

from pathlib import Path

import pytest

from clustercheck.errors import UserError
from clustercheck.suite.load import load_suite


def _suite(tmp_path: Path, probe: str, expect: str) -> Path:
    path = tmp_path / "suite.yaml"
    path.write_text(f"checks:\n  - id: p\n    measure: probe\n    params:\n      probe: {probe}\n"
                    f"      expect:\n{expect}")
    return path


@pytest.mark.parametrize("probe, expect, line, key, reads", [
    # the audit's suite: `1 passed`, exit 0, while `probe env --expect nvlinks_per_gpu=18` exits 4
    ("env", "        nvlinks_per_gpu: 18\n", 7, "expect.nvlinks_per_gpu", "it reads: nccl_env_allow"),
    ("ecc", "        gpu_count: 8\n        nvlinks_per_gpu: 18\n", 8, "expect.nvlinks_per_gpu", "it reads: gpu_count"),
    # a nested key: amd-smi reads topology.gpu_gpu alone, so gpu_nic would be judged by nothing
    ("amd-smi", "        topology:\n          gpu_gpu: [XGMI]\n          gpu_nic: [PIX]\n", 9,
     "expect.topology.gpu_nic", "it reads: gpu_count, pcie_gen, pcie_width, gpu_temp_max_c, topology.gpu_gpu"),
])
def test_an_expect_key_the_probe_never_reads_is_refused(tmp_path, probe, expect, line, key, reads):
    path = _suite(tmp_path, probe, expect)
    with pytest.raises(UserError) as info:
        load_suite(path)
    assert str(info.value) == f"{path}:{line}: checks[0].params.{key}: probe {probe} does not read it ({reads})"


@pytest.mark.parametrize("probe, expect", [
    ("ecc", "        gpu_count: 8\n"),
    ("nvlink", "        nvlinks_per_gpu: 18\n        gpu_count: 8\n"),
    ("topo", "        topology:\n          gpu_nic: [PIX]\n"),
    ("amd-smi", "        topology:\n          gpu_gpu: [XGMI]\n"),
])
def test_an_expect_key_the_probe_reads_is_taken(tmp_path, probe, expect):
    check = load_suite(_suite(tmp_path, probe, expect)).checks[0]
    assert check.params["probe"] == probe and check.params["expect"]
