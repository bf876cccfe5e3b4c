"""Detection over the shipped profiles: each platform's facts match exactly one profile, by PCI device id and
the NVLinks a GPU has; a node of a platform with GPUs missing or NVML down still matches it (the probes
then fail it); other variants (12 of 18 NVLinks, MI308X, more GPUs than the platform has) match none and
the error says --platform."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from clustercheck.errors import UserError
from clustercheck.judging.platform import Facts, detect, matches, pci_accelerators
from clustercheck.judging.thresholds import load_profile

THRESHOLDS = Path(__file__).resolve().parent.parent / "thresholds"
PROFILES = {p.stem: load_profile(p) for p in sorted(THRESHOLDS.glob("*.yaml"))}


def facts(count: int, ids: tuple[int, ...] = (), links: int | None = None, pci: tuple[int, ...] = ()) -> Facts:
    return Facts(host="h", gpu_count=count, pci_device_ids=ids, nvlinks_per_gpu=links, pci_accelerators=pci)


@pytest.mark.parametrize("want, f", [
    ("cpu", facts(0)),
    ("h100-sxm-8x", facts(8, (0x2330,), 18)),
    ("h200-sxm-8x", facts(8, (0x2335,), 18)),
    ("a100-sxm-80gb-8x", facts(8, (0x20b2,), 12)),
    ("a100-sxm-8x", facts(8, (0x20b0,), 12)),
    ("b200-8x", facts(8, (0x2901,), 18)),
    ("gh200", facts(1, (0x2342,), 0)),
    ("gh200-144gb", facts(1, (0x2348,), 0)),
    ("a40-nvbridge-8x", facts(8, (0x2235,), 4)),
    ("mi300x-8x", facts(0, pci=(0x74a1,) * 8)),
])
def test_each_platform_matches_exactly_one_profile(want, f):
    assert [n for n, p in PROFILES.items() if matches(p, f)] == [want]
    assert detect(THRESHOLDS, f).name == want


@pytest.mark.parametrize("f", [
    facts(7, (0x2330,), 18),                   # a GPU the driver did not attach
    facts(4, (0x2330,), 18),                   # half a node: four GPUs missing
    facts(8, (0x2330,), None),                 # links unknown (NVML stopped answering): the device id decides
    facts(0, pci=(0x2330,) * 8),               # H100s on the bus, driver not loaded
    facts(1, (0x2330,), 18),                   # seven GPUs gone: the one left has an HGX GPU's 18 NVLinks
    facts(8, (0x2330,), 12),                   # six of an SXM GPU's 18 built-in NVLinks gone: the nvlink probe fails it
    facts(8, (0x2330,), 0),                    # NVLink disabled (NVML reports every link absent): never -nvl0 at PCIe speed
])
def test_a_node_with_gpus_missing_or_nvml_down_is_still_its_platform(f):
    assert [n for n, p in PROFILES.items() if matches(p, f)] == ["h100-sxm-8x"]


def test_one_gpu_with_nvlinks_is_an_hgx_board_short_of_seven_and_fails_as_one():
    """A node whose HGX board lost seven GPUs from the bus must not read as a healthy one-GPU machine:
    its GPU still has 18 NVLinks, so the 8-GPU profile judges it and its versions check fails (1 of 8).
    One GPU without NVLinks (passed through to a VM, as on the lent H100) is the 1x platform."""
    from clustercheck.probes import versions

    for gpu_id, board in ((0x2330, "h100-sxm"), (0x2335, "h200-sxm")):
        assert detect(THRESHOLDS, facts(1, (gpu_id,), 18)).name == f"{board}-8x"
        assert detect(THRESHOLDS, facts(1, (gpu_id,), 0)).name == f"{board}-1x"
    one = versions.Inventory(1, ("NVIDIA H100 80GB HBM3",), "580.159.04", "13.0", None, None, None)
    (count,) = [v for v in versions.judge(one, PROFILES["h100-sxm-8x"].expect) if v.what == "GPU count"]
    assert not count.passed and "1 GPU(s)" in count.detail and "platform expects 8" in count.detail


def test_of_two_profiles_of_one_gpu_the_nearest_count_at_or_above_wins(tmp_path):
    (tmp_path / "h100-sxm-8x.yaml").write_text((THRESHOLDS / "h100-sxm-8x.yaml").read_text())
    (tmp_path / "h100-sxm-4x.yaml").write_text(
        "platform: h100-sxm-4x\ndetect: {gpu_count: 4, pci_device_ids: [0x2330], nvlinks_per_gpu: 18}\n")
    assert [detect(tmp_path, facts(n, (0x2330,), 18)).name for n in (3, 4, 5, 8)] == [
        "h100-sxm-4x", "h100-sxm-4x", "h100-sxm-8x", "h100-sxm-8x"]


# DCGM's own A100-SXM4-80GB floor: nvvs/diag-skus.yaml.in, id 20b2, minimum_bandwidth 1173000 MB/s
# (https://github.com/NVIDIA/DCGM/blob/master/nvvs/diag-skus.yaml.in).
@pytest.mark.parametrize("ids, want, low, high", [
    ((0x20b2,), "a100-sxm-80gb-8x", 1160.0, 1173.0),   # 0.57 x 2039
    ((0x20b0,), "a100-sxm-8x", 0.57 * 1555, 0.57 * 1555),
])
def test_each_a100_memory_variant_is_judged_on_its_own_memory_floor(
        ids: tuple[int, ...], want: str, low: float, high: float) -> None:
    """One profile used to hold both A100 SXM4 parts on the 40GB part's floor (0.57 x 1555 = 886 GB/s), so
    an 80GB GPU degraded to 1000 GB/s passed; each part is now detected by its own device id."""
    profile = detect(THRESHOLDS, facts(8, ids, 12))
    assert profile.name == want
    floor = profile.limits["device-memory"]["bandwidth"]
    assert floor.unit == "GB/s" and low - 1e-9 <= floor.value <= high + 1e-9
    assert profile.defaults["device_memory"].limits["bandwidth"].value == floor.value
    if want == "a100-sxm-80gb-8x":
        assert not floor.passes(1000.0) and floor.passes(1173.0)
        assert "1173000" in floor.source and "NVIDIA/DCGM" in floor.source
    # the rest of the board is the same: NVLink 3 x 12, PCIe Gen4, the A100's tensor cores
    _same_board_but_memory(profile, PROFILES["a100-sxm-8x" if want != "a100-sxm-8x" else "a100-sxm-80gb-8x"])


def _same_board_but_memory(profile: Any, other: Any) -> None:
    """Two memory variants of one board: the same hardware, expectations and limits, HBM and its floor aside."""
    assert {k: v for k, v in profile.hardware.items() if k != "hbm"} == \
        {k: v for k, v in other.hardware.items() if k != "hbm"}
    assert profile.expect == other.expect
    assert {c: {m: l.value for m, l in ms.items()} for c, ms in profile.limits.items() if c != "device-memory"} == \
        {c: {m: l.value for m, l in ms.items()} for c, ms in other.limits.items() if c != "device-memory"}


# DCGM's own GH200 floors (nvvs/diag-skus.yaml.in): 2342 minimum_bandwidth 2130000 MB/s, 2348 2340000 MB/s.
@pytest.mark.parametrize("device, want, hbm, dcgm", [
    (0x2348, "gh200-144gb", 4900.0, 2340.0),
    (0x2342, "gh200", 4000.0, 2130.0),
])
def test_each_gh200_memory_variant_is_judged_on_its_own_memory_floor(
        device: int, want: str, hbm: float, dcgm: float) -> None:
    """gh200 used to hold both superchips on the 96GB part's 4000 GB/s (floor 2120); the 144GB HBM3e part is
    detected by its own id and held to 4900 GB/s, at DCGM's floor for 2348."""
    profile = detect(THRESHOLDS, facts(1, (device,), 0))
    assert profile.name == want
    floor = profile.limits["device-memory"]["bandwidth"]
    assert floor.spec_sources[0].startswith(f"spec.hbm.bandwidth = {hbm:g} GB/s")
    assert dcgm - 15 <= floor.value <= dcgm and f"{dcgm * 1000:.0f} MB/s" in floor.source
    assert profile.defaults["device_memory"].limits["bandwidth"].value == floor.value
    if want == "gh200-144gb":
        assert not floor.passes(2200.0)  # passed the 96GB part's 2120 floor
    _same_board_but_memory(profile, PROFILES["gh200" if want != "gh200" else "gh200-144gb"])


