"""clustercheck.judging.derive: a profile for 1, 2, 4 or 8 GPUs of every model in the table, its limits computed from
the spec table with public sources, names that round-trip, NVLink and xGMI roles only where there are peers."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers import all_limits
from clustercheck.judging import derive
from clustercheck.judging import specs
from clustercheck.judging.derive import MODELS, derived_by_name, derived_name, derived_profile, derived_text, parse_name
from clustercheck.judging.platform import Facts, matches
from clustercheck.judging.thresholds import load_profile
from test_sources import problems

THRESHOLDS = Path(__file__).resolve().parent.parent / "thresholds"
CASES = [(m, n) for m in MODELS for n in (1, 2, 4, 8) if n <= m.max_gpus]


def spec(name: str, field: str) -> float:
    return specs.SPECS[name][field].value


@pytest.mark.parametrize("model, count", CASES, ids=[f"{m.slug}-{n}x" for m, n in CASES])
def test_every_model_and_count_derives_a_profile_with_spec_relative_limits(model, count):
    for device_id in model.device_ids:
        profile = derived_profile(device_id, count, None)
        assert profile is not None
        assert profile.name == f"{model.slug}-{count}x" == derived_name(model, count)
        assert profile.detect["gpu_count"] == count and profile.detect["pci_device_ids"] == model.device_ids
        assert profile.expect["gpu_count"] == count and profile.expect["gpu_model"] == model.gpu_model
        assert not profile.limits, "a derived profile judges through defaults only"
        d = profile.defaults
        mem = d["device_memory"].limits["bandwidth"]
        assert mem.value == pytest.approx(model.memory.fraction * spec(model.hbm, "bandwidth"))
        gemm = d["gemm"]
        assert gemm.dtypes == ("auto", "bfloat16", "float16")
        assert gemm.limits["tflops"].value == pytest.approx(model.gemm.fraction * spec(model.tensor, "bf16_dense"))
        assert gemm.limits["tflops"].unit == "TFLOP/s"
        host = d["host_device"].limits
        host_rate = spec(model.pcie, "unidirectional") if model.pcie else spec("nvlink_c2c", "unidirectional")
        assert host["h2d"].value == host["d2h"].value == pytest.approx(
            derive._HOST[model.pcie or "nvlink_c2c"].fraction * host_rate)
        peers = count >= 2 and (model.links or model.fabric == "xgmi" or model.pcie)
        assert ("all_reduce" in d) == ("p2p" in d) == bool(peers)
        assert ("nvlink" in profile.hardware) == (count >= 2 and model.links > 0)
        assert ("xgmi" in profile.hardware) == (model.fabric == "xgmi")
        if count == 1:
            assert "nvlinks_per_gpu" not in profile.detect and "nvlinks_per_gpu" not in profile.expect
        for limit in all_limits(profile):
            assert limit.op == ">=" and 0 < limit.value, limit
            assert limit.spec_sources, f"{limit.key} is not spec-relative"
            assert not problems(limit.source), (limit.key, problems(limit.source))
            assert not any(problems(s) for s in limit.spec_sources), limit.key
            assert limit.origin.startswith(f"derived:{profile.name}:") and limit.origin.endswith(limit.key)
            assert limit.key.startswith("defaults.")


@pytest.mark.parametrize("model, count", CASES, ids=[f"{m.slug}-{n}x" for m, n in CASES])
def test_a_derived_name_round_trips_and_matches_its_node(model, count):
    name = derived_name(model, count)
    profile = derived_by_name(name)
    assert profile is not None and profile.name == name
    assert derived_text(model.device_ids[0], count) == derived_text(model.device_ids[-1], count)
    links = model.links if count >= 2 and model.fabric == "nvlink" else None
    node = Facts(host="n", gpu_count=count, pci_device_ids=(model.device_ids[0],), nvlinks_per_gpu=links)
    assert matches(profile, node)
    fewer_links = Facts(host="n", gpu_count=count, pci_device_ids=(model.device_ids[0],), nvlinks_per_gpu=3)
    # fewer links than an SXM part's board has is that board with links gone (the nvlink probe fails it); more
    # than a profile of no NVLink (GH200 superchips) is another platform
    assert matches(profile, fewer_links) == (count < 2 or model.fabric != "nvlink" or model.links > 3)


def test_collective_limits_follow_the_links_a_gpu_has():
    usual = derived_profile(0x2330, 4, 18)
    assert usual is not None and usual.name == "h100-sxm-4x"
    assert usual.defaults["all_reduce"].limits["busbw"].value == pytest.approx(0.6 * 450)
    assert usual.defaults["all_reduce"].min_size == 1 << 30
    assert usual.defaults["p2p"].limits["p2p_min"].value == pytest.approx(0.7 * 450)
    twelve = derived_profile(0x2330, 2, 12)
    assert twelve is not None and twelve.name == "h100-sxm-2x-nvl12" and twelve.detect["nvlinks_per_gpu"] == 12
    assert twelve.defaults["all_reduce"].limits["busbw"].value == pytest.approx(0.6 * 12 * 25)
    assert derived_by_name("h100-sxm-2x-nvl12") == twelve
    none = derived_profile(0x2330, 2, 0)  # NVLink not there (a VM without it): PCIe between the GPUs
    assert none is not None and none.name == "h100-sxm-2x-nvl0" and "nvlink" not in none.hardware
    assert none.defaults["all_reduce"].limits["busbw"].value == pytest.approx(0.1 * spec("pcie5_x16", "unidirectional"))
    assert derived_profile(0x2330, 1, 18) == derived_profile(0x2330, 1, 0) == derived_profile(0x2330, 1, None)


def test_xgmi_collectives_scale_with_the_peers_in_the_group():
    for count in (2, 4, 8):
        profile = derived_by_name(f"mi300x-{count}x")
        assert profile is not None
        assert profile.defaults["all_reduce"].limits["busbw"].value == pytest.approx(0.6 * (count - 1) * 64)
    eight = derived_by_name("mi300x-8x")
    assert eight is not None
    assert eight.defaults["all_reduce"].limits["busbw"].value == pytest.approx(
        0.6 * spec("xgmi_mi300x", "all_to_all_unidirectional"))


def test_gh200_superchips_without_nvlink_get_no_collective_limits():
    apart = derived_by_name("gh200-2x")
    linked = derived_by_name("gh200-2x-nvl18")
    assert apart is not None and linked is not None
    assert "all_reduce" not in apart.defaults and "c2c" in apart.hardware and "pcie" not in apart.hardware
    assert linked.defaults["all_reduce"].limits["busbw"].value == pytest.approx(0.6 * 18 * 25)


@pytest.mark.parametrize("device_id, count", [(0x1234, 1), (0x2330, 0), (0x2330, 9), (0x2342, 8), (0x2330, -1)])
def test_unknown_models_and_counts_derive_nothing(device_id, count):
    assert derived_profile(device_id, count) is None and derived_text(device_id, count) is None


@pytest.mark.parametrize("name", ["h100-sxm", "h100-sxm-0x", "h100-sxm-9x", "h100-sxm-1x-nvl3", "h100-sxm-4x-nvl18",
                                  "h100-sxm-04x", "h100-4x", "cpu", "a40-2x-nvl4", "mi300x-2x-nvl0", ""])
def test_names_that_are_no_derived_profile(name):
    assert parse_name(name) is None and derived_by_name(name) is None


def test_the_acceptance_pair_shows_spec_relative_limits_with_public_sources():
    """`platforms show` of 4x H100 and 1x H200: every limit resolves through the spec table."""
    for name, hbm in (("h100-sxm-4x", 3350.0), ("h200-sxm-1x", 4800.0)):
        profile = derived_by_name(name)
        assert profile is not None
        mem = profile.defaults["device_memory"].limits["bandwidth"]
        assert mem.spec_sources[0].startswith(f"spec.hbm.bandwidth = {hbm:g} GB/s: ")
        gemm = profile.defaults["gemm"].limits["tflops"]
        assert gemm.spec_sources[0].startswith("spec.tensor.bf16_dense = 989 TFLOP/s: ") and "https://" in gemm.source


def test_device_ids_agree_with_the_hand_written_profiles():
    """A hand-written profile's device ids belong to one derived model, of the same GPU model (it wins over it)."""
    for path in sorted(THRESHOLDS.glob("*.yaml")):
        hand = load_profile(path)
        ids = hand.detect.get("pci_device_ids") or ()
        models = {derive.model_of(i) for i in ids if derive.model_of(i)}  # type: ignore[arg-type]
        assert len(models) <= 1, path.name
        if models and "gpu_model" in hand.expect:
            (model,) = models
            assert model is not None and model.gpu_model == hand.expect["gpu_model"], path.name


