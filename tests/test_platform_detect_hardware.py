"""A profile's `detect:` must name hardware, and an NVLink count never stands in for it: a user's profile
that names only NVLinks (or nothing) was picked on any machine, even one without a GPU, over the shipped
profile, and judged the run by its own limits (`platform myh100 (detected; 0 GPU(s), host vm)`, PASS)."""

from __future__ import annotations

from pathlib import Path

import pytest

from clustercheck.errors import UserError
from clustercheck.judging.platform import Facts, detect, matches
from clustercheck.judging.profiles import SearchPath
from clustercheck.judging.thresholds import Profile, load_profile

SHIPPED = Path(__file__).resolve().parent.parent / "thresholds"
LOOSE = 'defaults:\n  all_reduce:\n    busbw: {limit: ">= 0.000001", unit: GB/s, source: loose}\n'


def facts(count: int, ids: tuple[int, ...] = (), links: int | None = None) -> Facts:
    return Facts(host="h", gpu_count=count, pci_device_ids=ids, nvlinks_per_gpu=links)


def user_dir(tmp_path: Path, detect_block: str) -> SearchPath:
    """The user's directory (--thresholds dl) before the shipped profiles, as search_path orders them."""
    (tmp_path / "dl").mkdir()
    (tmp_path / "dl" / "myh100.yaml").write_text(f"platform: myh100\ndetect: {detect_block}\n{LOOSE}")
    return SearchPath((tmp_path / "dl", SHIPPED), SHIPPED)


@pytest.mark.parametrize("block", ["{nvlinks_per_gpu: 18}", "{}"])
def test_a_detect_block_naming_no_hardware_is_refused_naming_file_line_and_key(tmp_path, block):
    search = user_dir(tmp_path, block)
    with pytest.raises(UserError) as info:
        detect(search, facts(0))  # a CPU-only machine: was `myh100`, now never
    text = str(info.value)
    assert "\n" not in text
    assert text.startswith(f"{tmp_path / 'dl' / 'myh100.yaml'}:2: detect: names no hardware"), text


def test_nvlinks_never_match_a_node_without_accelerators() -> None:
    """Whatever the parser lets through (a profile made in code), NVLinks need a GPU: 0 GPUs and links
    unknown, or 0 GPUs at all, is no match."""
    needs_links = Profile("myh100", "t.yaml", "", {"nvlinks_per_gpu": 18}, {})
    assert not matches(needs_links, facts(0))
    assert not matches(needs_links, facts(0, links=18))


def test_unknown_links_do_not_match_a_profile_that_names_them_without_a_device_id(tmp_path):
    """8 GPUs whose links NVML could not read: a user's `{gpu_count: 8, nvlinks_per_gpu: 18}` (no device
    id) has nothing to tell the node by, so it is no match; the shipped profile, by device id, judges the node."""
    search = user_dir(tmp_path, "{gpu_count: 8, nvlinks_per_gpu: 18}")
    unknown = facts(8, (0x2330,), None)
    assert not matches(search.load("myh100"), unknown)
    assert detect(search, unknown).name == "h100-sxm-8x"
    assert detect(search, facts(8, (0x2330,), 18)).name == "myh100"  # links read: the user's profile, first