@pytest.mark.parametrize("f", [
    facts(16, (0x2330,), 18),                  # more GPUs than any board holds
    facts(8, (0x2330, 0x20b2), 18),            # mixed GPUs
    facts(8, (0x20b0, 0x20b2), 12),            # A100 40GB and 80GB mixed: no one memory floor fits the node
    facts(0, pci=(0x74a2,) * 8),               # MI308X: no profile and no spec yet
])
def test_variants_match_no_profile_and_the_error_says_platform(f):
    assert not [n for n, p in PROFILES.items() if matches(p, f)]
    with pytest.raises(UserError, match="--platform"):
        detect(THRESHOLDS, f)


@pytest.mark.parametrize("f, name", [
    (facts(8, (0x26b9,), 0), "l40s-8x"),             # L40S: no hand-written profile
    (facts(2, (0x2335,), 18), "h200-sxm-8x"),        # a hand-written profile wins: 2 of 8 is a broken node
])
def test_without_a_hand_written_match_a_known_model_gets_its_derived_profile(f, name):
    assert detect(THRESHOLDS, f).name == name


def test_pci_accelerators_reads_class_vendor_device(tmp_path):
    for name, cls, vendor, device in [("0000:00:01.0", "0x030200", "0x10de", "0x2330"),
                                      ("0000:00:02.0", "0x060400", "0x10de", "0x1af1"),
                                      ("0000:00:03.0", "0x120000", "0x1002", "0x74a1"),
                                      ("0000:00:04.0", "0x030000", "0x1a03", "0x2000")]:  # BMC VGA: not ours
        d = tmp_path / name
        d.mkdir()
        (d / "class").write_text(cls + "\n")
        (d / "vendor").write_text(vendor + "\n")
        (d / "device").write_text(device + "\n")
    assert pci_accelerators(tmp_path) == (0x2330, 0x74A1)