@pytest.mark.parametrize(("big_id", "small_id", "big", "small", "floor", "spec", "small_floor"), [
    # 4, 2 or 1 A100 SXM4 80GB (0x20b2) on the 80GB part's HBM2e 2039 GB/s, at or below DCGM's own floor for 20b2
    # (1173000 MB/s, NVIDIA/DCGM nvvs/diag-skus.yaml.in), never on the 40GB part's 1555
    (0x20B2, 0x20B0, "a100-sxm-80gb", "a100-sxm", (1160, 1173), 2039, 0.57 * 1555),
    # GH200 144GB HBM3e superchips (0x2348) on 4900 GB/s, at DCGM's floor for 2348 (2340000 MB/s), never on the
    # 96GB part's 4000
    (0x2348, 0x2342, "gh200-144gb", "gh200", (2330, 2340), 4900, 0.53 * 4000),
])
def test_each_memory_variant_derives_its_own_memory_floor(big_id: int, small_id: int, big: str, small: str,
                                                           floor: tuple[int, int], spec: int, small_floor: float) -> None:
    for count in (1, 2, 4):
        b, s = derived_profile(big_id, count, None), derived_profile(small_id, count, None)
        assert b is not None and s is not None
        assert (b.name, s.name) == (f"{big}-{count}x", f"{small}-{count}x")
        assert b.detect["pci_device_ids"] == (big_id,) and s.detect["pci_device_ids"] == (small_id,)
        limit = b.defaults["device_memory"].limits["bandwidth"]
        assert floor[0] <= limit.value <= floor[1] and limit.spec_sources[0].startswith(f"spec.hbm.bandwidth = {spec} GB/s")
        assert s.defaults["device_memory"].limits["bandwidth"].value == pytest.approx(small_floor)
        assert derived_by_name(b.name) == b and derived_by_name(s.name) == s
        assert {k: v for k, v in b.hardware.items() if k != "hbm"} == {k: v for k, v in s.hardware.items() if k != "hbm"}


def test_a_linked_gh200_144gb_derives_from_its_own_device_id() -> None:
    linked = derived_by_name("gh200-144gb-2x-nvl18")
    assert linked is not None and linked.detect["pci_device_ids"] == (0x2348,)


def test_every_model_has_distinct_ids_and_names():
    ids = [i for m in MODELS for i in m.device_ids]
    assert len(ids) == len(set(ids)) and len({m.slug for m in MODELS}) == len(MODELS)
    assert {0x2330, 0x2335, 0x20B0, 0x20B2, 0x2901, 0x2342, 0x26B9, 0x2235, 0x74A1, 0x74A5} <= set(ids)
    assert derive.known_models() == MODELS
