"""nvlink: nvidia-smi nvlink -s fixtures; inactive GPUs and a 12-of-18 variant fail."""

from __future__ import annotations

import pytest

from clustercheck.probes import ProbeParseError, nvlink
from evidence import files, ids, text

NV = "nvlink-status"
FIXTURES = files(NV)
EXPECTED = {  # file -> active links per GPU index
    "3x-rtxa6000-nvlink-s-one-gpu-inactive": {0: 4, 1: 4, 2: 0},
    "a100-sxm4-gpu6-all-links-inactive-azure": {6: 0},
    "a100-sxm4-gpu7-nvlink-s-azure": {7: 12},
}


@pytest.mark.parametrize("path", FIXTURES, ids=ids(FIXTURES))
def test_every_fixture_parses_active_links(path):
    gpus = nvlink.parse(path.read_text())
    assert {g.index: g.active for g in gpus} == EXPECTED[path.stem]
    verdicts = nvlink.judge(gpus, {})
    assert {v.subject for v in verdicts if not v.passed} == {f"GPU{i}" for i, n in EXPECTED[path.stem].items() if n == 0}


def test_a100_with_12_links_passes_a100_and_fails_an_18_link_platform():
    gpus = nvlink.parse(text(NV, "a100-sxm4-gpu7-nvlink-s-azure.txt"))
    assert nvlink.judge(gpus, {"nvlinks_per_gpu": 12})[0].passed
    verdict = nvlink.judge(gpus, {"nvlinks_per_gpu": 18})[0]
    assert not verdict.passed and verdict.measured == 12 and verdict.expected == 18


def test_one_inactive_link_fails():
    raw = text(NV, "a100-sxm4-gpu7-nvlink-s-azure.txt").replace("Link 5: 25 GB/s", "Link 5: <inactive>")
    verdict = nvlink.judge(nvlink.parse(raw), {"nvlinks_per_gpu": 12})[0]
    assert not verdict.passed and "inactive: link 5" in verdict.detail


def test_bridge_pair_box_expects_four_links():
    gpus = nvlink.parse(text(NV, "3x-rtxa6000-nvlink-s-one-gpu-inactive.txt"))
    assert [v.passed for v in nvlink.judge(gpus, {"nvlinks_per_gpu": 4})] == [True, True, False]


@pytest.mark.parametrize("bad", ["", "Link 0: 25 GB/s\n", "GPU 0: X (UUID: u)\n\t Link 0: fast\n"])
def test_not_nvlink_status_is_a_parse_error(bad):
    with pytest.raises(ProbeParseError):
        nvlink.parse(bad)