def test_profiles_carry_probe_expectations():
    assert PROFILES["h100-sxm-8x"].expect["topology"] == {"gpu_gpu": "NV18"}
    assert PROFILES["a40-nvbridge-8x"].expect["topology"]["nvlink_pairs"] == "NV4"
    assert PROFILES["cpu"].expect == {"gpu_count": 0, "acs_redirect": False}


def test_bad_expect_block_is_one_line_with_file_line_key(tmp_path):
    path = tmp_path / "lab.yaml"
    path.write_text("platform: lab\ndetect: {gpu_count: 0}\nexpect:\n  topology:\n    gpu_gpu: NV99X\n")
    with pytest.raises(UserError) as info:
        load_profile(path)
    assert str(info.value).startswith(f"{path}:5: expect.topology.gpu_gpu: ")
    path.write_text("platform: lab\ndetect: {gpu_count: 0}\nexpect:\n  nvlinks_per_gpus: 18\n")
    with pytest.raises(UserError, match="did you mean 'nvlinks_per_gpu'"):
        load_profile(path)


@pytest.mark.parametrize("name", ["h100-sxm-8x", "h200-sxm-8x", "a100-sxm-8x", "a100-sxm-80gb-8x", "b200-8x",
                                  "a40-nvbridge-8x", "mi300x-8x"])
def test_eight_gpu_profiles_have_collective_p2p_copy_and_memory_limits(name):
    limits = PROFILES[name].limits
    for check, metric in [("allreduce-default", "busbw"), ("allreduce-ring", "busbw"), ("p2p-matrix", "p2p_min"),
                          ("host-device", "h2d"), ("host-device", "d2h"), ("device-memory", "bandwidth")]:
        assert limits[check][metric].unit == "GB/s" and limits[check][metric].source


def test_nvls_floor_may_exceed_the_link_spec_but_ring_may_not():
    h100 = PROFILES["h100-sxm-8x"].limits
    assert h100["allreduce-default"]["busbw"].value == 430
    assert h100["allreduce-ring"]["busbw"].value < 450
    assert h100["host-device"]["h2d"].value == pytest.approx(0.75 * 63.02)


LENT = "platform: lent\ndetect: {gpu_count: 1}\nchecks: {}\n"  # tests/gpu's profile: count only


def test_a_users_profile_that_matches_wins_over_a_shipped_one_that_also_does(tmp_path):
    """Found on the lent H100: a user's count-only profile and the shipped h100-sxm-1x both match one
    H100; the directory the user gave is searched first, so its match is the platform."""
    from clustercheck.judging.platform import detect_nodes
    from clustercheck.judging.profiles import search_path

    (tmp_path / "lent.yaml").write_text(LENT)
    h100 = facts(1, (0x2330,), 0)
    search = search_path([tmp_path], environ={})
    assert detect(search, h100).name == "lent"
    assert detect_nodes(search, {"vm": h100}).name == "lent"
    assert detect(search_path([], environ={}), h100).name == "h100-sxm-1x"


def test_two_matches_in_one_directory_say_several_not_none(tmp_path):
    from clustercheck.judging.platform import detect_nodes
    from clustercheck.judging.profiles import search_path

    (tmp_path / "lent.yaml").write_text(LENT)
    (tmp_path / "twin.yaml").write_text(LENT.replace("lent", "twin"))
    with pytest.raises(UserError, match=r"several profiles match vm \(lent, twin\)"):
        detect_nodes(search_path([tmp_path], environ={}), {"vm": facts(1, (0x2330,), 0)})


def test_a_yml_profile_in_a_users_directory_is_found_and_hides_the_shipped_one(tmp_path):
    """A .yml profile was skipped (only *.yaml was searched): the shipped cpu.yaml judged instead, in silence."""
    from clustercheck.judging.profiles import search_path

    (tmp_path / "cpu.yml").write_text("platform: cpu\ndescription: mine\ndetect: {gpu_count: 0}\nchecks: {}\n")
    search = search_path([tmp_path], environ={})
    assert search.files()["cpu"] == tmp_path / "cpu.yml" and search.load("cpu").description == "mine"


def test_one_profile_name_as_yaml_and_yml_in_one_directory_is_refused(tmp_path):
    from clustercheck.judging.profiles import search_path

    for suffix in (".yaml", ".yml"):
        (tmp_path / f"lent{suffix}").write_text(LENT)
    with pytest.raises(UserError) as info:
        search_path([tmp_path], environ={}).files()
    assert str(info.value).endswith("lent.yml: a second threshold profile 'lent' beside lent.yaml; keep one of the two")
